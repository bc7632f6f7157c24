"""Inside a rank: who am I, which device is mine, and how do I talk to the others.

Introduced in lesson 01.  Every training function in distlab receives one ``Worker``.  This
module is the *interface*; each launch backend implements it in a module of its own:

=====================  ==========================================  ====================================
``Worker``             ``torch_worker.TorchWorker`` (torchrun)     ``horovod_worker.HorovodWorker``
=====================  ==========================================  ====================================
``all_reduce``         ``dist.all_reduce`` (sum, then divide)      ``hvd.allreduce_async_``
``broadcast``          ``dist.broadcast``                          ``hvd.broadcast_async_``
``all_gather``         ``dist.all_gather``                         ``hvd.allgather_async``
``reduce_scatter``     ``dist.reduce_scatter_tensor``              ``hvd.reducescatter_async``
``all_to_all``         ``dist.all_to_all_single``                  ``hvd.alltoall_async``
``send``/``recv``      ``dist.isend``/``dist.irecv`` (with tags)   none: Horovod has no point-to-point
``recv_any``           ``dist.irecv`` from any rank                none
``exchange``           ``dist.isend`` and ``dist.irecv`` at once    none (lesson 12's ring needs it)
``new_group``          ``dist.new_group``                          ``hvd.add_process_set``
``barrier``            ``dist.barrier``                            an all-reduce of nothing
``data_parallel``      ``DistributedDataParallel``                 ``hvd.DistributedOptimizer``
``wait``               nothing (DDP waits inside ``backward``)     the optimizer's all-reduces
=====================  ==========================================  ====================================

so the *same* training code runs on either, and nothing outside the backends' modules
touches torch.distributed's process group or Horovod's internals.

Device policy (``devices.choose_device``): one GPU per rank with NCCL when the machine has at
least as many GPUs as local ranks; otherwise CPU processes that talk over gloo.  The code path
is the same; only the device and the communication library change.

Lesson 07: every collective takes an optional ``group`` (a ``Group``: some of the job's
ranks, made by ``new_group`` or by a ``train.mesh.Mesh``), so that tensor, pipeline and
data groups of one job talk among themselves; without one it involves every rank.  On
torchrun a group is a torch.distributed process group, on Horovod a *process set*.

Every collective has a timeout (``timeout`` seconds, 60 by default): a rank that never
arrives makes the others fail with an error instead of waiting forever.

Asynchronous operations: ``all_reduce``, ``broadcast``, ``all_gather``, ``reduce_scatter``, ``send``,
``recv`` and ``exchange`` take ``async_op=True`` and then return at once with a ``Pending``, whose
``wait()`` finishes the operation (with the same timeout) and returns what the blocking call would have.
Between the two the rank computes while the bytes travel: the overlap that bucketed gradient
averaging (lesson 08's ZeRO-2, and the later time levers) is made of, and that hides ring
attention's hops behind its blocks of compute (lesson 15, ``context.ring_overlap``).
"""
from __future__ import annotations

import importlib
import json
import os
import time
from dataclasses import dataclass, field

import torch

DEFAULT_TIMEOUT = 60.0
# The launch backends, and the module that implements this interface for each (imported
# only when used: a torchrun job never imports Horovod).
BACKENDS = {"torchrun": "distlab.processes.torch_backend",
            "horovod": "distlab.processes.horovod_backend"}


def backend_module(name: str):
    """Lesson 01: the module that starts and runs jobs on backend ``name``."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name])


@dataclass(frozen=True)
class Group:
    """Lesson 07: some of the job's ranks that talk among themselves, in rank order.

    ``handle`` is the backend's own object (a torch.distributed process group, a Horovod
    ``ProcessSet``); a group of one rank needs none (its collectives copy, send nothing).
    """

    ranks: tuple[int, ...]
    handle: object = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.ranks)

    def index(self, rank: int) -> int:
        """Where ``rank`` sits in the group (its ``group rank``)."""
        return self.ranks.index(rank)


class Pending:
    """Lesson 08: an operation in flight.  ``wait()`` finishes it (with the job's timeout) and returns
    what the blocking call returns; waiting twice returns the same result without waiting again."""

    def __init__(self, finish):
        self._finish, self._done, self._result = finish, False, None

    def wait(self):
        if not self._done:
            self._result, self._done = self._finish(), True
        return self._result


def check_members(ranks, world_size: int) -> tuple[int, ...]:
    """Lesson 07: a group's ranks: distinct ranks of the job, returned sorted."""
    ranks = tuple(sorted(int(r) for r in ranks))
    if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= world_size:
        raise ValueError(f"a group needs distinct ranks between 0 and {world_size - 1}, got {list(ranks)}")
    return ranks


@dataclass
class Worker:
    """What a training function needs to know about itself and its peers (lesson 01)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int         # ranks of this job on this machine
    device: torch.device
    timeout: float = DEFAULT_TIMEOUT
    run_dir: str | None = None    # where progress lines go (set by the launcher)
    _last_progress: float = field(default=0.0, repr=False)
    # what the job asked for besides its arguments (lesson 10): checkpoint settings
    # (``checkpoint.Checkpointer``), a failure on purpose (``faults``), TensorBoard files (``metrics``)
    checkpoint: dict | None = None
    fault: dict | None = None
    tensorboard: bool = False

    # This base class is a process with no job at all (``data_parallel.train_single`` trains
    # as one); each backend's subclass names itself and implements the collectives.
    backend = "single"

    # -- the collectives: every rank of the group must call them, in the same order -----------
    # ``group=None`` means every rank of the job; ranks (``src``, ``dst``) are ranks of the job.
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", group: Group | None = None,
                   async_op: bool = False) -> torch.Tensor:
        """Combine ``tensor`` across the group in place; ``op`` is ``"sum"`` or ``"avg"``."""
        raise NotImplementedError

    def broadcast(self, tensor: torch.Tensor, src: int = 0, group: Group | None = None,
                  async_op: bool = False) -> torch.Tensor:
        """Overwrite ``tensor`` on every rank of the group with rank ``src``'s copy."""
        raise NotImplementedError

    def all_gather(self, tensor: torch.Tensor, group: Group | None = None,
                   async_op: bool = False) -> list[torch.Tensor]:
        """Every group member's ``tensor`` (same shape on every rank), in rank order."""
        raise NotImplementedError

    def reduce_scatter(self, tensor: torch.Tensor, op: str = "sum", group: Group | None = None,
                       async_op: bool = False) -> torch.Tensor:
        """Lesson 03's first half: combine ``tensor`` across the group and keep only this rank's
        share: cut along dim 0 into ``len(group)`` equal pieces, the ``i``-th member keeps piece ``i``."""
        raise NotImplementedError

    def all_to_all(self, tensor: torch.Tensor, group: Group | None = None) -> torch.Tensor:
        """Cut ``tensor`` along dim 0 into ``len(group)`` pieces, send piece ``i`` to member ``i``;
        return the pieces received, in the members' order (expert parallelism's exchange): the uneven
        exchange's simplest case, equal pieces."""
        n = self.pieces(tensor, group)
        return self.all_to_all_v(tensor, [len(tensor) // n] * n, [len(tensor) // n] * n, group)

    def all_to_all_v(self, tensor: torch.Tensor, send_counts, recv_counts, group: Group | None = None) -> torch.Tensor:
        """Lesson 13: an all-to-all whose pieces differ in size (MPI's Alltoallv): the first
        ``send_counts[0]`` rows of ``tensor`` go to member 0, the next ``send_counts[1]`` to member 1, ...;
        returns ``sum(recv_counts)`` rows, member 0's first.  Expert parallelism's exchange: how many
        tokens a rank routes to each other rank's experts changes every step."""
        raise NotImplementedError

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0, async_op: bool = False) -> None:
        """Lesson 06: send ``tensor`` to rank ``dst`` (waits until it has been taken).  ``tag`` tells
        apart messages between the same two ranks (a pipeline's activations from its gradients)."""
        raise NotImplementedError

    def recv(self, tensor: torch.Tensor, src: int, tag: int = 0, async_op: bool = False) -> torch.Tensor:
        """Lesson 06: fill ``tensor`` with what rank ``src`` sends with ``tag``."""
        raise NotImplementedError

    def recv_any(self, tensor: torch.Tensor) -> int:
        """Lesson 04: fill ``tensor`` with the first message any rank sends; returns the sender
        (asynchronous SGD's server answers whichever worker pushed first)."""
        raise NotImplementedError

    def exchange(self, outgoing: torch.Tensor, dst: int, incoming: torch.Tensor, src: int,
                 async_op: bool = False) -> torch.Tensor:
        """Lesson 12: send ``outgoing`` to rank ``dst`` while filling ``incoming`` from rank ``src``.
        Both start before either is waited for: in a ring where every rank first sent and only then
        received, each could wait for a neighbour that is itself waiting (lesson 03).  Lists (one
        message to and from each partner, lesson 13's all-to-all by hand): all start, then all are waited for.
        Lesson 15: with ``async_op=True`` it returns a ``Pending`` at once (its ``wait()`` gives ``incoming``),
        so that the ring computes with the block it holds while the next one travels.  Messages between
        the same two ranks are matched in the order they were started."""
        raise NotImplementedError

    def barrier(self) -> None:
        """Wait until every rank has arrived here."""
        raise NotImplementedError

    def new_group(self, ranks) -> Group:
        """Lesson 07: a group of ``ranks``.  Every rank of the job must make every group, in the
        same order, even the groups it is not in."""
        raise NotImplementedError

    def mesh_groups(self, layout: torch.Tensor, names: tuple[str, ...]) -> tuple[dict[str, Group], object]:
        """Lesson 07: this rank's group along each axis of ``layout`` (a tensor of ranks whose
        dimensions are called ``names``): the line through it along that axis.  Also returns the
        backend's own mesh object, if it has one (None here)."""
        mine = {}
        for axis, name in enumerate(names):
            moved = layout.movedim(axis, -1)
            for line in moved.reshape(-1, moved.shape[-1]).tolist():
                group = self.new_group(line)          # every rank makes every group, in order
                if self.rank in line:
                    mine[name] = group
        return mine, None

    def purpose_group(self, lines: list[list[int]], axes: tuple[str, ...], device_mesh=None) -> Group:
        """Lesson 12: every group of ``lines`` (the ranks that differ only along ``axes``), made by every
        rank in order; returns this rank's.  On Horovod, process sets; torchrun flattens its DeviceMesh."""
        mine = None
        for ranks in lines:
            group = self.new_group(ranks)
            if self.rank in ranks:
                mine = group
        return mine

    def members(self, group: Group | None) -> tuple[int, ...]:
        """The ranks of ``group`` (every rank when it is None)."""
        return tuple(range(self.world_size)) if group is None else group.ranks

    def alone(self, group: Group | None) -> bool:
        """True when ``group`` is this rank alone: its collectives send nothing."""
        return len(self.members(group)) == 1

    def pieces(self, tensor: torch.Tensor, group: Group | None) -> int:
        """How many pieces reduce-scatter and all-to-all cut ``tensor`` into (checked)."""
        n = len(self.members(group))
        if tensor.dim() == 0 or tensor.shape[0] % n:
            raise ValueError(f"a tensor of shape {tuple(tensor.shape)} does not cut into {n} equal pieces "
                             "along dim 0")
        return n

    # -- the backend's own data parallelism -------------------------------------------------
    def data_parallel(self, model, optimizer, bucket_mb: float | None = None):
        """Lesson 01: wrap ``model`` and ``optimizer`` in the backend's own data parallelism.

        Returns ``(model, optimizer)`` to train with: they start from rank 0's parameters
        and average the gradients during ``backward``.  ``bucket_mb`` (lesson 15): the cap of
        DDP's buckets (None: its default); Horovod's fusion buffer is set when its job starts.
        """
        raise NotImplementedError

    def wait(self, optimizer) -> None:
        """Wait (with the timeout) for the communication the wrapper started in ``backward``."""

    def synchronize(self) -> None:
        """Lesson 05: wait for the work queued on this rank's GPU, so that a clock read next times the
        work, not its queueing (a GPU runs kernels after the Python that launched them has moved on).
        Nothing to wait for on a CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def stop(self) -> None:
        """Leave the job cleanly (called once, at the end of the rank's life)."""

    @staticmethod
    def check_op(op: str) -> None:
        if op not in ("sum", "avg"):
            raise ValueError(f"op must be 'sum' or 'avg', got {op!r}")

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
