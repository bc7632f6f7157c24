"""The bytes a training step moves, axis by axis: data, pipeline, tensor, sequence, context, expert.

Introduced in lesson 07 (tensor parallelism's bytes next to data parallelism's and the
pipeline's); lesson 05 reads the gradient's bytes, lesson 06 the pipeline's, lesson 08 ZeRO's
(``memory.zero_volume``, beside its memory), lesson 12 the transformer's tensor, sequence and
context parallelism, lesson 13 the experts' all-to-all.  What a ring sends on the wire comes from
``alpha_beta.ring_bytes``, the ring's one schedule.

* **data**: every rank all-reduces its whole gradient, one number per parameter, whatever the
  batch (Li et al. 2020, "PyTorch Distributed: experiences on accelerating data parallel
  training").
* **pipeline**: each stage sends its activations forward and its input's gradient backward, once
  per sample whatever the micro-batches.
* **tensor** (Megatron-LM, Shoeybi et al. 2019, section 3 and figure 3): each split region ends in
  one all-reduce of its output forward (``g``) and begins with one of its input's gradient
  backward (``f``): an activation's bytes each, growing with the batch, not with the model.
* **sequence** (Korthikanti et al. 2022, section 4.2.2): each all-reduce becomes a reduce-scatter
  and an all-gather, twice the tensors passed, the same bytes on the wire.
* **context**: ring attention (Liu et al. 2023, "Ring attention with blockwise transformers")
  passes each piece's K and V round the ring, ``n - 1`` hops forward; backward, K, V and their
  gradients, and one more hop that takes the gradients home.  The all-gather variant (the Llama 3
  report's context parallelism, 2024) gathers the whole line's K and V, and reduce-scatters
  their gradients.
* **expert** (GShard, Lepikhin et al. 2020, section 2.2; Switch Transformer, Fedus et al. 2021,
  section 2.2): each kept request goes to its expert and back, forward and backward; an expert
  keeps at most its *capacity*.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..models import DTYPES, build_model, count_parameters
from .alpha_beta import ring_bytes


def gradient_bytes(model: str, width: int, dtype: str = "float32", depth: int = 2) -> int:
    """Lesson 05 (and 07): the bytes each rank passes to data parallelism's all-reduce every step:
    one number per parameter of the course's ``model``."""
    return count_parameters(build_model(model, width, depth=depth)) * DTYPES[dtype].itemsize


def pipeline_bytes(batch: int, boundaries: list[int], rank: int, ranks: int | None = None, itemsize: int = 4) -> int:
    """Lesson 06 (and 07): the bytes pipeline rank ``rank`` sends per step: each of its stages sends its
    output forward (``batch x`` the numbers one sample leaves it with, ``boundaries[k]``, as
    ``pipeline.stages.boundary_shapes`` gives them) and the gradient of its input backward, the first
    stage no gradient and the last no output (GPipe, Huang et al. 2019).  With the interleaved
    schedule rank r holds stages r, r + ranks, ... of ``len(boundaries)``; micro-batches only cut
    the batch into pieces, the bytes stay."""
    ranks = ranks or len(boundaries)
    last = len(boundaries) - 1
    numbers = sum((boundaries[k] if k < last else 0) + (boundaries[k - 1] if k > 0 else 0)
                  for k in range(rank, len(boundaries), ranks))
    return batch * numbers * itemsize


def tensor_parallel_bytes(batch: int, width: int, *, tokens: int = 1, regions: int = 1, itemsize: int = 4,
                          sequence_parallel: bool = False) -> dict[str, int]:
    """Lesson 07 (and 12): the bytes each rank passes to its collectives per step with ``regions``
    split regions, each one activation of ``batch x tokens x width`` numbers forward (``g``) and
    one backward (``f``).  Lesson 07's MLP block is one region of one token a sample; lesson 12's
    transformer has two a block (attention and the MLP), ``tokens`` a line.  With sequence
    parallelism each region has two collectives each way, an all-gather and a reduce-scatter of
    that size: twice the tensors, each half an all-reduce's work."""
    one = batch * tokens * width * itemsize * (2 if sequence_parallel else 1)
    return {"forward": regions * one, "backward": regions * one}


def tensor_parallel_wire_bytes(batch: int, tokens: int, d_model: int, layers: int, ranks: int, itemsize: int = 4,
                               sequence_parallel: bool = False, token_params: int = 0) -> int:
    """Lesson 12: the bytes each rank *sends* per step with ring collectives: per block, two regions,
    each an all-reduce each way (TP) or a reduce-scatter and an all-gather each way (TP+SP): the
    same.  Sequence parallelism adds the gather of the line before the read-out, and the sum of the
    gradients of the ``token_params`` numbers (LayerNorms, embeddings, biases) that saw only this
    rank's tokens."""
    one = batch * tokens * d_model * itemsize
    total = 2 * layers * 2 * ring_bytes(one, ranks)
    if sequence_parallel:
        total += ring_bytes(one, ranks, "all_gather") + ring_bytes(token_params * itemsize, ranks)
    return round(total)


def context_parallel_bytes(batch: int, tokens: int, d_model: int, ranks: int, *, layers: int = 1,
                           attention: str = "ring", tensor: int = 1, itemsize: int = 4) -> dict[str, int]:
    """Lesson 12: the bytes one rank of a context group of ``ranks`` records per step in its
    attention, forward and backward (``context_parallel.Piece.bytes``); ``tensor`` ranks share the
    heads, so each passes its own heads' K and V.

    Ring: a piece (``batch x tokens/ranks x d_model/tensor`` numbers) of K and one of V each of
    the ``ranks - 1`` hops forward; backward K, V and their two gradients each hop, then the two
    gradients one more hop.  All-gather: the whole line's K and V gathered forward, their
    gradients reduce-scattered backward (the tensors passed, as ``tensor_parallel_bytes`` counts)."""
    if ranks == 1:
        return {"forward": 0, "backward": 0}
    if attention == "all_gather":
        line = batch * tokens * d_model // tensor * itemsize
        return {"forward": layers * 2 * line, "backward": layers * 2 * line}
    if attention != "ring":
        raise ValueError(f"attention must be 'ring' or 'all_gather', got {attention!r}")
    piece = batch * (tokens // ranks) * d_model // tensor * itemsize
    return {"forward": layers * 2 * (ranks - 1) * piece, "backward": layers * (4 * (ranks - 1) + 2) * piece}


def context_parallel_wire_bytes(batch: int, tokens: int, d_model: int, ranks: int, *, layers: int = 1,
                                attention: str = "ring", tensor: int = 1, itemsize: int = 4) -> int:
    """Lesson 12: the bytes one rank *sends* per step in its attention, forward and backward together.

    In units of the line's K (``batch x tokens x d_model/tensor`` numbers; V is as large), per block:
    the ring sends ``2(n - 1)/n`` forward (K and V, ``n - 1`` hops of a piece) and ``(4(n - 1) + 2)/n``
    backward (K, V, dK, dV each hop, then dK and dV one hop home): ``2(3n - 2)/n`` in all.  The
    all-gather, with ring collectives, sends ``(n - 1)/n`` of K and of V forward (an all-gather each)
    and as much backward (a reduce-scatter of each gradient): ``4(n - 1)/n``.  So the ring sends
    ``(3n - 2) / (2(n - 1))`` times the all-gather's bytes (5/3 at 4 ranks): its gain is memory."""
    if attention == "ring":
        return sum(context_parallel_bytes(batch, tokens, d_model, ranks, layers=layers, tensor=tensor,
                                          itemsize=itemsize).values())
    if attention != "all_gather":
        raise ValueError(f"attention must be 'ring' or 'all_gather', got {attention!r}")
    line = batch * tokens * d_model // tensor * itemsize
    return round(layers * 4 * ring_bytes(line, ranks, "all_gather"))


@dataclass(frozen=True)
class Experts:
    """Lesson 13: what the formulas need of a mixture of experts (``experts.moe.MoEConfig`` has the
    same fields, and either may be passed)."""

    experts: int
    top_k: int = 1
    capacity_factor: float = 1.25


def capacity(tokens: int, cfg) -> int:
    """Lesson 13: how many of a group's ``tokens`` one expert takes, ``ceil(factor x tokens x k / E)``
    (Fedus et al. 2021, section 2.2: the fair share ``tokens x k / E`` times the capacity factor);
    ``cfg`` an ``Experts`` or a ``MoEConfig``.  GShard and Switch use it as a fixed buffer: every
    expert's slots padded to the capacity, so the all-to-all's sizes are known before routing.
    ``experts.expert_parallel`` instead exchanges the counts first and sends only the kept requests
    (pieces of varying size): here the capacity only limits what an expert takes, it pads nothing."""
    return math.ceil(cfg.capacity_factor * tokens * cfg.top_k / cfg.experts)


def all_to_all_bytes(tokens: int, d_model: int, top_k: int, experts: int, capacity_factor: float,
                     ranks: int, layers: int, bytes_per_number: int = 4) -> float:
    """Lesson 13: the bytes one training step's all-to-alls carry between ranks, all ``ranks`` of an
    expert group together, if the router spreads each rank's ``tokens`` evenly over the experts.

    Per rank and layer: E x min(tokens x k / E, capacity) requests are kept, (n - 1)/n of them go to
    another rank, each a row of ``d_model`` numbers, four times (dispatch and combine, forward and
    backward)."""
    kept = experts * min(tokens * top_k / experts, capacity(tokens, Experts(experts, top_k, capacity_factor)))
    crossing = kept * (ranks - 1) / ranks
    return layers * 4 * ranks * crossing * d_model * bytes_per_number
