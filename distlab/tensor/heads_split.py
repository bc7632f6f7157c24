"""Tensor parallelism on the transformer, by hand: attention split by heads, the MLP by its hidden units.

Introduced in lesson 12 (long lines: splitting the heads and the sequence), after lesson 07
split one MLP block.  A transformer block has two regions to split, each between Megatron's two
operators (``tensor.tensor_parallel.copy_to_slices`` is ``f``, ``sum_partials`` is ``g``;
Shoeybi et al. 2019, figure 3):

* **attention**: heads are independent, so each rank keeps whole heads: its rows of Q, K and V
  (column-parallel, from the whole input) and the matching columns of the output projection
  (row-parallel: each rank's heads give a partial sum of the output);
* **MLP**: the first layer column-parallel (each rank its hidden units), GELU on each unit
  alone, the second row-parallel.

So each region costs one all-reduce forward (``g``, the partial sums) and one backward (``f``,
the input's gradient), and the LayerNorms, embeddings and heads stay whole on every rank: they
see the same activations and get the same gradients, so they stay equal without talking.
``predict.traffic.tensor_parallel_bytes`` and ``tensor_parallel_wire_bytes`` predict the bytes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .tensor_parallel import Traffic, copy_to_slices, sum_partials
from .sequence_parallel import LinePiece, gather_line, scatter_line
from ..train.reduce import mark
from ..sequence.transformer import MLP, SEES_WHOLE_LINE, Attention, LineReader

# how each split parameter is cut (the dimension its slices are laid along); the rest is whole everywhere
SPLIT = {"attn.q.weight": 0, "attn.q.bias": 0, "attn.k.weight": 0,
         "attn.v.weight": 0, "attn.v.bias": 0, "attn.out.weight": 1,
         "mlp.fc1.weight": 0, "mlp.fc1.bias": 0, "mlp.fc2.weight": 1}


def check_heads(heads: int, mlp_units: int, size: int) -> None:
    """Lesson 12: whole heads and whole hidden units must share out evenly among the ranks."""
    if heads % size:
        raise ValueError(f"{heads} attention heads do not share out among {size} tensor-parallel ranks: "
                         f"use a number of heads that is a multiple of {size}")
    if mlp_units % size:
        raise ValueError(f"the MLP's {mlp_units} hidden units do not share out among {size} ranks")


def _rows(linear: nn.Linear, rank: int, size: int) -> nn.Linear:
    """This rank's output features of ``linear`` (column-parallel: no communication to compute them)."""
    n = linear.out_features // size
    part = nn.Linear(linear.in_features, n, bias=linear.bias is not None)
    part.weight = nn.Parameter(linear.weight.detach()[rank * n:(rank + 1) * n].clone())
    if linear.bias is not None:
        part.bias = nn.Parameter(linear.bias.detach()[rank * n:(rank + 1) * n].clone())
    return part


def _columns(linear: nn.Linear, rank: int, size: int) -> nn.Linear:
    """This rank's input features of ``linear`` (row-parallel); the bias stays whole, added once after the sum."""
    n = linear.in_features // size
    part = nn.Linear(n, linear.out_features)
    part.weight = nn.Parameter(linear.weight.detach()[:, rank * n:(rank + 1) * n].clone())
    part.bias = nn.Parameter(linear.bias.detach().clone())
    return part


class HeadsAttention(Attention):
    """Lesson 12: this rank's heads of ``attn``: f, its Q/K/V rows, attention on its heads, its columns
    of the output projection, g, then the bias.  With ``sequence_parallel``, the all-gather of the line
    in place of f and the reduce-scatter in place of g (``sequence_parallel.py``)."""

    def __init__(self, attn: Attention, worker, group, traffic: Traffic, sequence_parallel: bool = False):
        nn.Module.__init__(self)
        rank, size = group.index(worker.rank), len(group)
        self.heads, self.causal = attn.heads, attn.causal
        self.q, self.k, self.v = (_rows(p, rank, size) for p in (attn.q, attn.k, attn.v))
        self.out = _columns(attn.out, rank, size)
        self.comm, self.traffic, self.ends = (worker, group), traffic, _ends(sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        enter, leave = self.ends
        y = self.mix(enter(x, *self.comm, self.traffic))                    # this rank's heads only
        return leave(F.linear(y, self.out.weight), *self.comm, self.traffic) + self.out.bias


class UnitsMLP(MLP):
    """Lesson 12: this rank's hidden units of ``mlp``: f, its rows of fc1, GELU, its columns of fc2, g, bias
    (with ``sequence_parallel``, the all-gather and the reduce-scatter in place of f and g)."""

    def __init__(self, mlp: MLP, worker, group, traffic: Traffic, sequence_parallel: bool = False):
        nn.Module.__init__(self)
        rank, size = group.index(worker.rank), len(group)
        self.fc1, self.fc2 = _rows(mlp.fc1, rank, size), _columns(mlp.fc2, rank, size)
        self.comm, self.traffic, self.ends = (worker, group), traffic, _ends(sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        enter, leave = self.ends
        h = self.hidden(enter(x, *self.comm, self.traffic))                 # this rank's units only
        return leave(F.linear(h, self.fc2.weight), *self.comm, self.traffic) + self.fc2.bias


def _ends(sequence_parallel: bool):
    """Where a split region begins and ends: f and g, or (sequence parallelism) all-gather and reduce-scatter."""
    return (gather_line, scatter_line) if sequence_parallel else (copy_to_slices, sum_partials)


def split_model(model: LineReader, worker, group, traffic: Traffic, sequence_parallel: bool = False) -> LineReader:
    """Lesson 12: every block of ``model`` split across the ranks of ``group``, in place.  With
    ``sequence_parallel`` the line between the split regions is cut across the same ranks (the caller
    gives the model its ``sequence_parallel.LinePiece`` of contiguous tokens)."""
    cfg = model.cfg
    check_heads(cfg.heads, cfg.mlp_ratio * cfg.d_model, len(group))
    for block in model.blocks:
        block.attn = HeadsAttention(block.attn, worker, group, traffic, sequence_parallel)
        if isinstance(block.mlp, MLP):      # (a mixture of experts stays whole: its experts spread instead)
            block.mlp = UnitsMLP(block.mlp, worker, group, traffic, sequence_parallel)
    return model


def parallelize(model: LineReader, layout) -> None:
    """Lesson 12: the tensor axis's transform of the one model (``parallelize.transforms``): every block
    split across the mesh's tensor group, by hand or with PyTorch's ``parallelize_module``; with sequence
    parallelism the line between the split regions is cut across the same ranks, so every parameter that
    is not split and not in the read-out heads now holds a part of its gradient per tensor rank."""
    mesh, spec, worker = layout.mesh, layout.spec.parallel, layout.worker
    if mesh.size("tensor") == 1 or not isinstance(model, LineReader):
        return
    group = mesh.group("tensor")
    if spec.use_torch:
        split_model_with_torch(model, mesh.device_mesh["tensor"], spec.sequence_parallel)
    else:
        split_model(model, worker, group, layout.traffic, spec.sequence_parallel)
    if spec.sequence_parallel:
        layout.line_piece = LinePiece(worker, group, model.cfg.positions, "contiguous")
        model.set_piece(layout.line_piece, attention=False)
        for name, p in model.named_parameters():
            if not hasattr(p, "placements") and not name.startswith(SEES_WHOLE_LINE) and not name.endswith(
                    tuple(SPLIT)):
                mark(p, add=("tensor",))


def merge_params(per_rank: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Lesson 12: the whole model's parameters from every rank's slices (in the group's order)."""
    def cut(name):
        return next((dim for suffix, dim in SPLIT.items() if name.endswith(suffix)), None)
    return {name: torch.cat([p[name] for p in per_rank], dim=cut(name)) if cut(name) is not None
            else per_rank[0][name] for name in per_rank[0]}


def split_model_with_torch(model: LineReader, device_mesh, sequence_parallel: bool = False) -> LineReader:
    """Lesson 12: the same split with PyTorch's ``parallelize_module`` on the mesh's tensor ``DeviceMesh``
    (torchrun only): Q, K, V and fc1 ``ColwiseParallel``, the output projection and fc2 ``RowwiseParallel``.

    With ``sequence_parallel`` the LayerNorms are ``SequenceParallel`` (they run on this rank's tokens),
    each region's input is gathered by ``PrepareModuleInput`` (Shard(1) to Replicate: the all-gather)
    and its output scattered by ``RowwiseParallel(output_layouts=Shard(1))`` (the reduce-scatter),
    the plan torchtitan uses for Llama.  Outside the blocks the model's own piece of the line
    (``sequence_parallel.LinePiece``) does the rest, as by hand."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    cfg = model.cfg
    check_heads(cfg.heads, cfg.mlp_ratio * cfg.d_model, device_mesh.size())
    for block in model.blocks:
        plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
                "attn.out": RowwiseParallel(), "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}
        if sequence_parallel:
            gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
            plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel(), "attn": gather, "mlp": gather,
                         "attn.out": RowwiseParallel(output_layouts=Shard(1)),
                         "mlp.fc2": RowwiseParallel(output_layouts=Shard(1))})
        parallelize_module(block, device_mesh, plan)
    return model
