"""Sequence parallelism: the all-reduce of tensor parallelism cut into its two halves.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  With tensor
parallelism alone (``sequence.tensor_parallel``), every rank of the tensor group holds the whole
line between the split regions: the LayerNorms, the residual stream and the bias additions are
computed ``n`` times over, and each rank keeps their activations for the whole line.
Korthikanti et al. 2022 ("Reducing activation recomputation in large transformer models", §4.2.2)
cut those regions along the sequence instead: each rank keeps ``1/n`` of the line there.

The all-reduce that ends a split region (Megatron's ``g``) becomes a **reduce-scatter** along the
sequence (each rank keeps the summed output for its own tokens), and the region's start (``f``)
becomes an **all-gather** of the line.  Lesson 03 showed that an all-reduce *is* a reduce-scatter
followed by an all-gather, so the bytes on the wire are the same; what changes is where the line
sits whole and where in pieces.  Each operator's backward is the other one.

Two operators here; ``tensor_parallel.HeadsAttention`` and ``UnitsMLP`` use them in place of ``f``
and ``g`` when ``sequence_parallel=True``, and ``context_parallel.Piece`` holds which tokens are this
rank's (the same contiguous pieces as context parallelism uses).
"""
from __future__ import annotations

import torch


def _gather(x: torch.Tensor, worker, group) -> torch.Tensor:
    return torch.cat(worker.all_gather(x.contiguous(), group=group), dim=-2)


def _scatter(x: torch.Tensor, worker, group) -> torch.Tensor:
    """Sum ``x`` over the group and keep this rank's tokens (the token axis is the second to last).

    Written as an all-to-all (every rank sends its piece ``j`` of the line to rank ``j``) and a sum of
    the ``n`` pieces received, not with ``worker.reduce_scatter``: gloo's reduce-scatter sends as many
    bytes as a whole all-reduce (measured on 2 ranks: 2.0 S in all, where the all-to-all sends 1.0 S;
    ``bench/long_sequences.py``), which would make sequence parallelism cost 1.5 x tensor
    parallelism's bytes instead of the same."""
    n = len(group)
    pieces = worker.all_to_all(x.movedim(-2, 0).contiguous(), group=group)      # piece j from member j
    return pieces.view(n, pieces.shape[0] // n, *pieces.shape[1:]).sum(0).movedim(0, -2)


class _GatherLine(torch.autograd.Function):
    """Forward: every rank's tokens, in order (all-gather).  Backward: each rank's gradient for the
    whole line is a share of the truth (its heads' or hidden units' share), so the shares are summed
    and each rank keeps its own tokens' (reduce-scatter)."""

    @staticmethod
    def forward(ctx, x, worker, group, traffic):
        ctx.comm, ctx.traffic = (worker, group), traffic
        out = _gather(x, worker, group)
        traffic.add("forward", out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ctx.traffic.add("backward", grad)
        return _scatter(grad, *ctx.comm), None, None, None


class _ScatterLine(torch.autograd.Function):
    """Forward: the partial sums of the whole line, summed, each rank keeping its own tokens
    (reduce-scatter).  Backward: each rank's tokens' gradient, gathered into the whole line's."""

    @staticmethod
    def forward(ctx, partial, worker, group, traffic):
        ctx.comm, ctx.traffic = (worker, group), traffic
        traffic.add("forward", partial)
        return _scatter(partial, worker, group)

    @staticmethod
    def backward(ctx, grad):
        out = _gather(grad, *ctx.comm)
        ctx.traffic.add("backward", out)
        return out, None, None, None


def gather_line(x, worker, group, traffic):
    """Lesson 12: where a split region begins under sequence parallelism (in place of ``f``)."""
    return _GatherLine.apply(x, worker, group, traffic) if len(group) > 1 else x


def scatter_line(partial, worker, group, traffic):
    """Lesson 12: where a split region ends under sequence parallelism (in place of ``g``)."""
    return _ScatterLine.apply(partial, worker, group, traffic) if len(group) > 1 else partial
