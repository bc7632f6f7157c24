"""3D parallelism in miniature: the ranks as a grid of data x pipeline x tensor.

Introduced in lesson 07 ("Tensor and 3D parallelism").  Large models combine the three
ways of splitting the work (DeepSpeed and Megatron-LM call it 3D parallelism): ``tensor``
ranks share each layer's matrices, ``pipeline`` ranks hold consecutive stages, and
``data`` replicas of the whole arrangement train on different slices of the batch.  The whole
topology is one reshaped list of ranks::

    grid = torch.arange(world_size).reshape(data, pipeline, tensor)

and every process group is a line through that grid: the ranks that differ only in their
tensor coordinate form a tensor group (they talk inside every layer), those that differ only
in their pipeline coordinate a pipeline (activations pass along it), those that differ only in
their data coordinate a data group (they average gradients once per step).  Ranks that talk
most sit closest: on a real cluster the tensor groups stay inside one machine.

This miniature runs two of the three at a time on 4 processes: 2 data x 2 pipeline
(``pipeline.train_stage`` in each replica) and 2 data x 2 tensor (``tensor_parallel``'s
split block in each replica).  A full 2 x 2 x 2 grid needs 8 processes and a model whose
pipeline stages each hold a split block; the grid and the groups below already allow it,
the training functions do not.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..comm.collectives import check_torchrun
from ..data import global_batch, load_digits
from ..processes.checks import check_int
from ..records import RankRecord
from . import pipeline as pipe
from . import tensor_parallel
from .loop import start, train_steps

AXES = ("data", "pipeline", "tensor")


def check_mesh(world_size: int, data: int, pipeline: int, tensor: int) -> None:
    """Lesson 07: the grid must use every rank exactly once."""
    for name, size in zip(AXES, (data, pipeline, tensor)):
        check_int(name, size)
    if data * pipeline * tensor != world_size:
        raise ValueError(f"a mesh of data {data} x pipeline {pipeline} x tensor {tensor} = "
                         f"{data * pipeline * tensor} ranks does not match the world size {world_size}")


def grid(data: int, pipeline: int = 1, tensor: int = 1) -> torch.Tensor:
    """Lesson 07: which rank sits where: ``grid[d, s, t]`` is the rank at data replica ``d``,
    pipeline stage ``s``, tensor slice ``t``."""
    return torch.arange(data * pipeline * tensor).reshape(data, pipeline, tensor)


def groups_of(ranks: torch.Tensor, axis: str) -> list[list[int]]:
    """Lesson 07: the lines of the grid along ``axis``: each list is one process group."""
    moved = ranks.movedim(AXES.index(axis), -1)
    return [row.tolist() for row in moved.reshape(-1, moved.shape[-1])]


def coordinates(ranks: torch.Tensor, rank: int) -> dict[str, int]:
    """Lesson 07: ``{"data": d, "pipeline": s, "tensor": t}`` of ``rank``."""
    where = (ranks == rank).nonzero()[0].tolist()
    return dict(zip(AXES, where))


def make_groups(ranks: torch.Tensor, rank: int) -> dict[str, tuple[list[int], object]]:
    """Lesson 07: this rank's group along each axis, ``{axis: (its ranks, process group)}``.

    ``dist.new_group`` must be called by *every* rank for *every* group, in the same order,
    even for groups it is not in: that is why the loop runs over all of them.
    """
    mine = {}
    for axis in AXES:
        for members in groups_of(ranks, axis):
            group = dist.new_group(members)
            if rank in members:
                mine[axis] = (members, group)
    return mine


def gradient_averager(members: list[int], group, counter: dict):
    """Lesson 07: data parallelism between the replicas: average each gradient in ``group``."""
    def average(params) -> None:
        for q in params.values() if isinstance(params, dict) else params:
            if len(members) > 1:
                counter["data"] += q.grad.numel() * q.grad.element_size()
                dist.all_reduce(q.grad, group=group)
                q.grad /= len(members)
    return average


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", data: int, pipeline: int,
                  tensor: int, width: int, depth: int, global_batch_size: int, micro_batches: int, schedule: str,
                  steps: int, lr: float) -> None:
    """Lesson 07: the mesh and each part's settings, checked before any process starts."""
    tensor_parallel.check_backend("mesh.train", backend, device)
    check_mesh(world_size, data, pipeline, tensor)
    if pipeline > 1 and tensor > 1:
        raise ValueError("this miniature combines data parallelism with either pipeline or tensor "
                         "parallelism; pipeline and tensor together need 8 processes and stages that "
                         "each hold a split block (see distlab.parallel.mesh)")
    check_int("global_batch_size", global_batch_size)
    if global_batch_size % data:
        raise ValueError(f"the batch of {global_batch_size} does not divide among {data} data replicas")
    if tensor > 1:
        tensor_parallel.validate_args(tensor, width=width, global_batch_size=global_batch_size // data,
                                      steps=steps, lr=lr, dtype="float32")
        if depth != 3:
            raise ValueError("tensor parallelism here splits the depth-3 MLP's block: use depth=3")
    else:
        pipeline_settings = dict(model="mlp", width=width, depth=depth, micro_batches=micro_batches,
                                 schedule=schedule, chunks=1, steps=steps, lr=lr, dtype="float32")
        pipe.validate_args(pipeline, global_batch_size=global_batch_size // data, **pipeline_settings)


def train(worker, *, data: int = 2, pipeline: int = 2, tensor: int = 1, width: int = 64, depth: int = 3,
          global_batch_size: int = 64, micro_batches: int = 2, schedule: str = "1f1b", steps: int = 20,
          lr: float = 0.1, seed: int = 0) -> RankRecord:
    """Lesson 07: the MLP trained on a ``data x pipeline x tensor`` grid of ranks.

    The record says where the rank sits (``config["mesh"]``, ``config["groups"]``) and, in
    ``traffic``, the bytes it sent per step in each kind of group.
    """
    check_torchrun(worker)
    ranks = grid(data, pipeline, tensor)
    groups = make_groups(ranks, worker.rank)
    where = coordinates(ranks, worker.rank)
    counter = {"data": 0}
    members, group = groups["data"]
    average = gradient_averager(members, group, counter)
    if tensor == 1:
        peers, pipe_group = groups["pipeline"]
        record = pipe.train_stage(
            worker, peers, model="mlp", width=width, depth=depth, global_batch_size=global_batch_size,
            micro_batches=micro_batches, schedule=schedule, chunks=1, steps=steps, lr=lr, seed=seed,
            dtype="float32", group=pipe_group, replica=(where["data"], data), average=average)
    else:
        record = _train_tensor(worker, groups["tensor"], where, data, average, width=width,
                               global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed)
    record.config.update(mesh=where, shape=dict(data=data, pipeline=pipeline, tensor=tensor),
                         groups={axis: groups[axis][0] for axis in AXES})
    record.traffic = dict(record.traffic, data=counter["data"] // steps)
    return record


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "cpu", "cuda", "checkpoint", "fault"})


class _SplitAndAverage(tensor_parallel.SplitBlock):
    """Lesson 07: the tensor-parallel block inside a replica, plus the replicas' average."""

    def __init__(self, worker, members, group, average):
        super().__init__(worker, use_torch=False, members=members, group=group)
        self.average = average

    def communicate(self, run, step: int):
        super().communicate(run, step)
        self.average(list(run.model.parameters()))
        return None


def _train_tensor(worker, tensor_group, where, replicas, average, *, width, global_batch_size, steps, lr,
                  seed) -> RankRecord:
    members, group = tensor_group
    run = start(worker, model="mlp", width=width, lr=lr, seed=seed, dtype="float32", depth=3, shard=(0, 1),
                method="data x tensor", config=dict(model="mlp", depth=3, width=width,
                                                   batch_size=global_batch_size // replicas,
                                                   global_batch_size=global_batch_size, steps=steps, lr=lr,
                                                   seed=seed, dtype="float32"))
    strategy = _SplitAndAverage(worker, members, group, average)
    n, d, b = load_digits().n_train, where["data"], global_batch_size // replicas
    record = train_steps(run, strategy, steps,
                         lambda step: global_batch(n, 1, global_batch_size, step, seed=seed)[d * b:(d + 1) * b])
    record.traffic = {"tensor": sum(strategy.per_step[-1].values())}
    return record
