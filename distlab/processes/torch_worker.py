"""``Worker`` on ``torch.distributed``: the collectives and messages of a torchrun rank (gloo or NCCL).

Introduced in lesson 01 (the collectives), lesson 06 (messages to one rank) and lesson 07 (groups).
``torch_backend`` starts the job; each of its ranks talks through a ``TorchWorker``.  Every operation
is started with ``async_op=True`` and finished by ``Pending.wait``, which waits with the job's
timeout: a rank that never arrives makes the others fail with an error instead of hanging.  Asked
for ``async_op=True``, the caller gets the ``Pending`` itself and can compute while the bytes travel
(lesson 08's ZeRO-2 reduce-scatters each gradient during backward that way).
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from .worker import Group, Pending, Worker, check_members

NAME = "torchrun"


def comm_library(device: str) -> str:
    """Lesson 00: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device == "cuda" else "gloo"


def _pg(group):
    """The torch.distributed process group of a ``Group`` (None: the whole job)."""
    return None if group is None else group.handle


class TorchWorker(Worker):
    """Lesson 01: ``Worker`` on ``torch.distributed`` (gloo or NCCL)."""

    backend = NAME

    def _finish(self, what: str, works, then, async_op: bool):
        """Wait for ``works`` (torch.distributed's handles) with the job's timeout, then ``then()``:
        at once, or when the caller waits for the ``Pending`` it is handed."""
        def finish():
            for work in works:
                self._wait(work, what)
            return then()
        return Pending(finish) if async_op else finish()

    def _wait(self, work, what: str) -> None:
        """One handle, waited for at most ``timeout`` seconds; the error names the operation and the rank."""
        try:
            work.wait(timedelta(seconds=self.timeout))
        except RuntimeError as err:
            if "timed out" not in str(err).lower():
                raise
            raise TimeoutError(f"{what} on rank {self.rank} waited more than {self.timeout:g} s: some rank never "
                               f"joined it ({err})") from None

    def all_reduce(self, tensor, op="sum", group=None, async_op=False):
        self.check_op(op)
        works = [] if self.alone(group) else [    # gloo has no AVG: sum, then divide
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=_pg(group), async_op=True)]
        n = len(self.members(group))
        return self._finish("all_reduce", works, lambda: tensor.div_(n) if op == "avg" else tensor, async_op)

    def broadcast(self, tensor, src=0, group=None, async_op=False):
        works = [] if self.alone(group) else [dist.broadcast(tensor, src=src, group=_pg(group), async_op=True)]
        return self._finish("broadcast", works, lambda: tensor, async_op)

    def all_gather(self, tensor, group=None, async_op=False):
        if self.alone(group):
            return self._finish("all_gather", [], lambda: [tensor.clone()], async_op)
        out = [torch.empty_like(tensor) for _ in self.members(group)]
        works = [dist.all_gather(out, tensor.contiguous(), group=_pg(group), async_op=True)]
        return self._finish("all_gather", works, lambda: out, async_op)

    def reduce_scatter(self, tensor, op="sum", group=None, async_op=False):
        self.check_op(op)
        n = self.pieces(tensor, group)
        out = tensor.chunk(n)[self.members(group).index(self.rank)].clone()
        works = [] if n == 1 else [dist.reduce_scatter_tensor(out, tensor.contiguous(), op=dist.ReduceOp.SUM,
                                                                group=_pg(group), async_op=True)]
        return self._finish("reduce_scatter", works, lambda: out.div_(n) if op == "avg" else out, async_op)

    def all_to_all_v(self, tensor, send_counts, recv_counts, group=None):
        if self.alone(group):
            return tensor.clone()
        out = tensor.new_empty((sum(recv_counts), *tensor.shape[1:]))
        work = dist.all_to_all_single(out, tensor.contiguous(), list(recv_counts), list(send_counts),
                                      group=_pg(group), async_op=True)
        return self._finish("all_to_all", [work], lambda: out, False)

    def send(self, tensor, dst, tag=0, async_op=False):
        tensor = tensor.contiguous()               # (kept alive by the closure until the send is done)
        return self._finish(f"send to rank {dst}", [dist.isend(tensor, dst, tag=tag)], lambda: None, async_op)

    def recv(self, tensor, src, tag=0, async_op=False):
        return self._finish(f"recv from rank {src}", [dist.irecv(tensor, src, tag=tag)], lambda: tensor, async_op)

    def recv_any(self, tensor):
        work = dist.irecv(tensor)                  # no source: whoever sends first
        self._wait(work, "recv from any rank")
        return work._source_rank()

    def exchange(self, outgoing, dst, incoming, src, async_op=False):
        pairs = zip(outgoing, dst, incoming, src) if isinstance(outgoing, list) else [(outgoing, dst, incoming, src)]
        works = [w for o, d, i, s in pairs for w in (dist.isend(o.contiguous(), d), dist.irecv(i, s))]
        return self._finish("exchange", works, lambda: incoming, async_op)    # (a send's handle keeps its tensor)

    def barrier(self):
        dist.barrier()

    def new_group(self, ranks):
        ranks = check_members(ranks, self.world_size)
        if len(ranks) == self.world_size:
            return Group(ranks, dist.group.WORLD)
        handle = dist.new_group(list(ranks), timeout=timedelta(seconds=self.timeout))
        return Group(ranks, handle if self.rank in ranks else None)

    def mesh_groups(self, layout, names):
        """Lesson 07: PyTorch's own ``DeviceMesh`` (``init_device_mesh``) makes the groups of the
        axes longer than one rank, each with the job's timeout; an axis of one rank needs none."""
        from torch.distributed.device_mesh import init_device_mesh

        where = (layout == self.rank).nonzero()[0].tolist()
        mine = {name: Group((self.rank,)) for name, size in zip(names, layout.shape) if size == 1}
        wide = [(axis, name) for axis, name in enumerate(names) if layout.shape[axis] > 1]
        if not wide:
            return mine, None
        options = (dist.ProcessGroupNCCL.Options() if self.device.type == "cuda"
                   else dist.ProcessGroupGloo._Options())
        options._timeout = timedelta(seconds=self.timeout)
        device_mesh = init_device_mesh(
            self.device.type, tuple(layout.shape[a] for a, _ in wide), mesh_dim_names=tuple(n for _, n in wide),
            backend_override={n: options for _, n in wide})
        for axis, name in wide:
            index = list(where)
            index[axis] = slice(None)
            mine[name] = Group(tuple(layout[tuple(index)].tolist()), device_mesh.get_group(name))
        return mine, device_mesh

    def purpose_group(self, lines, axes, device_mesh=None):
        """Lesson 12: PyTorch's own way: the DeviceMesh's axes ``axes`` flattened into one dimension
        (``device_mesh["data", "context"]._flatten()``, named "data_context"), which PyTorch's APIs (FSDP
        over data x context, as torchtitan shards) can then take by name."""
        if device_mesh is None or not set(axes) <= set(device_mesh.mesh_dim_names or ()):
            return super().purpose_group(lines, axes, device_mesh)
        options = (dist.ProcessGroupNCCL.Options() if self.device.type == "cuda"
                   else dist.ProcessGroupGloo._Options())
        options._timeout = timedelta(seconds=self.timeout)
        flat = device_mesh[tuple(axes)]._flatten("_".join(axes), backend_override=options)
        return Group(tuple(sorted(flat.mesh.flatten().tolist())), flat.get_group())

    def data_parallel(self, model, optimizer, bucket_mb=None):
        """Lesson 01: DistributedDataParallel: it broadcasts rank 0's parameters when it is built, then
        all-reduces gradients in buckets while ``backward`` is still running (lesson 15: of at most
        ``bucket_mb`` MiB, its ``bucket_cap_mb``)."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        cuda = self.device.type == "cuda"
        cap = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
        return DDP(model, device_ids=[self.device.index] if cuda else None, **cap), optimizer

    def stop(self):
        if dist.is_initialized():
            dist.destroy_process_group()
