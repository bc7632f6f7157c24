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

The groups come from one named mesh (``named_mesh.Mesh``, built once per run; on torchrun
PyTorch's ``DeviceMesh``, on Horovod process sets), and every strategy takes the groups it
needs from it.  This miniature runs two of the three at a time on 4 processes: 2 data x 2
pipeline (``pipeline.train_stage`` in each replica, on torchrun: a pipeline sends to one rank
at a time, which Horovod cannot) and 2 data x 2 tensor (``tensor_parallel.train_on``: the
split block in each replica, on either backend).  Pipeline and tensor together need pipeline
stages that each hold a split block; the training functions do not have them yet.
"""
from __future__ import annotations

import torch

from ..processes.checks import check_int
from ..records import RankRecord
from . import named_mesh
from . import pipeline as pipe
from . import tensor_parallel
from .named_mesh import Mesh

AXES = ("data", "pipeline", "tensor")     # the three this lesson draws (named_mesh.AXES has five)


def grid(data: int, pipeline: int = 1, tensor: int = 1) -> torch.Tensor:
    """Lesson 07: which rank sits where: ``grid[d, s, t]`` is the rank at data replica ``d``,
    pipeline stage ``s``, tensor slice ``t`` (the named mesh's layout, its other axes of size 1)."""
    return named_mesh.layout(dict(named_mesh.check_mesh(data * pipeline * tensor, dict(
        data=data, pipeline=pipeline, tensor=tensor)))).reshape(data, pipeline, tensor)


def groups_of(ranks: torch.Tensor, axis: str) -> list[list[int]]:
    """Lesson 07: the lines of the grid along ``axis``: each list is one process group."""
    moved = ranks.movedim(AXES.index(axis), -1)
    return [row.tolist() for row in moved.reshape(-1, moved.shape[-1])]


def coordinates(ranks: torch.Tensor, rank: int) -> dict[str, int]:
    """Lesson 07: ``{"data": d, "pipeline": s, "tensor": t}`` of ``rank``."""
    where = (ranks == rank).nonzero()[0].tolist()
    return dict(zip(AXES, where))


def gradient_averager(worker, mesh: Mesh, counter: dict):
    """Lesson 07: data parallelism between the pipelines: average each gradient in the data group."""
    group = mesh.group("data")

    def average(params) -> None:
        for q in params.values() if isinstance(params, dict) else params:
            if len(group) > 1:
                counter["data"] += q.grad.numel() * q.grad.element_size()
                worker.all_reduce(q.grad, op="avg", group=group)
    return average


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", data: int, pipeline: int,
                  tensor: int, width: int, depth: int, global_batch_size: int, micro_batches: int, schedule: str,
                  steps: int, lr: float) -> None:
    """Lesson 07: the mesh and each part's settings, checked before any process starts."""
    named_mesh.check_mesh(world_size, dict(data=data, pipeline=pipeline, tensor=tensor))
    tensor_parallel.check_backend("mesh.train", backend, device)
    if pipeline > 1 and backend != "torchrun":
        raise ValueError("mesh.train with pipeline > 1 runs on launch(backend='torchrun') only: Horovod has no "
                         "point-to-point send/recv for the activations; data x tensor runs on Horovod too")
    if pipeline > 1 and tensor > 1:
        raise ValueError("this miniature combines data parallelism with either pipeline or tensor "
                         "parallelism; pipeline and tensor together need stages that each hold a split "
                         "block (see distlab.parallel.mesh)")
    check_int("global_batch_size", global_batch_size)
    if global_batch_size % data:
        raise ValueError(f"the batch of {global_batch_size} does not divide among {data} data replicas")
    if pipeline == 1:
        tensor_parallel.validate_args(tensor, backend=backend, device=device, width=width,
                                      global_batch_size=global_batch_size // data, steps=steps, lr=lr,
                                      dtype="float32")
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

    One ``Mesh`` gives every group; the pipeline (``pipeline > 1``) or the split block (otherwise)
    takes its own from it.  The record says where the rank sits (``config["mesh"]``,
    ``config["groups"]``) and, in ``traffic``, the bytes it sent per step in each kind of group.
    """
    mesh = Mesh(worker, data=data, pipeline=pipeline, tensor=tensor)
    if pipeline > 1:
        counter = {"data": 0}
        record = pipe.train_stage(
            worker, mesh.peers("pipeline"), model="mlp", width=width, depth=depth,
            global_batch_size=global_batch_size, micro_batches=micro_batches, schedule=schedule, chunks=1,
            steps=steps, lr=lr, seed=seed, dtype="float32", group=mesh.group("pipeline").handle,
            replica=(mesh.coordinates["data"], data), average=gradient_averager(worker, mesh, counter))
        record.traffic = dict(record.traffic, data=counter["data"] // steps)
    else:
        record = tensor_parallel.train_on(mesh, worker, width=width, global_batch_size=global_batch_size,
                                          steps=steps, lr=lr, seed=seed, method="data x tensor")
        record.traffic = {"tensor": record.traffic["forward"] + record.traffic["backward"],
                          "data": record.traffic.get("data", 0)}
    record.config.update(mesh={a: mesh.coordinates[a] for a in AXES}, shape=dict(data=data, pipeline=pipeline,
                                                                                  tensor=tensor),
                         groups={axis: mesh.peers(axis) for axis in AXES})
    return record


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})
