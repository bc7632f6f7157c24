"""Sequence parallelism: the all-reduce of tensor parallelism cut into its two halves.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  With tensor
parallelism alone (``tensor.heads_split``), every rank of the tensor group holds the whole
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
and ``g`` when ``sequence_parallel=True``, and ``LinePiece`` holds which tokens are this
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


# -- the line in pieces: which tokens a rank holds (sequence parallelism here, context parallelism too) --
SPLITS = ("contiguous", "zigzag")


def chunk_ids(index: int, size: int, split: str) -> list[int]:
    """Lesson 12: which chunks of the line the ``index``-th rank of the group holds, in order."""
    return [index] if split == "contiguous" else [index, 2 * size - 1 - index]


def check_split(tokens: int, size: int, split: str) -> None:
    """Lesson 12: the line must cut into equal chunks, one per rank (contiguous) or two (zig-zag)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the splits are {', '.join(SPLITS)}")
    chunks = size if split == "contiguous" else 2 * size
    if tokens % chunks:
        how = (f"{chunks} equal pieces, one per rank" if split == "contiguous" else
               f"an even number of equal chunks, two per rank ({chunks} for {size} ranks)")
        raise ValueError(f"a line of {tokens} tokens does not cut into {how}")


def positions(index: int, size: int, tokens: int, split: str) -> torch.Tensor:
    """Lesson 12: the positions in the line of the ``index``-th rank's tokens, chunk by chunk."""
    chunk = tokens // (size if split == "contiguous" else 2 * size)
    return torch.cat([torch.arange(c * chunk, (c + 1) * chunk) for c in chunk_ids(index, size, split)])


class LinePiece:
    """Lesson 12: this rank's piece of every line: ``split`` "contiguous" (chunk r) or "zigzag" (chunks r and
    2n-1-r) of ``tokens`` cut over ``group``; ``mine`` its positions.  Sequence parallelism keeps the line
    between the split regions so (contiguous pieces of the tensor group); context parallelism's
    ``context_parallel.Piece`` adds how attention reaches the other pieces."""

    def __init__(self, worker, group, tokens: int, split: str = "contiguous"):
        check_split(tokens, len(group), split)
        self.worker, self.group, self.split = worker, group, split
        self.size, self.index = len(group), group.index(worker.rank)
        self.tokens, self.chunk = tokens, tokens // (len(group) * (1 if split == "contiguous" else 2))
        self.mine = positions(self.index, self.size, tokens, split)

    def whole_line(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's tokens, gathered and put back in line order (``transformer.ReadOut`` calls it)."""
        return _WholeLine.apply(x, self) if self.size > 1 else x


class _WholeLine(torch.autograd.Function):
    """The line in order on every rank; backward: this rank's tokens' rows of the (same) gradient."""

    @staticmethod
    def forward(ctx, x, piece):
        ctx.piece = piece
        gathered = torch.cat(piece.worker.all_gather(x.contiguous(), group=piece.group), dim=-2)
        order = torch.cat([positions(i, piece.size, piece.tokens, piece.split) for i in range(piece.size)])
        return gathered[..., torch.argsort(order), :]

    @staticmethod
    def backward(ctx, grad):
        return grad[..., ctx.piece.mine, :], None
