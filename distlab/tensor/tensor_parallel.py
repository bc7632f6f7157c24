"""Tensor parallelism: one layer's weight matrix split across ranks.

Introduced in lesson 07 ("Tensor and 3D parallelism").  A pipeline gives each rank whole
layers; tensor parallelism (Megatron-LM, Shoeybi et al. 2019) splits *each* layer of a block
so that every rank holds a slice of every weight matrix and all ranks work on the same
micro-batch at once.  The block here is two linear layers with a ReLU between them:

* the first is split **column-wise**: rank ``r`` holds rows ``r*w/t .. (r+1)*w/t`` of
  ``W1`` (PyTorch stores ``out x in``), so it computes its own ``w/t`` of the hidden units
  from the full input, with no communication;
* the ReLU acts on each unit alone, so each rank applies it to its own units;
* the second is split **row-wise** (by its input features): rank ``r`` multiplies its
  ``w/t`` hidden units by its columns of ``W2`` and gets a *partial sum* of the output;
  one all-reduce adds the partial sums, and every rank has the whole output again.

So the forward pass costs one all-reduce of the block's output, and the backward pass one
all-reduce of the gradient of its input (each rank's slice contributes part of it).  The two
are the conjugate operators ``f`` and ``g`` of the Megatron paper, written below as two small
autograd functions.  Every all-reduce records its bytes in ``Traffic``, which the lesson puts
next to data parallelism's all-reduce of every gradient (the formulas for both are
``predict.traffic``'s ``tensor_parallel_bytes`` and ``gradient_bytes``).

``parallel_mlp`` wraps the course's MLP with ``depth=3``: ``fc1`` and ``out`` stay whole on
every rank (they receive identical inputs and gradients, so they stay identical), and
``fc2``/``fc3`` form the split block.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from ..data import global_batch
from ..checks import check_int
from ..records import RankRecord
from ..train.reduce import GradientReducer
from ..train.step import make_optimizer
from ..train.loop import Strategy, check_settings, start, train_steps
from ..train.mesh import Mesh


class Traffic:
    """Bytes this rank passed to all-reduce, forward and backward (lesson 07)."""

    def __init__(self):
        self.bytes = {"forward": 0, "backward": 0}

    def add(self, direction: str, tensor: torch.Tensor) -> None:
        self.bytes[direction] += tensor.numel() * tensor.element_size()


class _CopyToSlices(torch.autograd.Function):
    """Megatron's ``f``: forward, every rank takes the whole input as it is; backward, each rank
    holds only its slice's share of the input's gradient, so the shares are all-reduced."""

    @staticmethod
    def forward(ctx, x, comm, traffic):
        ctx.comm, ctx.traffic = comm, traffic
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        worker, group = ctx.comm
        if len(group) > 1:
            ctx.traffic.add("backward", grad)
            worker.all_reduce(grad, group=group)
        return grad, None, None


class _SumPartials(torch.autograd.Function):
    """Megatron's ``g``: forward, all-reduce the partial sums; backward, the gradient of a sum
    is the same for every term, so each rank keeps it as it is."""

    @staticmethod
    def forward(ctx, partial, comm, traffic):
        partial = partial.clone()
        worker, group = comm
        if len(group) > 1:
            traffic.add("forward", partial)
            worker.all_reduce(partial, group=group)
        return partial

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def copy_to_slices(x, worker, group, traffic: Traffic):
    """Megatron's ``f`` on ``x`` (lessons 07 and 12): where a split region begins."""
    return _CopyToSlices.apply(x, (worker, group), traffic)


def sum_partials(partial, worker, group, traffic: Traffic):
    """Megatron's ``g`` on ``partial`` (lessons 07 and 12): where a split region ends."""
    return _SumPartials.apply(partial, (worker, group), traffic)


class ColumnParallelLinear(nn.Module):
    """Lesson 07: this rank's output features of ``linear`` (rows ``r*w/t .. (r+1)*w/t``, where
    ``r`` is the rank's place in the tensor ``group`` and ``t`` its size).  The all-reduces go
    through the ``worker``'s collectives, so the same layer runs on torchrun and on Horovod."""

    def __init__(self, linear: nn.Linear, worker, group, traffic: Traffic):
        super().__init__()
        rank, size = group.index(worker.rank), len(group)
        rows = linear.out_features // size
        self.weight = nn.Parameter(linear.weight.detach()[rank * rows:(rank + 1) * rows].clone())
        self.bias = nn.Parameter(linear.bias.detach()[rank * rows:(rank + 1) * rows].clone())
        self.comm, self.traffic = (worker, group), traffic

    def forward(self, x):
        return F.linear(_CopyToSlices.apply(x, self.comm, self.traffic), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Lesson 07: this rank's input features of ``linear``; the partial outputs are summed by one
    all-reduce, and the bias (whole on every rank) is added once, after the sum."""

    def __init__(self, linear: nn.Linear, worker, group, traffic: Traffic):
        super().__init__()
        rank, size = group.index(worker.rank), len(group)
        cols = linear.in_features // size
        self.weight = nn.Parameter(linear.weight.detach()[:, rank * cols:(rank + 1) * cols].clone())
        self.bias = nn.Parameter(linear.bias.detach().clone())
        self.comm, self.traffic = (worker, group), traffic

    def forward(self, x):
        return _SumPartials.apply(F.linear(x, self.weight), self.comm, self.traffic) + self.bias


# How each parameter of the split MLP is laid out across ranks: the dimension it is cut
# along (concatenate the ranks' slices along it), or None when every rank holds all of it.
SPLIT = {"fc2.weight": 0, "fc2.bias": 0, "fc3.weight": 1}


def check_tensor_parallel(width: int, size: int) -> None:
    """Lesson 07: the hidden units must share out evenly among the ranks."""
    if width % size:
        raise ValueError(f"a tensor-parallel size of {size} does not divide the width {width}: "
                         f"use a width that is a multiple of {size}")


def parallel_mlp(whole: nn.Sequential, worker, group, traffic: Traffic) -> nn.Sequential:
    """Lesson 07: the depth-3 MLP ``whole`` with its block ``fc2``/``fc3`` split across the ranks of ``group``."""
    check_tensor_parallel(whole.fc2.out_features, len(group))
    layers = OrderedDict(whole.named_children())
    layers["fc2"] = ColumnParallelLinear(whole.fc2, worker, group, traffic)
    layers["fc3"] = RowParallelLinear(whole.fc3, worker, group, traffic)
    return type(whole)(layers)


def parallelize(model, layout) -> None:
    """Lesson 07's split as the tensor axis's transform of the one trainer (``parallelize.transforms``): the
    depth-3 MLP's block, ``fc2`` column-wise and ``fc3`` row-wise, across the mesh's tensor group, in place.
    Every rank of the group sees the same samples, so the layers it keeps whole get the same gradient on
    every rank: no mark, nothing more to reduce along the tensor axis."""
    if layout.mesh.size("tensor") == 1 or not hasattr(model, "fc3") or not hasattr(model, "loss"):
        return
    group = layout.mesh.group("tensor")
    model.fc2 = ColumnParallelLinear(model.fc2, layout.worker, group, layout.traffic)
    model.fc3 = RowParallelLinear(model.fc3, layout.worker, group, layout.traffic)


def merge_params(per_rank: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Lesson 07: the whole model's parameters from every rank's slices (in rank order)."""
    return {name: torch.cat([p[name] for p in per_rank], dim=SPLIT[name]) if name in SPLIT
            else per_rank[0][name] for name in per_rank[0]}


# ---------------------------------------------------------------------------------------------
# training: the one loop of lesson 01, with a strategy that splits the block
# ---------------------------------------------------------------------------------------------
class SplitBlock(Strategy):
    """Lesson 07: before the first step, replace the model by its tensor-parallel version.

    Nothing else changes: every rank of a tensor group runs the loop on the same batch (tensor
    parallelism does not split the data), and the all-reduces happen inside forward and backward.
    ``mesh`` gives the groups: the block is split across ``mesh.group("tensor")``; when the mesh
    also has data replicas, each gradient is then averaged across ``mesh.group("data")``, as data
    parallelism would (lesson 07's data x tensor).  ``use_torch=True`` splits it with PyTorch's
    ``parallelize_module`` on the mesh's ``DeviceMesh`` instead of by hand.
    """

    def __init__(self, worker, mesh: Mesh, use_torch: bool = False, split=None):
        self.worker, self.mesh, self.use_torch, self.traffic = worker, mesh, use_torch, Traffic()
        self.split = split           # lesson 07's build-it: the learner's (worker, fc2, fc3) -> (fc2, fc3)
        self.per_step: list[dict[str, int]] = []     # bytes all-reduced in each step's passes
        self.data_bytes = 0                          # bytes averaged across the data group per step

    def communicate(self, run, step: int):
        """Note this step's tensor bytes (they went inside the passes); average across replicas."""
        before = {k: sum(s[k] for s in self.per_step) for k in self.traffic.bytes}
        self.per_step.append({k: v - before[k] for k, v in self.traffic.bytes.items()})
        if self.mesh.size("data") > 1:              # the one gradient reducer (train.reduce), by hand
            sent = self.reducer.sent
            self.reducer.reduce()
            self.data_bytes = self.reducer.sent - sent
        return None

    def prepare(self, run) -> None:
        tensor = self.mesh.group("tensor")
        if self.use_torch:
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            run.model = parallelize_module(run.model, self.mesh.device_mesh["tensor"],
                                           {"fc2": ColwiseParallel(), "fc3": RowwiseParallel()})
        elif self.split is not None:
            run.model.fc2, run.model.fc3 = self.split(self.worker, run.model.fc2, run.model.fc3)
        else:
            run.model = parallel_mlp(run.model, self.worker, tensor, self.traffic)
        run.net = run.model
        run.optimizer = make_optimizer("sgd", run.model.parameters(), run.optimizer.param_groups[0]["lr"])
        self.reducer = GradientReducer(self.worker, dict(run.model.named_parameters()), self.mesh, "by_hand")


def check_backend(name: str, backend: str, device: str, use_torch: bool = False) -> None:
    """Lesson 07: by hand, the split block runs on either backend (the Worker's all-reduces);
    PyTorch's ``parallelize_module`` needs torch.distributed, so torchrun."""
    if backend not in ("torchrun", "horovod"):
        raise ValueError(f"backend must be 'torchrun' or 'horovod', got {backend!r}")
    if use_torch and backend != "torchrun":
        raise ValueError(f"{name} with use_torch=True runs on launch(backend='torchrun') only: PyTorch's "
                         "parallelize_module speaks torch.distributed; use_torch=False runs on Horovod too")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and backend == "horovod":
        raise ValueError(f"{name} on device='cuda' runs on launch(backend='torchrun') (NCCL): the Horovod "
                         "here is built with Gloo only, for CPU tensors; on Horovod use device='cpu'")


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", width: int,
                  global_batch_size: int, steps: int, lr: float, dtype: str, use_torch: bool = False) -> None:
    """Lesson 07: a tensor-parallel job's settings, checked before any process starts."""
    check_backend("tensor_parallel.train", backend, device, use_torch)
    check_settings(world_size, model="mlp", width=width, steps=steps, lr=lr, dtype=dtype)
    check_tensor_parallel(width, world_size)
    check_int("global_batch_size", global_batch_size)


def train(worker, *, width: int = 64, global_batch_size: int = 64, steps: int = 20, lr: float = 0.1,
          seed: int = 0, dtype: str = "float32", use_torch: bool = False) -> RankRecord:
    """Lesson 07: train the depth-3 MLP with its block split across all ranks.

    The record's ``params`` are this rank's slices (``merge_params`` puts them together; with
    ``use_torch`` each rank already holds the whole tensors), ``traffic`` the bytes this rank
    passed to all-reduce in a training step (by hand only; zero with ``use_torch``).
    """
    return train_on(Mesh(worker, tensor=worker.world_size), worker, width=width, global_batch_size=global_batch_size,
                    steps=steps, lr=lr, seed=seed, dtype=dtype, use_torch=use_torch,
                    method="tensor parallel" + (" (torch)" if use_torch else ""))


def train_on(mesh: Mesh, worker, *, width: int, global_batch_size: int, steps: int, lr: float, seed: int,
             dtype: str = "float32", use_torch: bool = False, method: str = "tensor parallel",
             split=None) -> RankRecord:
    """Lesson 07: the same training on any mesh of data x tensor ranks: replica ``d`` (the data
    coordinate) trains on the ``d``-th share of every batch with the block split across its tensor
    group, and the replicas average their gradients.  ``split``: the learner's own column- and row-parallel
    layers (lesson 07's build-it exercise), ``split(worker, fc2, fc3) -> (fc2, fc3)``, used instead of ours."""
    replicas, d = mesh.size("data"), mesh.coordinates["data"]
    b = global_batch_size // replicas
    run = start(worker, model="mlp", width=width, lr=lr, seed=seed, dtype=dtype, depth=3, shard=(0, 1),
                method=method, config=dict(model="mlp", depth=3, width=width, batch_size=b,
                                           global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed,
                                           dtype=dtype))
    strategy = SplitBlock(worker, mesh, use_torch, split)
    n = run.data.n_train
    record = train_steps(run, strategy, steps,
                         lambda step: global_batch(n, 1, global_batch_size, step, seed=seed)[d * b:(d + 1) * b])
    if use_torch:   # DTensors: gather each whole tensor (every rank must take part)
        record.params = {k: getattr(p, "full_tensor", lambda p=p: p)().detach().cpu().clone()
                         for k, p in run.model.named_parameters()}
    # the same every step (the test evaluation excluded); torch's own all-reduces are not counted
    record.traffic = {} if use_torch else dict(strategy.per_step[-1])
    if replicas > 1:
        record.traffic["data"] = strategy.data_bytes
    return record


train.validate_args = validate_args
# what it runs on (the one loop keeps each rank's slices in its own checkpoint and obeys faults)
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})
