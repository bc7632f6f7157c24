"""Horovod behind the ``Worker`` interface: its collectives, in groups (process sets), with a timeout.

Introduced in lesson 02 (``notebooks/02_horovod.ipynb``; groups: lesson 07).  ``horovod_backend``
starts the job; each rank then talks through a ``HorovodWorker``.  Horovod has every collective
(all-reduce, broadcast, all-gather, reduce-scatter, all-to-all), each limited to a *process set*
when asked, but no point-to-point send/recv.  Its own waits have no time limit, so every wait
here polls with the job's timeout.
"""
from __future__ import annotations

import os
import time

import torch

from .worker import DEFAULT_TIMEOUT, Group, Pending, Worker, check_members

# Horovod's collectives need every rank of a job; it has no send/recv (lesson 06's pipeline).
NO_POINT_TO_POINT = ("Horovod has no point-to-point send/recv (only collectives): "
                     "launch with backend='torchrun' for a pipeline or anything else that sends to one rank")
_PROCESS_SETS: dict[tuple[int, ...], object] = {}   # this process's Horovod process sets, by their ranks


class HorovodWorker(Worker):
    """``Worker`` on Horovod.  Every wait has the job's timeout (Horovod's own waits have none)."""

    backend = "horovod"          # horovod_backend.NAME

    def __init__(self, hvd, device, timeout=DEFAULT_TIMEOUT, run_dir=None):
        super().__init__(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), device,
                         timeout, run_dir)
        self.hvd = hvd

    def _finish(self, handle, what: str, then, async_op: bool):
        """Wait for Horovod's ``handle`` (with the job's timeout), then ``then(result)``: at once, or
        when the caller waits for the ``Pending`` it is handed (lesson 08)."""
        def finish():
            return then(None if handle is None else self._wait(handle, what))
        return Pending(finish) if async_op else finish()

    def all_reduce(self, tensor, op="sum", group=None, async_op=False):
        self.check_op(op)
        hvd = self.hvd
        handle = None if self.alone(group) else hvd.allreduce_async_(
            tensor, op=hvd.Sum if op == "sum" else hvd.Average, process_set=self._set(group))
        return self._finish(handle, "all_reduce", lambda _: tensor, async_op)

    def broadcast(self, tensor, src=0, group=None, async_op=False):
        handle = None if self.alone(group) else self.hvd.broadcast_async_(tensor, root_rank=src,
                                                                           process_set=self._set(group))
        return self._finish(handle, "broadcast", lambda _: tensor, async_op)

    def all_gather(self, tensor, group=None, async_op=False):
        if self.alone(group):
            return self._finish(None, "all_gather", lambda _: [tensor.clone()], async_op)
        handle = self.hvd.allgather_async(tensor.unsqueeze(0), process_set=self._set(group))
        return self._finish(handle, "all_gather", lambda out: list(out.unbind(0)), async_op)

    def reduce_scatter(self, tensor, op="sum", group=None, async_op=False):
        self.check_op(op)
        n = self.pieces(tensor, group)
        if n == 1:
            return self._finish(None, "reduce_scatter", lambda _: tensor.clone(), async_op)
        hvd = self.hvd
        handle = hvd.reducescatter_async(tensor.contiguous(), op=hvd.Sum if op == "sum" else hvd.Average,
                                         process_set=self._set(group))
        return self._finish(handle, "reduce_scatter", lambda out: out, async_op)

    def all_to_all_v(self, tensor, send_counts, recv_counts, group=None):
        if self.alone(group):
            return tensor.clone()
        splits = torch.tensor([int(c) for c in send_counts], dtype=torch.int32)
        out = self._wait(self.hvd.alltoall_async(tensor.contiguous(), splits=splits, process_set=self._set(group)),
                         "all_to_all")
        out = out[0] if isinstance(out, tuple) else out      # (received, how many from each)
        if out.shape[0] != sum(recv_counts):
            raise RuntimeError(f"all_to_all_v: {out.shape[0]} rows arrived, {sum(recv_counts)} were announced")
        return out

    def send(self, tensor, dst, tag=0, async_op=False):
        raise RuntimeError(NO_POINT_TO_POINT)

    def recv(self, tensor, src, tag=0, async_op=False):
        raise RuntimeError(NO_POINT_TO_POINT)

    def recv_any(self, tensor):
        raise RuntimeError(NO_POINT_TO_POINT)

    def exchange(self, outgoing, dst, incoming, src):
        raise RuntimeError(NO_POINT_TO_POINT)

    def barrier(self):
        # An all-reduce of nothing: no rank can finish it before every rank has started it.
        self._wait(self.hvd.allreduce_async_(torch.zeros(1), op=self.hvd.Sum), "barrier")

    def new_group(self, ranks):
        """Lesson 07: a Horovod *process set*.  Horovod allows one set per list of ranks, so a
        rank kept warm for the next job reuses the sets it made before (``_PROCESS_SETS``)."""
        ranks = check_members(ranks, self.world_size)
        if len(ranks) == self.world_size:
            return Group(ranks, self.hvd.global_process_set)
        if len(ranks) == 1:
            return Group(ranks)
        if ranks not in _PROCESS_SETS:
            _PROCESS_SETS[ranks] = self.hvd.add_process_set(list(ranks))
        return Group(ranks, _PROCESS_SETS[ranks])

    def _set(self, group):
        return self.hvd.global_process_set if group is None else group.handle

    def data_parallel(self, model, optimizer, bucket_mb=None):
        """Horovod's way: broadcast rank 0's parameters, wrap the optimizer; its hooks start one
        all-reduce per gradient during ``backward``, and ``step()`` waits for them."""
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def wait(self, optimizer):
        """Lesson 02: wait for the all-reduces that ``DistributedOptimizer`` started in backward.

        ``optimizer.step()`` would wait for each in turn, and Horovod 0.28.1 waits by sleeping
        a whole millisecond between looks (and never gives up).  Waiting here first, with
        short looks and the job's timeout, lets ``step()`` find them all finished.
        """
        for handle, _ in list(optimizer._handles.values()):
            if handle is not None and not callable(handle):
                self._poll(handle, "DistributedOptimizer's gradient all-reduce")

    def stop(self):
        if os.environ.get("HOROVOD_TIMELINE"):       # lesson 10: let rank 0 write the timeline's last events
            self.hvd.stop_timeline()
        _PROCESS_SETS.clear()
        self.hvd.shutdown()

    def _wait(self, handle, what: str):
        """Wait for a Horovod collective and return its result, but not forever."""
        self._poll(handle, what)
        return self.hvd.synchronize(handle)

    def _poll(self, handle, what: str) -> None:
        """Return when a Horovod collective has finished; give up after ``timeout`` seconds.

        ``hvd.synchronize`` has no time limit, and Horovod's "stall check" (which should stop
        a job whose ranks never all join a collective) did not fire in our tests of Horovod
        0.28.1 with Gloo.  So we poll, and give up after ``timeout`` seconds as
        torch.distributed does.
        """
        hvd, pause = self.hvd, 2e-5
        deadline = time.monotonic() + self.timeout
        while not hvd.poll(handle):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} on rank {self.rank} waited more than {self.timeout:g} s: "
                                   "some rank never joined it")
            time.sleep(pause)
            pause = min(2 * pause, 2e-4)   # look often: each look costs microseconds
