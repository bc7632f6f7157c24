"""Activation recomputation: keep less for backward, and compute the rest again when backward needs it.

Introduced in lesson 14 (fitting more: precision, recomputation and offload).  Lesson 12 counted what a
forward pass keeps for its backward pass (``sequence.memory.SavedTensors``) and predicted it
(``predict.activations.transformer_activation_bytes``): per block about ``16 b s h`` numbers, plus the
attention probabilities, ``a b s^2``, which grow with the square of the line.  Nothing forces a model to
keep them: a region that keeps only its *inputs* can run its forward again during the backward pass and
get everything else back (Chen et al. 2016, "Training deep nets with sublinear memory cost").  Memory is
bought with arithmetic.  Two ways, the plain one first:

* ``"full"``: every transformer block keeps its input only (``b s h`` numbers instead of ``16 b s h +
  a b s^2``); the backward pass runs each block's forward again, so a step costs about four forwards'
  arithmetic instead of three (Korthikanti et al. 2022, "Reducing activation recomputation in large
  transformer models", section 5; 30-40% more time in their runs).
* ``"selective"``: only attention's core, the scores, the softmax and the weighted values
  (``Attention.attend``), is recomputed: the ``a b s^2`` part of the memory, but only ``2 s^2 h`` of a
  block's ``12 s h^2 + 2 s^2 h`` multiply-adds (Korthikanti et al. 2022, section 5, "selective
  activation recomputation").  Its inputs Q, K and V are kept anyway (the projections' outputs).

How: ``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)``.  PyTorch's non-reentrant
checkpoint keeps ``fn``'s inputs for backward and, inside ``fn``, replaces every tensor an operation saves
by a placeholder (with saved-tensor hooks, the mechanism ``SavedTensors`` counts with: its hooks see the
region's inputs, not what is saved inside it, which is exactly "what is kept"); when backward reaches a
placeholder, it runs ``fn`` again on the kept inputs.  Three choices, each for a reason:

* the wrapper replaces ``forward`` (or ``attend``) on each *instance*, not the module: a wrapping module
  (``torch.distributed.algorithms._checkpoint.checkpoint_wrapper``) would rename every parameter, which
  the gradient reducer, the pipeline's cut and the records all know by name;
* it is applied after the splitting transforms (``parallelize.transforms``), so what runs again is the
  split block: tensor parallelism's all-reduces (or sequence parallelism's all-gather and reduce-scatter),
  the experts' all-to-all and context parallelism's exchange of K and V run again in the backward pass,
  as Megatron's recomputation repeats its all-reduces.  Every rank recomputes the same blocks in the same
  order with the same inputs, so the messages pair up as in the forward pass;
* early stopping is switched off: by default PyTorch stops a recomputation as soon as it has what the
  backward pass asked for, which skips a region's last operations (measured on lesson 12's small
  transformer: 8.65 of its blocks' 11.8 million forward FLOPs recomputed, each block's last product, the
  MLP's second layer, left out, and with it a tensor-parallel block's last all-reduce, which comes after).
  Off, the recomputation is the region's whole forward, as Korthikanti et al. count it, and
  ``predict.flops.recomputed_flops`` equals what ``torch.utils.flop_counter.FlopCounterMode`` counts.

With context parallelism, ``"full"`` is built (a block's recomputation passes K and V round the ring, or
gathers them, once more: the record's ring log shows those hops, and the bytes count them), and
``"selective"`` is built for the all-gathered K and V; the ring's selective recomputation is refused:
ring attention keeps no probabilities already (its backward recomputes them block by block, as flash
attention does), so recomputing it would drop one log-sum-exp per query and pay every hop again.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from ..sequence.transformer import Attention, Block

MODES = ("none", "full", "selective")
WHAT = {"full": (Block, "forward", "transformer block (sequence.transformer.Block)"),
        "selective": (Attention, "attend", "attention (sequence.transformer.Attention)")}


def check_mode(mode) -> None:
    """Lesson 14: ``mode`` must be one of ``MODES``."""
    if mode not in MODES:
        raise ValueError(f"unknown recompute {mode!r}: use 'none' (keep every activation), 'full' (every "
                         "transformer block keeps its input only) or 'selective' (attention's scores, softmax "
                         "and values are recomputed)")


def check_layout(mode: str, *, kind: str = "transformer", context: int = 1, attention: str = "ring") -> None:
    """Lesson 14: ``mode`` against the model and the layout, before any process starts: recomputation is
    written for lesson 12's transformer (its blocks, its attention), and the ring's selective recomputation
    would buy nothing (see the module's docstring)."""
    check_mode(mode)
    if mode == "none":
        return
    if kind != "transformer":
        what = "blocks" if mode == "full" else "attention"
        raise ValueError(f"recompute={mode!r} recomputes the transformer's {what}: model kind {kind!r} has none "
                         "(use recompute='none', or model='transformer')")
    if mode == "selective" and context > 1 and attention == "ring":
        raise ValueError("recompute='selective' with ring attention is refused: the ring keeps no attention "
                         "probabilities already (its backward recomputes them block by block, as flash attention "
                         "does), so recomputing it would save one log-sum-exp per query and pass K and V round the "
                         "ring once more; use recompute='full', or attention='all_gather'")


def checkpointed(fn):
    """Lesson 14: ``fn`` made to keep only its inputs for backward: its forward runs again in the backward
    pass, whole (no early stop), under ``torch.utils.checkpoint`` (non-reentrant)."""
    def run(*args):
        with set_checkpoint_early_stop(False):
            return checkpoint(fn, *args, use_reentrant=False)
    run.recomputes = fn          # what was wrapped (and a mark against wrapping twice)
    return run


def regions(model: torch.nn.Module, mode: str) -> list[torch.nn.Module]:
    """Lesson 14: the modules whose ``forward`` (full: each ``Block``) or ``attend`` (selective: each
    ``Attention``, split by heads or not) ``mode`` recomputes; none for ``"none"``."""
    check_mode(mode)
    if mode == "none":
        return []
    kind = WHAT[mode][0]
    return [m for m in model.modules() if isinstance(m, kind)]


def apply(model: torch.nn.Module, mode: str) -> int:
    """Lesson 14: ``model`` made to recompute ``mode``'s regions in backward, in place; returns how many.

    A model without the regions (no block for ``"full"``, no attention for ``"selective"``) is refused:
    a recomputation that finds nothing to recompute would run as if it were on and keep everything."""
    found = regions(model, mode)
    if mode == "none":
        return 0
    kind, method, name = WHAT[mode]
    if not found:
        raise ValueError(f"recompute={mode!r} found no {name} in {type(model).__name__}: there is nothing to "
                         "recompute (use recompute='none')")
    for module in found:
        if hasattr(getattr(module, method), "recomputes"):
            raise ValueError(f"recompute={mode!r}: this {type(module).__name__} is recomputed already (a model is "
                             "made to recompute once)")
        setattr(module, method, checkpointed(getattr(module, method)))
    return len(found)


def parallelize(model: torch.nn.Module, layout) -> None:
    """Lesson 14: the recomputation entry of ``parallelize.transforms``, after the splits (so the split
    blocks, their collectives included, are what runs again) and before the pipeline's cut (a stage holds
    blocks that recompute).  Does nothing for ``recompute="none"``."""
    mode = layout.spec.training.recompute
    piece = layout.piece
    check_layout(mode, context=piece.size if piece is not None else 1,
                 attention=piece.attention if piece is not None else "ring")
    apply(model, mode)

