"""Context parallelism by hand: the line cut along the sequence, one piece per rank.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  Everything in a
transformer but attention works token by token, so a rank holding a piece of the line can run the
embeddings, LayerNorms and MLPs on its own tokens alone.  Attention is the one place where a token
needs the others: each rank's queries need every rank's keys and values.  Three ways, naive first:

1. **all-gather** (``attention="all_gather"``): every rank gathers every rank's K and V and attends
   its queries to the whole line (``sequence_parallel.gather_line``, whose backward reduce-scatters
   K's and V's gradients).  Plain, and autograd does the rest, but each rank holds the whole line's
   K and V at once.
2. **ring** (``attention="ring"``): the K/V blocks travel round the ring of ranks, one hop a step;
   each rank attends its queries to the block it holds and merges the partial results with the
   online-softmax rule (each partial result carries its log-sum-exp, Milakov & Gimelshein 2018;
   ring attention: Liu et al. 2023).  The backward sends the blocks round again, each with its
   gradient, which every rank adds to on the way (the flash-attention backward, Dao 2022).
   A rank holds two blocks at a time, whatever the number of ranks.
3. **zig-zag** (``split="zigzag"``): with the causal model, a contiguous split gives the last rank
   the most work (its queries see every block) and the first the least.  Cutting the line into
   ``2 x ranks`` chunks and giving rank ``r`` chunks ``r`` and ``2 x ranks - 1 - r`` evens it out.

The read-out heads need the whole line: ``Piece.whole_line`` gathers it after the last LayerNorm
(its backward keeps this rank's tokens' gradient: every rank computes the same loss).  Parameters
before that point see only this rank's tokens, so their gradients are summed over the context
group (``sum_token_grads``), as data parallelism sums over samples.
"""
from __future__ import annotations

import math
import time

import torch

from ..tensor.tensor_parallel import Traffic
from ..train.reduce import mark
from ..tensor.sequence_parallel import LinePiece, chunk_ids, gather_line, positions
from ..sequence.transformer import SEES_WHOLE_LINE

ATTENTION = ("all_gather", "ring")


def block_attention(q, k, v, q_chunk: int, k_chunk: int, causal: bool):
    """Lesson 12: one chunk of queries on one chunk of keys: the normalised output and each query's
    log-sum-exp of scores, or ``None`` when the causal mask hides the whole block (keys after queries)."""
    if causal and k_chunk > q_chunk:
        return None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal and k_chunk == q_chunk:
        t = q.shape[-2]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.exp(scores - lse) @ v, lse


def merge(out, lse, block_out, block_lse):
    """Lesson 12: the online-softmax rule.  Two partial results over disjoint keys, each normalised over
    its own keys, combine into the result over both: weigh each by its share of the total exp-sum."""
    total = torch.logaddexp(lse, block_lse)
    return out * torch.exp(lse - total) + block_out * torch.exp(block_lse - total), total


class Piece(LinePiece):
    """Lesson 12: this rank's piece of the line and how its attention reaches the others'.

    ``log`` keeps each message of the latest step (phase, hop, sender, receiver, chunks, bytes) and
    ``work`` the seconds this rank spent computing attention in it (its thread's CPU time, so that a
    rank waiting for a core is not charged for it): the lesson replays the ring from the one and
    compares ranks' loads with the other."""

    def __init__(self, worker, group, tokens: int, split: str = "contiguous", attention: str = "ring"):
        if attention not in ATTENTION:
            raise ValueError(f"unknown context-parallel attention {attention!r}; use one of {', '.join(ATTENTION)}")
        super().__init__(worker, group, tokens, split)
        self.attention = attention
        self.new_step()

    def new_step(self) -> None:
        """Forget the previous step's messages, attention time and blocks of scores."""
        self.traffic, self.log, self.work = Traffic(), [], 0.0
        self.blocks = 0      # (chunk of queries, chunk of keys) blocks of scores computed forward
        self.computed = set()    # which ones (the lesson colours the mask by the rank that computed each)

    @property
    def bytes(self) -> dict[str, int]:
        """The bytes of this step's messages, forward and backward."""
        return self.traffic.bytes

    def attend(self, q, k, v, causal: bool):
        """Attention of this rank's queries on the whole line's keys (``Attention.attend`` calls it)."""
        if self.size == 1:
            return block_attention(q, k, v, 0, 0, causal)[0]
        if self.attention == "all_gather":
            return self._gathered(q, k, v, causal)
        return _Ring.apply(q, k, v, self, causal)

    # -- 1. all-gather: every rank holds the whole line's K and V ------------------------------
    def _gathered(self, q, k, v, causal):
        k_all, v_all = (gather_line(t, self.worker, self.group, self.traffic) for t in (k, v))
        mine = chunk_ids(self.index, self.size, self.split)
        self.blocks += len(mine) * self.tokens // self.chunk            # all of them, masked or not
        self.computed |= {(qc, kc) for qc in mine for kc in range(self.tokens // self.chunk)}
        t0 = time.thread_time()
        scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            order = torch.cat([positions(i, self.size, self.tokens, self.split) for i in range(self.size)])
            scores = scores.masked_fill(order[None, :] > self.mine[:, None], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v_all
        self.work += time.thread_time() - t0
        return out

    # -- 2. the ring ------------------------------------------------------------------------------
    def pass_on(self, block: torch.Tensor, phase: str, hop: int, holder: int) -> torch.Tensor:
        """Send ``block`` (held for the ``holder``-th rank) to the next rank, take the previous rank's."""
        ranks = self.group.ranks
        nxt, prev = ranks[(self.index + 1) % self.size], ranks[(self.index - 1) % self.size]
        incoming = torch.empty_like(block)
        self.worker.exchange(block, nxt, incoming, prev)
        nbytes = block.numel() * block.element_size()
        self.traffic.add(phase, block)
        self.log.append({"phase": phase, "hop": hop, "from": self.worker.rank, "to": nxt,
                         "chunks": chunk_ids(holder, self.size, self.split), "bytes": nbytes})
        return incoming

    def pairs(self, holder: int, causal: bool):
        """The (my chunk, its chunk) pairs of blocks to compute against the ``holder``-th rank's K/V:
        with the causal mask, a chunk of keys after a chunk of queries is skipped (all hidden)."""
        c = self.chunk
        for i, qc in enumerate(chunk_ids(self.index, self.size, self.split)):
            for j, kc in enumerate(chunk_ids(holder, self.size, self.split)):
                if not (causal and kc > qc):
                    yield slice(i * c, (i + 1) * c), qc, slice(j * c, (j + 1) * c), kc



def split_line(model, worker, group, tokens: int, split: str = "contiguous", attention: str = "ring") -> Piece:
    """Lesson 12: ``model`` (a ``LineReader``) now runs on this rank's piece of each line, in place."""
    piece = Piece(worker, group, tokens, split, attention)
    if tokens > model.cfg.positions:
        raise ValueError(f"a line of {tokens} tokens is longer than the model's {model.cfg.positions} positions")
    model.set_piece(piece)
    return piece


def parallelize(model, layout) -> None:
    """Lesson 12: the context axis's transform of the one model (``parallelize.transforms``): the line cut
    across the mesh's context group (``split``: contiguous or zig-zag; ``attention``: ring or all-gather),
    so every parameter but the read-out heads (which see the gathered line) holds a part of its gradient
    per context rank."""
    mesh, spec = layout.mesh, layout.spec.parallel
    if mesh.size("context") == 1:
        return
    layout.piece = layout.line_piece = split_line(model, layout.worker, mesh.group("context"), model.cfg.positions,
                                                  spec.split, spec.attention)
    for name, p in model.named_parameters():
        if not name.startswith(SEES_WHOLE_LINE):
            mark(p, add=("context",))


class _Ring(torch.autograd.Function):
    """Lesson 12: ring attention, forward and backward written out (the flash-attention recurrences)."""

    @staticmethod
    def forward(ctx, q, k, v, piece, causal):
        n, me = piece.size, piece.index
        out = torch.zeros_like(q)        # laid out as q is: the heads side by side are a view of it
        lse = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
        kv = torch.stack([k, v])                              # one message a hop
        for hop in range(n):
            holder = (me - hop) % n                           # whose K/V this rank holds now
            t0 = time.thread_time()
            for qs, qc, ks, kc in piece.pairs(holder, causal):
                piece.blocks += 1
                piece.computed.add((qc, kc))
                o, s = block_attention(q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :], qc, kc, causal)
                out[..., qs, :], lse[..., qs, :] = merge(out[..., qs, :], lse[..., qs, :], o, s)
            piece.work += time.thread_time() - t0
            if hop < n - 1:
                kv = piece.pass_on(kv, "forward", hop, holder)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.piece, ctx.causal = piece, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        piece, causal = ctx.piece, ctx.causal
        n, me, scale = piece.size, piece.index, 1 / math.sqrt(q.shape[-1])
        delta = (d_out * out).sum(-1, keepdim=True)          # rowsum(dO * O): softmax's backward term
        dq = torch.zeros_like(q)
        travel = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])   # K, V and their gradients
        for hop in range(n):
            holder = (me - hop) % n
            kb, vb, dk, dv = travel.unbind(0)
            t0 = time.thread_time()
            for qs, qc, ks, kc in piece.pairs(holder, causal):
                scores = q[..., qs, :] @ kb[..., ks, :].transpose(-2, -1) * scale
                if causal and kc == qc:
                    t = scores.shape[-1]
                    hidden = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
                    scores = scores.masked_fill(hidden, float("-inf"))
                p = torch.exp(scores - lse[..., qs, :])          # the forward's probabilities, recomputed
                dv[..., ks, :] += p.transpose(-2, -1) @ d_out[..., qs, :]
                ds = p * (d_out[..., qs, :] @ vb[..., ks, :].transpose(-2, -1) - delta[..., qs, :])
                dq[..., qs, :] += ds @ kb[..., ks, :] * scale
                dk[..., ks, :] += ds.transpose(-2, -1) @ q[..., qs, :] * scale
            piece.work += time.thread_time() - t0
            if hop < n - 1:
                travel = piece.pass_on(travel, "backward", hop, holder)
        # one more hop takes each block's gradients (not K and V: their owner has them) home
        dk, dv = piece.pass_on(travel[2:], "backward", n - 1, (me - n + 1) % n).unbind(0)
        return dq, dk, dv, None, None
