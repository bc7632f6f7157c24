"""Inside a worker: who am I, which device is mine, and how do I talk to the others.

Introduced in lesson 01.  Every training function in distlab receives one ``Worker``
object.  It hides the difference between the two launch backends (torchrun's
``torch.distributed`` and Horovod) behind four collectives, so the *same* training code
runs on either:

==================  ==========================================  ====================
``Worker``          torch.distributed                           Horovod
==================  ==========================================  ====================
``all_reduce``      ``dist.all_reduce`` (sum, then divide)      ``hvd.allreduce_``
``broadcast``       ``dist.broadcast``                          ``hvd.broadcast_``
``all_gather``      ``dist.all_gather``                         ``hvd.allgather``
``barrier``         ``dist.barrier``                            ``hvd.barrier``
==================  ==========================================  ====================

Device policy (``choose_device``): one GPU per rank with NCCL when the machine has at
least as many GPUs as local ranks; otherwise CPU processes that talk over gloo.  The code
path is the same; only the device and the communication library change.

Every collective has a timeout (``timeout`` seconds, 60 by default): a rank that never
arrives makes the others fail with an error instead of waiting forever.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT = 60.0


def choose_device(requested: str = "auto", local_world_size: int = 1) -> str:
    """Lesson 00: pick ``"cuda"`` or ``"cpu"`` for a job of ``local_world_size`` ranks per machine.

    ``"auto"`` uses the GPUs only when there is one for every local rank (sharing a GPU
    between ranks of one job would hide what the lessons measure).  ``"cuda"`` insists
    and fails clearly when the GPUs are not there.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {requested!r}")
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "cuda" and n_gpus < local_world_size:
        raise RuntimeError(f"device='cuda' needs one GPU per rank: {local_world_size} ranks asked for, "
                           f"{n_gpus} GPU(s) visible. Use device='cpu' (or 'auto') to run on CPU "
                           "processes over gloo.")
    if requested == "auto":
        return "cuda" if n_gpus >= local_world_size else "cpu"
    return requested


def comm_library(device: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device == "cuda" else "gloo"


@dataclass
class Worker:
    """What a training function needs to know about itself and its peers (lesson 01)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int         # ranks of this job on this machine
    backend: str                  # "torchrun" or "horovod"
    device: torch.device
    timeout: float = DEFAULT_TIMEOUT
    run_dir: str | None = None    # where progress lines go (set by the launcher)
    _hvd: object = field(default=None, repr=False)
    _last_progress: float = field(default=0.0, repr=False)

    # -- the collectives -------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Combine ``tensor`` across all ranks in place; ``op`` is ``"sum"`` or ``"avg"``."""
        if op not in ("sum", "avg"):
            raise ValueError(f"op must be 'sum' or 'avg', got {op!r}")
        if self._hvd is not None:
            hvd = self._hvd
            self._hvd_wait(hvd.allreduce_async_(tensor, op=hvd.Sum if op == "sum" else hvd.Average),
                           "all_reduce")
            return tensor
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)   # gloo has no AVG: sum, then divide
        if op == "avg":
            tensor.div_(self.world_size)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Overwrite ``tensor`` on every rank with rank ``src``'s copy."""
        if self._hvd is not None:
            self._hvd_wait(self._hvd.broadcast_async_(tensor, root_rank=src), "broadcast")
        else:
            dist.broadcast(tensor, src=src)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape on every rank), in rank order."""
        if self._hvd is not None:
            gathered = self._hvd_wait(self._hvd.allgather_async(tensor.unsqueeze(0)), "all_gather")
            return list(gathered.unbind(0))
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor)
        return out

    def barrier(self) -> None:
        """Wait until every rank has arrived here."""
        if self._hvd is not None:
            # An all-reduce of nothing: no rank can finish it before every rank has started it.
            self._hvd_wait(self._hvd.allreduce_async_(torch.zeros(1), op=self._hvd.Sum), "barrier")
        else:
            dist.barrier()

    def wait_for_optimizer(self, opt) -> None:
        """Lesson 02: wait for the all-reduces that Horovod's ``DistributedOptimizer`` started.

        Its hooks start one all-reduce per gradient during ``backward``; ``opt.step()`` then
        waits for each in turn, and Horovod 0.28.1 waits by sleeping a whole millisecond
        between looks (and never gives up).  Waiting here first, with short looks and the
        job's timeout, lets ``step()`` find them all finished.
        """
        for handle, _ in list(opt._handles.values()):
            if handle is not None and not callable(handle):
                self._hvd_poll(handle, "DistributedOptimizer's gradient all-reduce")

    def _hvd_wait(self, handle, what: str):
        """Lesson 02: wait for a Horovod collective and return its result, but not forever."""
        self._hvd_poll(handle, what)
        return self._hvd.synchronize(handle)

    def _hvd_poll(self, handle, what: str) -> None:
        """Return when a Horovod collective has finished; give up after ``timeout`` seconds.

        ``hvd.synchronize`` has no time limit, and Horovod's "stall check" (which should stop
        a job whose ranks never all join a collective) did not fire in our tests of Horovod
        0.28.1 with Gloo.  So we poll, and give up after ``timeout`` seconds as
        torch.distributed does.
        """
        hvd, pause = self._hvd, 2e-5
        deadline = time.monotonic() + self.timeout
        while not hvd.poll(handle):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} on rank {self.rank} waited more than {self.timeout:g} s: "
                                   "some rank never joined it")
            time.sleep(pause)
            pause = min(2 * pause, 2e-4)   # look often: each look costs microseconds

    # -- talking to the launcher -----------------------------------------------------------
    def progress(self, step: int, total: int, force: bool = False, **metrics) -> None:
        """Stream progress to the notebook or terminal that launched the job.

        One JSON line per call in ``run_dir/progress_<rank>.jsonl``, at most ten a second
        (the launcher reads these files; workers never print into the notebook).
        """
        if self.run_dir is None:
            return
        now = time.time()
        if not force and step < total and now - self._last_progress < 0.1:
            return
        self._last_progress = now
        line = {"rank": self.rank, "step": step, "total": total, "time": now}
        line.update({k: float(v) for k, v in metrics.items()})
        with open(os.path.join(self.run_dir, f"progress_{self.rank}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def bind_to_cores(local_rank: int, local_world_size: int, threads: int) -> list[int]:
    """Lesson 02: give this CPU rank ``threads`` cores of its own, if this machine has enough.

    Why: left alone, the operating system moves every thread of every rank from core to
    core.  A rank's helper threads (gloo's, Horovod's background thread, which wakes every
    millisecond) then wake on whichever core looks free, interrupt the *other* rank's
    computation and leave its caches cold.  Bound, each rank keeps its own cores and its
    helpers interrupt only their own rank.  Measured on 2 cores, 2 ranks, MLP width 1024:
    a DDP step went from 43.7 to 39.4 ms, a Horovod step from 52.9 to 44 ms.

    Binds only when the ranks' threads fit (``local_world_size * threads`` cores at most):
    otherwise binding would force ranks to share cores the system could have spread.  Nor
    in a container with a CPU quota (Binder, most Kubernetes pods): it sees every core of
    its host but may use only a share of their time, and other containers run on the same
    cores, so a rank tied to one core could not move away from a busy neighbour.
    Returns the cores bound to, or ``[]`` when it did not bind.
    """
    if not hasattr(os, "sched_setaffinity") or cpu_quota() is not None:
        return []                                   # (sched_setaffinity: Linux only)
    cores = sorted(os.sched_getaffinity(0))
    if local_world_size * threads > len(cores):
        return []
    mine = set(cores[local_rank * threads:(local_rank + 1) * threads])
    for tid in os.listdir("/proc/self/task"):       # every thread that exists now; later
        try:                                        # ones inherit their creator's cores
            os.sched_setaffinity(int(tid), mine)
        except OSError:                             # a thread that has just ended
            pass
    return sorted(mine)


def cpu_quota(cgroup: str = "/sys/fs/cgroup") -> float | None:
    """Lesson 02: how many cores' worth of time this container may use, or None if unlimited.

    Read from the control group: ``cpu.max`` ("max 100000" or "200000 100000") in cgroup
    v2, ``cpu/cpu.cfs_quota_us`` (-1: no quota) over ``cpu/cpu.cfs_period_us`` in v1.
    """
    try:
        with open(os.path.join(cgroup, "cpu.max")) as f:
            quota, period = f.read().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(cgroup, "cpu", "cpu.cfs_quota_us")) as f:
            quota = int(f.read())
        with open(os.path.join(cgroup, "cpu", "cpu.cfs_period_us")) as f:
            period = int(f.read())
    except (OSError, ValueError):
        return None
    return None if quota < 0 else quota / period


def start_worker(backend: str, device: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 run_dir: str | None = None) -> Worker:
    """Join the job: called once at the start of every worker process.

    torchrun passes RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in the
    environment; Horovod knows them after ``hvd.init()``.
    """
    if backend == "torchrun":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        dev = choose_device(device, local_world)
        if dev == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(comm_library(dev), timeout=timedelta(seconds=timeout))
        return Worker(rank, world, local_rank, local_world, backend,
                      _torch_device(dev, local_rank), timeout, run_dir)
    if backend == "horovod":
        import horovod.torch as hvd
        # Horovod reads Gloo's time limit (for connecting, and for each transfer) from the
        # environment in init(); a rank that never joins a collective is _hvd_wait's business.
        os.environ["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, math.ceil(timeout)))
        hvd.init()
        dev = choose_device(device, hvd.local_size())
        if dev == "cuda":
            torch.cuda.set_device(hvd.local_rank())
        return Worker(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), backend,
                      _torch_device(dev, hvd.local_rank()), timeout, run_dir, _hvd=hvd)
    raise ValueError(f"unknown backend {backend!r}; choose 'torchrun' or 'horovod'")


def stop_worker(worker: Worker) -> None:
    """Leave the job cleanly (destroy the process group / shut Horovod down)."""
    if worker._hvd is not None:
        worker._hvd.shutdown()
    elif dist.is_initialized():
        dist.destroy_process_group()


def _torch_device(dev: str, local_rank: int) -> torch.device:
    return torch.device("cuda", local_rank) if dev == "cuda" else torch.device("cpu")
