"""3D parallelism in miniature: the ranks as a grid of data x pipeline x tensor.

Introduced in lesson 07 ("Tensor and 3D parallelism").  Large models combine the three
ways of splitting the work (DeepSpeed calls it 3D parallelism; Megatron-LM's paper, Narayanan
et al. 2021, PTD-P): ``tensor`` ranks share each layer's matrices, ``pipeline`` ranks hold consecutive stages, and
``data`` replicas of the whole arrangement train on different slices of the batch.  The whole
topology is one reshaped list of ranks::

    grid = torch.arange(world_size).reshape(data, pipeline, tensor)

and every process group is a line through that grid: the ranks that differ only in their
tensor coordinate form a tensor group (they talk inside every layer), those that differ only
in their pipeline coordinate a pipeline (activations pass along it), those that differ only in
their data coordinate a data group (they average gradients once per step).  Ranks that talk
most sit closest: on a real cluster the tensor groups stay inside one machine.

The groups come from one named mesh (``train.mesh.Mesh``, built once per run; on torchrun
PyTorch's ``DeviceMesh``, on Horovod process sets), and every strategy takes the groups it
needs from it.  This miniature runs two of the three at a time on 4 processes: 2 data x 2
pipeline (``pipeline.train_stage`` in each replica, on torchrun: a pipeline sends to one rank
at a time, which Horovod cannot) and 2 data x 2 tensor (``tensor_parallel.train_on``: the
split block in each replica, on either backend); and 2 pipeline x 2 tensor, where the stage
holding the block splits it across its tensor group (``_train_split_stages``, on torchrun).
"""
from __future__ import annotations

import torch

from ..data import load_digits, shard_indices
from ..models import build_model
from ..checks import check_int
from ..records import RankRecord
from ..train.reduce import GradientReducer
from ..pipeline import stages
from ..tensor import tensor_parallel
from ..pipeline import pipeline as pipe
from ..train.mesh import Mesh, check_mesh, layout

BLOCK = ("fc2", "fc3")     # the layers tensor parallelism splits (tensor_parallel.parallel_mlp)

AXES = ("data", "pipeline", "tensor")     # the three this lesson draws (train.mesh.AXES has five)


def grid(data: int, pipeline: int = 1, tensor: int = 1) -> torch.Tensor:
    """Lesson 07: which rank sits where: ``grid[d, s, t]`` is the rank at data replica ``d``,
    pipeline stage ``s``, tensor slice ``t`` (the named mesh's layout, its other axes of size 1)."""
    return layout(dict(check_mesh(data * pipeline * tensor, dict(
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
    """Lesson 07: data parallelism between the pipelines: each gradient averaged in the data group, by
    the one gradient reducer (``train.reduce``, by hand), made for the stage's parameters on first use."""
    made = {}

    def average(params: dict) -> None:
        if "reducer" not in made:
            made["reducer"] = GradientReducer(worker, params, mesh, "by_hand")
        sent = made["reducer"].sent
        made["reducer"].reduce()
        counter["data"] += made["reducer"].sent - sent
    return average


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", data: int, pipeline: int,
                  tensor: int, width: int, depth: int, global_batch_size: int, micro_batches: int, schedule: str,
                  steps: int, lr: float) -> None:
    """Lesson 07: the mesh and each part's settings, checked before any process starts."""
    check_mesh(world_size, dict(data=data, pipeline=pipeline, tensor=tensor))
    tensor_parallel.check_backend("mesh.train", backend, device)
    if pipeline > 1 and backend != "torchrun":
        raise ValueError("mesh.train with pipeline > 1 runs on launch(backend='torchrun') only: Horovod has no "
                         "point-to-point send/recv for the activations; data x tensor runs on Horovod too")
    check_int("global_batch_size", global_batch_size)
    if global_batch_size % data:
        raise ValueError(f"the batch of {global_batch_size} does not divide among {data} data replicas")
    if tensor > 1 and depth != 3:
        raise ValueError("tensor parallelism here splits the depth-3 MLP's block: use depth=3")
    if pipeline > 1 and tensor > 1:
        tensor_parallel.check_tensor_parallel(width, tensor)
        held = [[n for n in BLOCK if n in dict(part.named_children())] for part in _parts(width, pipeline)]
        if [n for n in held if n] != [list(BLOCK)]:
            raise ValueError(f"pipeline {pipeline} cuts the split block {' and '.join(BLOCK)} apart "
                             f"({held}): both must sit in one stage; use fewer pipeline stages")
    if pipeline == 1:
        tensor_parallel.validate_args(tensor, backend=backend, device=device, width=width,
                                      global_batch_size=global_batch_size // data, steps=steps, lr=lr,
                                      dtype="float32")
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
    if pipeline > 1 and tensor > 1:
        counter = {"data": 0}
        record = _train_split_stages(worker, mesh, width=width, global_batch_size=global_batch_size,
                                     micro_batches=micro_batches, schedule=schedule, steps=steps, lr=lr,
                                     seed=seed, average=gradient_averager(worker, mesh, counter))
        record.traffic = dict(record.traffic, data=counter["data"] // steps)
    elif pipeline > 1:
        counter = {"data": 0}
        record = pipe.train_stage(
            worker, mesh.peers("pipeline"), model="mlp", width=width, depth=depth,
            global_batch_size=global_batch_size, micro_batches=micro_batches, schedule=schedule, chunks=1,
            steps=steps, lr=lr, seed=seed, dtype="float32", group=mesh.group("pipeline"),
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


def _parts(width: int, pipeline: int, seed: int = 0, device="cpu"):
    """Lesson 07: the depth-3 MLP cut into ``pipeline`` stages as lesson 06 cuts it (``stages.split``)."""
    sample = load_digits().x_train[:1].to(device)
    return stages.split(build_model("mlp", width, seed=seed, depth=3).to(device), pipeline, sample)


def _train_split_stages(worker, mesh: Mesh, *, width: int, global_batch_size: int, micro_batches: int,
                        schedule: str, steps: int, lr: float, seed: int, average) -> RankRecord:
    """Lesson 07: pipeline x tensor: lesson 06's pipeline along the mesh's pipeline axis (one per
    tensor slice and data replica), in which the stage that holds the block splits it across its
    tensor group; the other stages are the same on every tensor rank (they see the same data).

    Built from the pipeline's own pieces: its stages are cut here (the block's layers replaced by
    their tensor-parallel halves), then ``pipeline.run_stage`` trains them as it trains lesson 06's.
    """
    peers, p, m, device = mesh.peers("pipeline"), mesh.size("pipeline"), micro_batches, worker.device
    rank, (d, replicas) = mesh.coordinates["pipeline"], (mesh.coordinates["data"], mesh.size("data"))
    data = load_digits()
    parts = _parts(width, p, seed, device)
    shapes = stages.boundary_shapes(parts, data.x_train[:1].to(device))
    layers = [[str(n) for n, _ in part.named_children()] for part in parts]
    mine, traffic = parts[rank], tensor_parallel.Traffic()
    for name, layer in (("fc2", tensor_parallel.ColumnParallelLinear), ("fc3", tensor_parallel.RowParallelLinear)):
        if name in layers[rank]:
            setattr(mine, name, layer(getattr(mine, name), worker, mesh.group("tensor"), traffic))
    params = {f"{child}.{n}": q for child, module in mine.named_children() for n, q in module.named_parameters()}
    batch = global_batch_size // replicas
    record = RankRecord(worker.rank, worker.world_size, worker.backend, f"pipeline x tensor {schedule}", str(device),
                        config=dict(model="mlp", width=width, depth=3, batch_size=batch // p,
                                    global_batch_size=global_batch_size, micro_batches=m, schedule=schedule,
                                    chunks=1, steps=steps, lr=lr, seed=seed, dtype="float32", stage=rank,
                                    layers=layers, parameters_held=sum(q.numel() for q in params.values())),
                        shard=shard_indices(data.n_train, 0, 1, seed=seed))
    stage = pipe.Stage(worker, [part if v == rank else None for v, part in enumerate(parts)], shapes, rank, peers,
                       batch // m, mesh.group("pipeline"))
    totals = [0]                          # tensor bytes so far, noted after each step's passes

    def note_and_average(params) -> None:
        totals.append(sum(traffic.bytes.values()))
        average(params)
    record = pipe.run_stage(worker, data, stage, params, torch.optim.SGD(params.values(), lr=lr), record,
                            schedule=schedule, chunks=1, steps=steps, seed=seed, replica=(d, replicas),
                            global_batch_size=global_batch_size, average=note_and_average)
    record.traffic = dict(record.traffic, tensor=totals[-1] - totals[-2])   # the last step's (no evaluation)
    return record
