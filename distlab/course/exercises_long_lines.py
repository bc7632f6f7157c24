"""The exercises of lesson 12 (long lines: splitting the heads and the sequence), checked as ``exercises.py``
checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.  The expected
values come from the functions the lesson's ranks are checked against, never typed in.  The build-it
exercise (``merge_partials``) runs the learner's merge on real ranks (``build.run``) inside a ring and
compares each hop with plain softmax in one process (``distlab.compare``).
"""
from __future__ import annotations

import math

import torch

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


# -- build it: the log-sum-exp merge, on real ranks round a real ring ----------------------------------
RING = dict(lines=2, tokens=16, dim=4, seed=0)       # the line the ranks share; each holds tokens / ranks


def _line(lines: int, tokens: int, dim: int, seed: int):
    """The whole line's Q, K and V, the same on every rank and in the checker (one seed)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(lines, tokens, dim, generator=g, dtype=torch.float64) for _ in range(3)]


def ring_with_your_merge(worker, merge, lines: int, tokens: int, dim: int, seed: int) -> list[dict]:
    """Lesson 12: on each rank, ring attention whose merge is the learner's: at hop 0 a rank attends its
    queries to its own K and V; at each later hop to the K and V the previous rank passed on, merged
    into what it had with ``merge``.  Returns, hop by hop, the output and log-sum-exp it held."""
    n, me = worker.world_size, worker.rank
    q, k, v = (t.chunk(n, dim=1) for t in _line(lines, tokens, dim, seed))
    q = q[me]
    kv = torch.stack([k[me], v[me]])
    out, lse = context_parallel.block_attention(q, kv[0], kv[1], 0, 0, causal=False)
    held = [{"output": out.clone(), "log-sum-exp": lse.clone()}]
    for _hop in range(1, n):
        incoming = torch.empty_like(kv)
        worker.exchange(kv, (me + 1) % n, incoming, (me - 1) % n)
        kv = incoming
        block, block_lse = context_parallel.block_attention(q, kv[0], kv[1], 0, 0, causal=False)
        out, lse = merge(out, lse, block, block_lse)
        held.append({"output": out.detach().clone(), "log-sum-exp": lse.detach().clone()})
    return {"rank": me, "held": held}


def reference_ring(rank: int, ranks: int, lines: int, tokens: int, dim: int, seed: int) -> list[dict]:
    """Lesson 12: one process, no merge: rank ``rank``'s queries attended, by plain softmax, to the keys
    its ring had brought it after each hop (its own piece, then the previous rank's, ...)."""
    q, k, v = (t.chunk(ranks, dim=1) for t in _line(lines, tokens, dim, seed))
    held, seen = [], []
    for hop in range(ranks):
        seen.append((rank - hop) % ranks)
        keys, values = torch.cat([k[i] for i in seen], 1), torch.cat([v[i] for i in seen], 1)
        scores = q[rank] @ keys.transpose(-2, -1) / math.sqrt(dim)
        held.append({"output": torch.softmax(scores, -1) @ values,
                     "log-sum-exp": torch.logsumexp(scores, -1, keepdim=True)})
    return held


def merge_partials(merge, *, ranks: int = 4) -> bool | None:
    """Lesson 12: run the learner's ``merge(out_a, lse_a, out_b, lse_b) -> (out, lse)`` inside ring attention
    on ``ranks`` real ranks; compare every rank's output and log-sum-exp, hop by hop, with plain softmax
    attention over the keys that rank has seen (``distlab.compare``), and say where they part."""
    from . import build
    from ..stepwise import compare

    name = "the log-sum-exp merge"
    records = build.attempt(name, merge, "distlab.course.exercises_long_lines:ring_with_your_merge",
                            world_size=ranks, **RING)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    for record in sorted(records, key=lambda r: r["rank"]):
        rank = record["rank"]
        report = compare(record["held"], reference_ring(rank, ranks, **RING))
        if report.same:
            continue
        hop, what = report.step, report.name
        factor = f" (yours is {report.factor:.3g}x it: a constant factor)" if report.factor else ""
        agreed = "hop 0 agrees" if hop == 1 else f"hops 0 to {hop - 1} agree"
        print(f"{name}: not quite. On rank {rank}, {agreed}; at hop {hop} the {what} differs "
              f"from softmax over the keys seen so far by {report.difference:.3g}{factor}.")
        if what == "output":
            print("  The merged output is wrong: scale each partial output by its share of the total, "
                  "exp(its log-sum-exp - the total's), where the total is logaddexp of the two.")
        else:
            print(f"  The output is right at hop {hop}, but the log-sum-exp you return is not the total's "
                  "(logaddexp of the two): the next hop weighs what you hold with it.")
        return False
    print(f"{name}: correct. On {ranks} real ranks, every hop of the ring equals softmax over the keys seen so far.")
    return True
