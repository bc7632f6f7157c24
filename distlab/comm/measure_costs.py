"""Measuring what communication costs on this machine, on real ranks (lesson 03).

``predict.alpha_beta`` predicts; this module measures, so that the two can be compared:

* ``measure`` (a worker function: ``distlab.launch(measure_costs.measure, 2)``) times a
  ping-pong and an add, to fit the model's ``Link`` with ``cost_model.fit_link``, then every
  hand-written algorithm and gloo's ``dist.all_reduce`` side by side;
* ``compare`` puts each measured time next to the model's prediction, and ``verdict`` says
  what that comparison shows over independent repeats (how close, and, by the course's one rule,
  whether the stopwatch names a winner and the model picked it).
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from ..models import DTYPES
from .collectives import ALGORITHMS, all_reduce, check_torchrun
from ..predict.alpha_beta import Link, check_algorithm, predict_time
from .cost_model import BASELINE, best


def repeats_for(numel: int, repeats: int | None = None) -> int:
    """How many timed repetitions: many for fast small tensors, a few for large ones."""
    return repeats if repeats is not None else max(5, min(30, int(3e7 / max(numel, 1))))


def _round_trip(rank: int, out: torch.Tensor, into: torch.Tensor) -> None:
    """Rank 0 sends ``out`` to rank 1, which receives it into ``into`` and sends ``out`` back:
    two messages, one after the other."""
    if rank == 0:
        dist.send(out, 1)
        dist.recv(into, 1)
    elif rank == 1:
        dist.recv(into, 0)
        dist.send(out, 0)


def _ping_pong(rank: int, sizes, repeats) -> dict:
    """Rank 0 sends ``b`` bytes to rank 1, which sends them back; half the best round trip.

    Then, for sizes of 800 kB and more, the same two messages *at once* (both ranks send ``b``
    bytes to each other, as a ring's step does) side by side with a round trip, taking turns
    every repetition: a busy moment of the machine hits both alike, and ``fit_link`` reads the
    lanes from the two (``exchange_seconds``, ``round_trip_seconds``: the best of each)."""
    seconds = []
    for numel in sizes:
        buf, best = torch.zeros(numel, dtype=torch.uint8), float("inf")
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            _round_trip(rank, buf, buf)
            best = min(best, (time.perf_counter() - t0) / 2)
        seconds.append(best)
    big = [n for n in sizes if n >= 800_000]
    exchange, trips = [], []
    for numel in big:
        mine, theirs = torch.zeros(numel, dtype=torch.uint8), torch.zeros(numel, dtype=torch.uint8)
        best = {"at_once": float("inf"), "in_turn": float("inf")}
        for rep in range(repeats):
            for way in (("at_once", "in_turn") if rep % 2 == 0 else ("in_turn", "at_once")):
                dist.barrier()
                t0 = time.perf_counter()
                if way == "in_turn":
                    _round_trip(rank, mine, theirs)
                elif rank in (0, 1):
                    for work in [dist.isend(mine, 1 - rank), dist.irecv(theirs, 1 - rank)]:
                        work.wait()
                best[way] = min(best[way], time.perf_counter() - t0)
        exchange.append(best["at_once"])
        trips.append(best["in_turn"])
    return {"bytes": list(sizes), "seconds": seconds, "exchange_bytes": big, "exchange_seconds": exchange,
            "round_trip_seconds": trips}


def _time_add(sizes, dtype, repeats) -> dict:
    """Seconds to add one tensor into another (all ranks at once, as in a real reduction)."""
    seconds = []
    for numel in sizes:
        a, b = torch.ones(numel, dtype=dtype), torch.ones(numel, dtype=dtype)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            a.add_(b)
            best = min(best, time.perf_counter() - t0)
        seconds.append(best)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return {"bytes": [n * itemsize for n in sizes], "seconds": seconds}


def measure(worker, sizes=(1_000, 10_000, 100_000, 1_000_000), algorithms=(*ALGORITHMS, BASELINE),
            dtype: str = "float32", repeats: int | None = None,
            ping_pong_bytes=(8, 800, 8_000, 80_000, 800_000, 4_000_000, 8_000_000, 16_000_000,
                             40_000_000),
            ping_pong_repeats: int = 20, seed: int = 0) -> dict:
    """Lesson 03 (worker): a ping-pong, an add, then every algorithm timed side by side.

    Algorithms take turns (the order rotates every repetition) on a freshly copied tensor
    after a barrier, so that a busy moment of the machine hits them all alike.  A time is the
    slowest rank's; the record keeps every repetition (take the best, or the median).
    Returns ``{"world_size", "dtype", "ping_pong", "add", "times": {alg: {numel: [s, ...]}}}``.
    """
    check_torchrun(worker)
    torch_dtype = DTYPES[dtype]
    ping = _ping_pong(worker.rank, ping_pong_bytes, ping_pong_repeats)
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    add = _time_add([b // itemsize for b in ping_pong_bytes if b >= 80_000], torch_dtype, ping_pong_repeats)
    times = {a: {} for a in algorithms}
    for numel in sizes:
        g = torch.Generator().manual_seed(seed + worker.rank)
        original = torch.randn(numel, generator=g, dtype=torch.float64).to(torch_dtype)
        x = original.clone()
        for a in algorithms:                   # warm-up: first-touch of memory, buffers
            _run(a, x)
        for rep in range(repeats_for(numel, repeats)):
            for a in algorithms[rep % len(algorithms):] + algorithms[:rep % len(algorithms)]:
                x.copy_(original)
                dist.barrier()
                t0 = time.perf_counter()
                _run(a, x)
                times[a].setdefault(numel, []).append(time.perf_counter() - t0)
    # the slowest rank decides: one all-reduce of every time at the end (outside the timing)
    flat = torch.tensor([t for a in algorithms for n in sizes for t in times[a][n]], dtype=torch.float64)
    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
    it = iter(flat.tolist())
    times = {a: {n: [next(it) for _ in times[a][n]] for n in sizes} for a in algorithms}
    return {"world_size": worker.world_size, "dtype": dtype, "ping_pong": ping, "add": add,
            "times": times}


def _run(algorithm: str, x: torch.Tensor) -> None:
    if algorithm == BASELINE:
        dist.all_reduce(x)
    else:
        all_reduce(x, "sum", algorithm)


def measure_args(world_size: int, *, algorithms=(*ALGORITHMS, BASELINE), dtype: str = "float32",
                 sizes=(1_000,), backend: str = "torchrun", device: str = "cpu", **_) -> None:
    if backend != "torchrun":
        raise ValueError("measure runs on launch(backend='torchrun') only: the hand-written all-reduces "
                         "use torch.distributed send/recv")
    if world_size < 2:
        raise ValueError("measuring communication needs at least 2 ranks")
    for a in algorithms:
        if a != BASELINE:
            check_algorithm(a)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if not sizes or any(not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes must be positive integers (numbers of elements), got {sizes!r}")


measure.validate_args = measure_args
measure.supports = frozenset({"torchrun", "cpu", "cuda"})


def measure_link(worker, ping_pong_bytes=(8, 800, 8_000, 80_000, 800_000, 4_000_000, 8_000_000),
                 repeats: int = 10) -> dict:
    """Lesson 15 (worker): the ping-pong and the add of ``measure`` alone (a second or two), what
    ``cost_model.fit_link`` fits this machine's ``Link`` from: ``{"ping_pong", "add"}``."""
    check_torchrun(worker)
    ping = _ping_pong(worker.rank, ping_pong_bytes, repeats)
    add = _time_add([b // 4 for b in ping_pong_bytes if b >= 80_000], torch.float32, repeats)
    return {"ping_pong": ping, "add": add}


measure_link.validate_args = lambda world_size, **_: measure_args(world_size)
measure_link.supports = frozenset({"torchrun", "cpu", "cuda"})


def compare(measurement: dict, link: Link) -> list[dict]:
    """Lesson 03: measured (best repetition) next to predicted, per algorithm and size."""
    world, itemsize = measurement["world_size"], DTYPES[measurement["dtype"]].itemsize
    rows = []
    for algorithm, by_size in measurement["times"].items():
        for numel, times in by_size.items():
            row = {"algorithm": algorithm, "world_size": world, "numel": numel, "measured": best(times)}
            if algorithm != BASELINE:
                row["predicted"] = predict_time(algorithm, world, numel, link, itemsize)
                row["ratio"] = row["predicted"] / row["measured"]
            rows.append(row)
    return rows


# predicted times closer than this (relative) are a tie: the model cannot tell them apart
TIE = 0.01


def model_pick(rows: list[dict], tolerance: float = TIE) -> list[str]:
    """Lesson 03: the algorithms the model predicts fastest for one size: one name, or several
    when their predicted times tie (within ``tolerance``, relative).  At N = 2 naive, the
    parameter server and the tree send the same two whole-tensor messages one after the other,
    so the model prices them identically: a tie, which no stopwatch order may break."""
    fastest = min(r["predicted"] for r in rows)
    return sorted(r["algorithm"] for r in rows if r["predicted"] <= fastest * (1 + tolerance))


def verdict(measurements: list[dict], rows: list[dict], tolerance: float = TIE) -> str:
    """Lesson 03: what the comparison says, computed from it: how far the model's times were from
    the measured ones, and, at each size, whether the stopwatch names a winner and the model agrees.

    ``measurements`` are independent repeats (separate launches of ``measure``), one number each per
    algorithm and size: that launch's median.  The winner is named only by the course's one rule
    (``distlab.verdict``, on ratios) between the fastest and the runner-up over those repeats;
    otherwise "no clear difference".  A tie the model predicts is a prediction too: a clear winner
    between two of its members contradicts it.  The pair is chosen by its means before the rule is
    applied, so with many algorithms a false winner is somewhat likelier than the rule's nominal 1%.
    ``rows`` (``compare``) hold the model's predictions.
    """
    from ..verdict import verdict as rule

    ratios = [r["ratio"] for r in rows if "ratio" in r]
    lines = [f"model/measured time: {min(ratios):.2f} to {max(ratios):.2f} "
             "(1 = exact; below 1 the model was too optimistic, above 1 too pessimistic)"]
    for numel in sorted({r["numel"] for r in rows}):
        mine = [r for r in rows if r["numel"] == numel and "predicted" in r]
        runs = {r["algorithm"]: [1e3 * statistics.median(m["times"][r["algorithm"]][numel]) for m in measurements]
                for r in mine}                                   # milliseconds, each launch's median
        order = sorted(runs, key=lambda a: statistics.fmean(runs[a]))
        said = rule(runs[order[0]], runs[order[1]], names=order[:2], better="lower", log=True, digits=3,
                    unit=" ms")
        picked = model_pick(mine, tolerance)
        tie = f"the model predicts a tie between {', '.join(picked)}"
        if len(picked) > 1 and set(order[:2]) <= set(picked):
            model = (f"{tie}: not contradicted" if said.winner is None else
                     f"{tie}, but the stopwatch separates {order[0]} and {order[1]}: the tie disagrees")
        elif said.winner is None:
            model = f"the model picked {', '.join(picked)}; the stopwatch names no winner to check it against"
        elif said.winner not in picked:
            model = f"the model picked {', '.join(picked)}: disagrees"
        elif len(picked) > 1:
            model = f"the model predicts a tie between {', '.join(picked)}: it neither agrees nor disagrees"
        else:
            model = f"the model picked {picked[0]}: agrees"
        lines.append(f"{numel:>9,} floats: {said}\n{'':17}{model}")
    return "\n".join(lines)
