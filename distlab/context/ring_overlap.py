"""Where the time goes in ring attention: each hop's transfer hidden behind its compute, or not.

Introduced in Lesson 15 (where the time goes).  Lesson 12's ring (``context_parallel._Ring``) passes the
K/V blocks round one hop at a time, either serially (compute with the block held, then pass it on:
every transfer is waited for in full) or overlapped (post the exchange, compute, then wait: only
what the compute did not cover is waited for, the *exposed* transfer).  A hop's compute grows with
the square of the block's tokens and its transfer with the tokens, so past some block size the
transfer hides entirely.  This module measures that and predicts it:

* ``time_ring`` (a worker function: ``distlab.launch(ring_overlap.time_ring, 2, tokens=256)``) runs one
  ring-attention forward and backward on random blocks, serial and overlapped in turn, ``repeats``
  times, checks that both ways give the same bits, and returns this rank's median step seconds,
  exposed wait, compute and the bytes of a hop, with the latest step's per-hop records;
* ``measure`` launches it on real ranks (torchrun, gloo, one thread a rank);
* ``predict_hop`` prices a hop: its transfer with the alpha-beta model (``predict.alpha_beta``'s
  ``step_time``: one step of a ring in which every rank sends one block to the next), its compute from
  the block's FLOPs at a given FLOP/s; ``hiding_tokens`` finds the block size from which the compute
  covers the transfer, forward and backward.
"""
from __future__ import annotations

import statistics
import time

import torch

from ..checks import check_int, check_positive
from ..predict.alpha_beta import Link, step_time

WAYS = ("serial", "overlapped")
# products of (tokens x head_dim) by (head_dim x tokens) (or the transpose) a hop computes per head, for one
# block of queries on one block of keys: forward the scores Q K^T and the weighted values P V; backward
# (flash attention's, which recomputes P) Q K^T again, dV = P^T dO, dP = dO V^T, dQ = dS K and dK = dS^T Q
PRODUCTS = {"forward": 2, "backward": 5}
# blocks a hop's exchange carries: forward K and V; backward K and V, and the held block's dK and dV
BLOCKS = {"forward": 2, "backward": 4}


def hop_bytes(tokens: int, heads: int, head_dim: int, *, batch: int = 1, itemsize: int = 4) -> dict[str, int]:
    """Lesson 15: the bytes one rank passes on in one hop, forward and backward."""
    block = batch * heads * tokens * head_dim * itemsize
    return {phase: n * block for phase, n in BLOCKS.items()}


def hop_flops(tokens: int, heads: int, head_dim: int, *, batch: int = 1) -> dict[str, int]:
    """Lesson 15: the FLOPs of one hop's block of attention (every score computed: no causal mask),
    forward and backward: ``tokens x tokens x head_dim`` multiply-adds a product and a head, 2 FLOPs each."""
    one = 2 * batch * heads * tokens * tokens * head_dim
    return {phase: n * one for phase, n in PRODUCTS.items()}


def check_block(world_size: int, *, tokens=256, heads=4, head_dim=16, batch=1, repeats=5, causal=False,
                backend: str = "torchrun") -> None:
    """Lesson 15: refuse a block or a job that cannot be timed, before any process starts."""
    for name, value in (("tokens", tokens), ("heads", heads), ("head_dim", head_dim), ("batch", batch),
                        ("repeats", repeats)):
        check_int(name, value)
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if backend != "torchrun":
        raise ValueError("ring attention passes K and V to the next rank point to point: it runs on "
                         "launch(backend='torchrun') only (Horovod has no send and receive)")
    if world_size < 2:
        raise ValueError(f"a ring needs at least 2 ranks to pass its blocks round, got world_size={world_size}")


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def time_ring(worker, *, tokens: int = 256, heads: int = 4, head_dim: int = 16, batch: int = 1,
              repeats: int = 5, causal: bool = False, seed: int = 0) -> dict:
    """Lesson 15 (worker): one ring-attention forward and backward of a block of ``tokens`` tokens a rank
    (``heads`` heads of ``head_dim``), serial and overlapped, timed ``repeats`` times each.

    The two ways take turns (the order flips every repeat) after a barrier, after one untimed step
    each, whose results must be equal bit for bit (``identical``).  Per way, medians over the repeats:
    ``step_s`` (forward and backward), ``wait_s`` (the exposed transfer, summed over the hops; it also holds
    waiting for a neighbour whose compute ran late, which on a busy machine it often does),
    ``compute_s`` and ``post_s`` (starting the exchanges; summed over the hops) and, serial only,
    ``transfer_s`` (the exchanges, whole); ``hops`` the latest step's records (``context_parallel.Piece.hops``)."""
    from .context_parallel import Piece

    n = worker.world_size
    group = worker.new_group(range(n))
    g = torch.Generator().manual_seed(seed + worker.rank)
    q, k, v, d_out = (torch.randn(batch, heads, tokens, head_dim, generator=g).to(worker.device) for _ in range(4))
    pieces = {way: Piece(worker, group, tokens * n, overlap=way == "overlapped") for way in WAYS}

    def step(way: str):
        piece = pieces[way]
        piece.new_step()
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        worker.barrier()
        t0 = time.perf_counter()
        out = piece.attend(*leaves, causal)
        out.backward(d_out)
        worker.synchronize()
        hops = list(piece.hops)
        run = {"step_s": time.perf_counter() - t0, "hops": hops, "blocks": piece.blocks,
               **{key: sum(h[key] for h in hops) for key in ("wait_s", "compute_s", "post_s")}}
        if way == "serial":
            run["transfer_s"] = sum(h["transfer_s"] for h in hops)
        return run, [out.detach(), *(t.grad for t in leaves)]

    first = {way: step(way)[1] for way in WAYS}             # untimed: allocation, caches, and the check
    identical = all(torch.equal(a, b) for a, b in zip(first["serial"], first["overlapped"]))
    runs = {way: [] for way in WAYS}
    for rep in range(repeats):
        for way in WAYS if rep % 2 == 0 else WAYS[::-1]:
            runs[way].append(step(way)[0])
    flops = hop_flops(tokens, heads, head_dim, batch=batch)
    result = {"rank": worker.rank, "world_size": n, "tokens": tokens, "heads": heads, "head_dim": head_dim,
              "batch": batch, "causal": causal, "repeats": repeats, "identical": identical,
              "hop_bytes": hop_bytes(tokens, heads, head_dim, batch=batch, itemsize=q.element_size()),
              # every block this rank computed, forward and backward (the causal mask skips some)
              "flops": runs["serial"][-1]["blocks"] * (flops["forward"] + flops["backward"])}
    for way in WAYS:
        keys = ("step_s", "wait_s", "compute_s", "post_s") + (("transfer_s",) if way == "serial" else ())
        result[way] = {key: _median(runs[way], key) for key in keys}
        result[way]["step_runs"] = [r["step_s"] for r in runs[way]]       # each repeat: one forward and backward
        result[way]["hops"] = runs[way][-1]["hops"]
    return result


time_ring.validate_args = check_block       # the launcher checks the block before starting processes
time_ring.supports = frozenset({"torchrun", "cpu"})


def measure(tokens: int = 256, heads: int = 4, head_dim: int = 16, *, world_size: int = 2, batch: int = 1,
            repeats: int = 5, causal: bool = False, warm: bool | str = "auto") -> list[dict]:
    """Lesson 15: ``time_ring`` on ``world_size`` real CPU ranks (one thread each, gloo): each rank's result."""
    from ..processes.launcher import launch

    return launch(time_ring, world_size, device="cpu", progress="none", warm=warm, tokens=tokens, heads=heads,
                  head_dim=head_dim, batch=batch, repeats=repeats, causal=causal)


def predict_hop(tokens: int, heads: int, head_dim: int, link: Link, flops_per_s: float, *, batch: int = 1,
                world_size: int = 2, itemsize: int = 4) -> dict[str, dict]:
    """Lesson 15: what one hop costs, forward and backward: ``transfer_s`` from the alpha-beta model (one
    step in which every rank of the ring sends its hop's messages to the next: ``alpha_beta.step_time``,
    so ``link.lanes`` decides whether the ranks' messages share one link), ``compute_s`` the block's FLOPs
    at ``flops_per_s``, and ``hidden``: whether the compute covers the transfer (overlapped, nothing
    is then waited for).  The backward's two messages (K and V; dK and dV) both travel during a hop."""
    check_block(world_size, tokens=tokens, heads=heads, head_dim=head_dim, batch=batch)
    check_positive("flops_per_s", flops_per_s, " of FLOP/s")
    nbytes, flops = hop_bytes(tokens, heads, head_dim, batch=batch, itemsize=itemsize), \
        hop_flops(tokens, heads, head_dim, batch=batch)
    hops = {}
    for phase in ("forward", "backward"):
        messages = BLOCKS[phase] // 2              # K and V go as one message; backward dK and dV as another
        step = {"phase": f"{phase} hop", "messages": [
            {"src": r, "dst": (r + 1) % world_size, "chunk": None, "bytes": nbytes[phase] // messages}
            for r in range(world_size) for _ in range(messages)]}
        transfer, compute = step_time(step, link, world_size), flops[phase] / flops_per_s
        hops[phase] = {"bytes": nbytes[phase], "flops": flops[phase], "transfer_s": transfer,
                       "compute_s": compute, "hidden": compute >= transfer}
    return hops


def hiding_tokens(heads: int, head_dim: int, link: Link, flops_per_s: float, *, batch: int = 1,
                  world_size: int = 2, itemsize: int = 4, limit: int = 1 << 24) -> dict[str, int | None]:
    """Lesson 15: the smallest block (tokens a rank) whose compute covers its transfer, forward and
    backward (``predict_hop``), and ``both``, the larger; None where no block up to ``limit`` tokens does.
    Found by doubling, then halving the gap: past its first block that hides, compute (tokens squared)
    stays ahead of the transfer (tokens)."""
    def hides(tokens: int, phase: str) -> bool:
        return predict_hop(tokens, heads, head_dim, link, flops_per_s, batch=batch, world_size=world_size,
                           itemsize=itemsize)[phase]["hidden"]

    found = {}
    for phase in ("forward", "backward"):
        high = 1
        while high <= limit and not hides(high, phase):
            high *= 2
        if high > limit:
            found[phase] = None
            continue
        low = high // 2                             # does not hide (or is 0)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if hides(middle, phase) else (middle, high)
        found[phase] = high
    found["both"] = None if None in found.values() else max(found.values())
    return found
