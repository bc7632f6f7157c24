"""Parallelize: the ordered transforms that split one rank's copy of the model over the named mesh.

Introduced in lesson 12 and completed in lesson 13, with lesson 06's pipeline: every rank builds the
whole model from the same seed, then each way of splitting is one transform, applied in a fixed order
(torchtitan's ``parallelize`` does the same: tensor, then context, then data sharding):

=============  ===========================================================================================
``tensor``     each block's heads and hidden units across the tensor group, by hand or with PyTorch's
               ``parallelize_module``; with sequence parallelism, the line between them in pieces
               (``tensor.heads_split.parallelize``); lesson 07's MLP block (``tensor.tensor_parallel``)
``context``    the line in pieces across the context group, attention reaching the others' keys by a
               ring or an all-gather (``context.context_parallel.parallelize``)
``expert``     every mixture of experts spread over the expert group, tokens travelling by all-to-all
               (``experts.expert_parallel.parallelize``)
``recompute``  lesson 14's lever: every (split) block, or every attention's core, keeps only its inputs
               and runs its forward again in backward, collectives included (``train.recompute.parallelize``)
``pipeline``   the stack of pieces cut into stages along the pipeline group; this rank keeps its own
               (``pipeline.pipeline.stage_of``)
``reduce``     the one gradient reducer over what this rank holds, each gradient over its purpose group
               (``train.reduce``)
=============  ===========================================================================================

A transform that splits a parameter's gradient into parts, or joins them, says so on the parameter
(``train.reduce.mark``), so the reducer needs no knowledge of the transforms.  A lever is one more entry
here, not a fork of the loop: activation recomputation is (lesson 14), after the splits, so that what it
recomputes is the split block, and before the cut, so that a stage holds blocks that recompute.  The
pipeline's cut is planned on the model before any transform (its layers' costs and the activations'
shapes come from one sample run through the unsplit pieces; a split model would talk while doing so).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..experts import expert_parallel
from ..pipeline import pipeline, stages
from ..tensor.tensor_parallel import Traffic
from ..context import context_parallel
from ..tensor import heads_split, tensor_parallel
from ..train import recompute
from ..train.reduce import GradientReducer

# (name, transform) in the order they are applied: the axes' splits, each a no-op when its axis has one rank
# (the tensor axis has one for each family of models: lesson 07's MLP block, lesson 12's transformer blocks),
# then the levers, each a no-op when off (activation recomputation, lesson 14)
TRANSFORMS = (("tensor", tensor_parallel.parallelize), ("tensor", heads_split.parallelize),
              ("context", context_parallel.parallelize), ("expert", expert_parallel.parallelize),
              ("recompute", recompute.parallelize))


@dataclass
class Layout:
    """Lesson 12: what the transforms share while they split one rank's model."""

    worker: object
    mesh: object                       # a train.mesh.Mesh
    spec: object                       # a train.spec.TrainSpec
    traffic: Traffic = field(default_factory=Traffic)   # bytes the split blocks' collectives carried
    piece: object = None               # context parallelism's piece of the line (its ring keeps a log)
    line_piece: object = None          # any piece of the line this rank holds (context or sequence parallel)


@dataclass
class Parallelized:
    """Lesson 12: one rank's share of the model after every transform."""

    model: torch.nn.Module             # the whole model, split (a pipeline rank uses only its stage of it)
    layout: Layout
    params: dict                       # what this rank trains, under one process's names
    reducer: GradientReducer
    stage: object = None               # a pipeline.Stage when the pipeline axis is longer than one rank


def parallelize(model, worker, mesh, spec, sample: torch.Tensor) -> Parallelized:
    """Lesson 12: ``model`` split for this rank by every transform, in order; ``sample``: one input, to
    plan the pipeline's cut on the model before it is split."""
    layout = Layout(worker, mesh, spec)
    p, plan = mesh.size("pipeline"), None
    if p > 1:
        plan = stages.plan(model, p, sample)
    for _, transform in TRANSFORMS:
        transform(model, layout)
    stage = None
    if p > 1:
        stage, held = pipeline.stage_of(model, plan, worker, mesh, spec.parallel.micro_batches,
                                        spec.training.global_batch_size // mesh.share()[1], layout.line_piece)
    else:
        held = dict(model.named_parameters())
    params = {expert_parallel.one_process_name(name, model): q for name, q in held.items()}
    reducer = GradientReducer(worker, params, mesh, spec.parallel.method, bucket_mb=spec.parallel.bucket_mb)
    return Parallelized(model, layout, params, reducer, stage)
