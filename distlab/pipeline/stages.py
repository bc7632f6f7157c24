"""Cutting a model into stages, one per rank: the first step of model parallelism.

Introduced in lesson 06 ("Splitting the model").  Data parallelism copies the whole model to
every rank; model parallelism gives each rank *a part* of it.  distlab's models are
``nn.Sequential`` stacks, so a part is a run of consecutive layers (``model[2:5]``), and a
rank's part is called its *stage*.  Stage ``s`` receives the activations of stage ``s - 1``,
runs its layers and sends its output on; in the backward pass the gradients travel the
other way.

Where to cut?  A pipeline runs at the pace of its slowest stage, so the cuts balance the
*work*: the multiply-adds each layer does for one sample (``predict.flops.layer_costs``, found
by running one sample through the model), shared out by ``predict.stage_cut``.  Layers without
weights (ReLU, pooling, flattening) stay with the layer before them (or go with the first
stage), so every stage owns at least one layer with weights, and every rank has something to
train.
"""
from __future__ import annotations

import torch
from torch import nn

from ..predict.flops import layer_costs
from ..predict.stage_cut import balanced_starts


def weighted_layers(model: nn.Sequential) -> list[int]:
    """Lesson 06: positions of the layers that have parameters."""
    return [i for i, layer in enumerate(model) if any(True for _ in layer.parameters())]


def check_stages(model: nn.Sequential, stages: int) -> None:
    """Lesson 06: a model can be cut into at most as many stages as it has layers with weights."""
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise ValueError(f"stages must be a positive integer, got {stages!r}")
    n = len(weighted_layers(model))
    if stages > n:
        raise ValueError(f"{stages} stages but the model has only {n} layers with weights: use at most {n} "
                         "stages, or a deeper model (depth= for the MLP)")


def cut_points(model: nn.Sequential, stages: int, sample: torch.Tensor) -> list[int]:
    """Lesson 06: where each stage starts (a position in ``model``), balancing the work.

    Each stage gets a run of consecutive weighted layers, chosen so that the busiest stage does
    the least work (``predict.stage_cut.balanced_starts``, on the multiply-adds of
    ``predict.flops.layer_costs``): the pipeline's pace.  The first stage also takes any layers
    without weights in front.
    """
    check_stages(model, stages)
    weighted, costs = weighted_layers(model), layer_costs(model, sample)
    starts = balanced_starts([costs[i] for i in weighted], stages)
    return [0] + [weighted[c] for c in starts[1:]]


def split(model: nn.Sequential, stages: int, sample: torch.Tensor) -> list[nn.Sequential]:
    """Lesson 06: the model as ``stages`` consecutive parts (they share the model's parameters)."""
    starts = cut_points(model, stages, sample)
    return [model[a:b] for a, b in zip(starts, [*starts[1:], len(model)])]


def boundary_shapes(parts: list[nn.Sequential], sample: torch.Tensor) -> list[tuple[int, ...]]:
    """Lesson 06: the shape of one sample's activation leaving each part (what a rank sends on)."""
    shapes, x = [], sample[:1]
    with torch.no_grad():
        for part in parts:
            x = part(x)
            shapes.append(tuple(x.shape[1:]) if isinstance(x, torch.Tensor) else None)   # (the last: the loss's)
    return shapes


def owned_names(model: nn.Sequential, part: nn.Sequential) -> dict[str, nn.Parameter]:
    """Lesson 06: a part's parameters under their names in the whole model (``fc2.weight``),
    so that the stages' records put back together give the whole model's parameters."""
    mine = {id(p) for p in part.parameters()}
    return {n: p for n, p in model.named_parameters() if id(p) in mine}


def as_sequential(model: nn.Module) -> nn.Sequential:
    """Lesson 06: the model as the run of pieces a pipeline cuts: an ``nn.Sequential`` as it is; any other
    model by its ``pieces()`` (lesson 12's transformer: the embedding, each block, the read-out)."""
    return model if isinstance(model, nn.Sequential) else nn.Sequential(*model.pieces())


def plan(model: nn.Module, stages: int, sample: torch.Tensor) -> tuple[list[int], list]:
    """Lesson 06: where each of ``stages`` stages starts in ``as_sequential(model)``, balancing the work, and
    the shape of one sample's activation leaving each (what a rank receives): made on the model before it
    is split in any other way, so that running the sample through it needs no other rank."""
    seq = as_sequential(model)
    starts = cut_points(seq, stages, sample)
    return starts, boundary_shapes([seq[a:b] for a, b in zip(starts, [*starts[1:], len(seq)])], sample)
