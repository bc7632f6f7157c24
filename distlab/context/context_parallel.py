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
   A rank holds two blocks at a time, whatever the number of ranks.  Lesson 15 (where the time
   goes): the naive ring computes with its block and only then passes it on, so every hop's transfer
   is waited for in full; the overlapped ring (the default, as picotron's ring attention does it)
   posts the exchange first and computes while the block travels (``Piece.overlap``).
3. **zig-zag** (``split="zigzag"``): with the causal model, a contiguous split gives the last rank
   the most work (its queries see every block) and the first the least.  Cutting the line into
   ``2 x ranks`` chunks and giving rank ``r`` chunks ``r`` and ``2 x ranks - 1 - r`` evens it out.

The read-out heads need the whole line: ``Piece.whole_line`` gathers it after the last LayerNorm
(its backward keeps this rank's tokens' gradient: every rank computes the same loss).  Parameters
before that point see only this rank's tokens, so their gradients are summed over the context
group (``sum_token_grads``), as data parallelism sums over samples.
"""
from __future__ import annotations

import contextlib
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
    compares ranks' loads with the other.

    Lesson 15: ``overlap`` says when a hop's exchange starts: after the compute (False: the naive,
    serial ring) or before it (True: the transfer travels behind the compute).  ``hops`` keeps one
    record per hop of the latest step, in wall-clock seconds (``time.perf_counter``, one clock for
    every rank of the machine): ``start``, ``post_s`` (starting the exchanges), ``compute_s``, ``wait_s``
    (the *exposed* transfer: waiting for the exchange once the compute is done), ``transfer_s`` (serial
    only: the exchange from its start to its end; None when overlapped, where it ran behind the compute)
    and ``seconds`` (the hop)."""

    def __init__(self, worker, group, tokens: int, split: str = "contiguous", attention: str = "ring",
                 overlap: bool = True):
        if attention not in ATTENTION:
            raise ValueError(f"unknown context-parallel attention {attention!r}; use one of {', '.join(ATTENTION)}")
        if not isinstance(overlap, bool):
            raise ValueError(f"overlap must be True (post each hop's exchange before its compute) or False "
                             f"(after it), got {overlap!r}")
        super().__init__(worker, group, tokens, split)
        self.attention, self.overlap = attention, overlap
        self.new_step()

    def new_step(self) -> None:
        """Forget the previous step's messages, hops, attention time and blocks of scores."""
        self.traffic, self.log, self.work, self.hops = Traffic(), [], 0.0, []
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
    def post(self, block: torch.Tensor):
        """Start sending ``block`` to the next rank and taking the previous rank's: a ``Pending`` whose
        ``wait()`` (``Piece.wait``) gives the block that arrived.  Starting costs time too (``post_s``)."""
        ranks, t0 = self.group.ranks, time.perf_counter()
        nxt, prev = ranks[(self.index + 1) % self.size], ranks[(self.index - 1) % self.size]
        pending = self.worker.exchange(block, nxt, torch.empty_like(block), prev, async_op=True)
        self.hops[-1]["post_s"] += time.perf_counter() - t0
        return pending

    def sent(self, phase: str, hop: int, holder: int, *blocks: torch.Tensor) -> None:
        """Count and log what this hop passes on: ``blocks`` (messages about the ``holder``-th rank's chunks)."""
        for block in blocks:
            self.traffic.add(phase, block)
        self.log.append({"phase": phase, "hop": hop, "from": self.worker.rank,
                         "to": self.group.ranks[(self.index + 1) % self.size],
                         "chunks": chunk_ids(holder, self.size, self.split),
                         "bytes": sum(b.numel() * b.element_size() for b in blocks)})

    def pairs(self, holder: int, causal: bool):
        """The (my chunk, its chunk) pairs of blocks to compute against the ``holder``-th rank's K/V:
        with the causal mask, a chunk of keys after a chunk of queries is skipped (all hidden)."""
        c = self.chunk
        for i, qc in enumerate(chunk_ids(self.index, self.size, self.split)):
            for j, kc in enumerate(chunk_ids(holder, self.size, self.split)):
                if not (causal and kc > qc):
                    yield slice(i * c, (i + 1) * c), qc, slice(j * c, (j + 1) * c), kc

    # -- where a hop's time goes (lesson 15) ------------------------------------------------------
    def start_hop(self, phase: str, hop: int) -> None:
        """A new hop of the ring: its record, its clock started."""
        self.hops.append({"phase": phase, "hop": hop, "overlap": self.overlap, "start": time.perf_counter(),
                          "post_s": 0.0, "compute_s": 0.0, "wait_s": 0.0, "transfer_s": None if self.overlap else 0.0})

    @contextlib.contextmanager
    def computing(self):
        """What runs inside is this hop's compute: wall-clock seconds for the hop, CPU seconds for ``work``."""
        wall, cpu = time.perf_counter(), time.thread_time()
        yield
        self.work += time.thread_time() - cpu
        self._computed = time.perf_counter()
        self.hops[-1]["compute_s"] += self._computed - wall

    def wait(self, pending):
        """``pending.wait()``; the seconds it takes are this hop's exposed transfer."""
        t0 = time.perf_counter()
        arrived = pending.wait()
        self.hops[-1]["wait_s"] += time.perf_counter() - t0
        return arrived

    def end_hop(self) -> None:
        """The hop is done: its seconds (serial: its exchange's too)."""
        hop, now = self.hops[-1], time.perf_counter()
        hop["seconds"] = now - hop["start"]
        if not self.overlap:                 # serial: the exchange started after the compute, all of it exposed
            hop["transfer_s"] = now - self._computed


def split_line(model, worker, group, tokens: int, split: str = "contiguous", attention: str = "ring",
               overlap: bool = True) -> Piece:
    """Lesson 12: ``model`` (a ``LineReader``) now runs on this rank's piece of each line, in place
    (``overlap``, lesson 15: the ring's exchanges posted before each hop's compute, or after it)."""
    piece = Piece(worker, group, tokens, split, attention, overlap)
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
    """Lesson 12: ring attention, forward and backward written out (the flash-attention recurrences).

    Lesson 15: each hop posts its exchange after its compute (serial) or before it (overlapped).  A block's
    gradients can only leave once this hop has added to them, so overlapped they travel behind the *next*
    hop's compute (picotron's order).  Either way a hop adds its share, computed in fresh buffers, to the
    gradients that arrived: the same messages and the same arithmetic, only the waiting moves."""

    @staticmethod
    def forward(ctx, q, k, v, piece, causal):
        n, me = piece.size, piece.index
        out = torch.zeros_like(q)        # laid out as q is: the heads side by side are a view of it
        lse = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
        kv = torch.stack([k, v])                              # one message a hop
        for hop in range(n):
            holder = (me - hop) % n                           # whose K/V this rank holds now
            piece.start_hop("forward", hop)
            onward = piece.post(kv) if piece.overlap and hop < n - 1 else None   # overlapped: it leaves first
            with piece.computing():
                for qs, qc, ks, kc in piece.pairs(holder, causal):
                    piece.blocks += 1
                    piece.computed.add((qc, kc))
                    o, s = block_attention(q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :], qc, kc, causal)
                    out[..., qs, :], lse[..., qs, :] = merge(out[..., qs, :], lse[..., qs, :], o, s)
            if hop < n - 1:
                if onward is None:
                    onward = piece.post(kv)                   # serial: it leaves only now
                piece.sent("forward", hop, holder, kv)
                kv = piece.wait(onward)
            piece.end_hop()
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
        kv, grads = torch.stack([k, v]), None    # grads: the held block's dK and dV so far, on their way here
        for hop in range(n):
            holder, last = (me - hop) % n, hop == n - 1
            piece.start_hop("backward", hop)
            onward = piece.post(kv) if piece.overlap and not last else None    # overlapped: K, V leave first
            with piece.computing():
                mine = torch.zeros_like(kv)                   # this hop's share of the held block's dK, dV
                for qs, qc, ks, kc in piece.pairs(holder, causal):
                    scores = q[..., qs, :] @ kv[0][..., ks, :].transpose(-2, -1) * scale
                    if causal and kc == qc:
                        t = scores.shape[-1]
                        hidden = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
                        scores = scores.masked_fill(hidden, float("-inf"))
                    p = torch.exp(scores - lse[..., qs, :])          # the forward's probabilities, recomputed
                    mine[1][..., ks, :] += p.transpose(-2, -1) @ d_out[..., qs, :]
                    ds = p * (d_out[..., qs, :] @ kv[1][..., ks, :].transpose(-2, -1) - delta[..., qs, :])
                    dq[..., qs, :] += ds @ kv[0][..., ks, :] * scale
                    mine[0][..., ks, :] += ds.transpose(-2, -1) @ q[..., qs, :] * scale
            if not last and onward is None:
                onward = piece.post(kv)                       # serial: K and V leave only now
            d_kv = mine if grads is None else piece.wait(grads) + mine
            grads = piece.post(d_kv)         # the gradients leave once this hop has added to them; the last
            if not piece.overlap or last:    # hop takes them home (not K and V: their owner has them)
                piece.wait(grads)            # overlapped, the others arrive behind the next hop's compute
            piece.sent("backward", hop, holder, *([] if last else [kv]), d_kv)
            if not last:
                kv = piece.wait(onward)
            piece.end_hop()
        dk, dv = grads.wait().unbind(0)
        return dq, dk, dv, None, None
