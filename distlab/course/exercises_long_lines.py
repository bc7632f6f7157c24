"""The exercises of lesson 12 (long lines: splitting the heads and the sequence), checked as ``exercises.py``
checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.  The expected
values come from the functions the lesson's ranks are checked against, never typed in.
"""
from __future__ import annotations

from ..predict import traffic
from ..context import context_parallel
from .checking import check


def tp_bytes(answer, *, batch: int, tokens: int, d_model: int, layers: int) -> bool | None:
    """Lesson 12: the bytes one rank passes to all-reduce per step with every block's heads and MLP split."""
    expected = sum(traffic.tensor_parallel_bytes(batch, d_model, tokens=tokens, regions=2 * layers).values())
    one = batch * tokens * d_model * 4
    return check("bytes of tensor parallelism", answer, expected, hints={
        expected // 2: "that is the forward pass only: each all-reduce forward (g) has its twin backward (f).",
        expected // 4: "each block has two split regions, attention and the MLP, each with an all-reduce forward "
                       "and its twin backward.",
        one * 2 * 2: "that is one block: every one of the blocks has its own all-reduces."},
        otherwise="per block, two regions, each one all-reduce of batch x tokens x d_model numbers forward and "
                  "one backward, 4 bytes a number.")


def ring_bytes(answer, *, batch: int, tokens: int, d_model: int, ranks: int) -> bool | None:
    """Lesson 12: the bytes one rank sends in one block's forward pass of ring attention (K and V, hop by hop)."""
    piece = batch * tokens // ranks * d_model * 4            # K or V of one rank's piece of the line
    expected = traffic.context_parallel_bytes(batch, tokens, d_model, ranks)["forward"]
    return check("bytes round the ring", answer, expected, hints={
        piece * (ranks - 1): "K and V both travel: two tensors each hop.",
        2 * piece * ranks: "after ranks - 1 hops every rank has seen every piece: the last hop is not needed.",
        2 * batch * tokens * d_model * 4 * (ranks - 1): "each hop carries one rank's piece of the line, "
                                                          "not the whole line."},
        otherwise="each hop: K and V of one piece (batch x tokens/ranks x d_model numbers each, 4 bytes); "
                  "how many hops until every rank has seen every piece?")


def zigzag_chunks(answer, *, rank: int, ranks: int) -> bool | None:
    """Lesson 12: the chunks of the line rank ``rank`` holds in the zig-zag split over ``ranks`` ranks."""
    expected = context_parallel.chunk_ids(rank, ranks, "zigzag")
    answer = sorted(answer) if isinstance(answer, (list, tuple)) else answer
    return check("zig-zag chunks", answer, expected, hints=[
        ([rank], "that is the contiguous split: the line in 2 x ranks chunks, two chunks a rank."),
        ([2 * rank, 2 * rank + 1], "two neighbouring chunks would keep the imbalance: take one from each end."),
        ([rank, ranks - 1 - rank], "count the chunks: there are 2 x ranks of them, numbered 0 to 2 x ranks - 1.")],
        otherwise="the line is cut into 2 x ranks chunks; rank r takes chunk r and its mirror from the other end.")
