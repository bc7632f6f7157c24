"""What lesson 13 measures on the experts' ranks: bytes against the formula, balance, and who waited.

Introduced in lesson 13 (experts: a bigger model for the same compute).  Every function reads the
records the ranks handed back (``training.train``); nothing here runs a model.

* **bytes**: what crossed between ranks, step by step, to hold against the formula
  (``predict.traffic.all_to_all_bytes``: each kept request twice forward, to its expert and back,
  and twice backward, ``(n - 1) / n`` of them crossing to another rank if the router spreads the
  tokens evenly).
* **balance**: the busiest expert's requests against the mean, step by step: 1 is perfect balance.
* **the cost of imbalance**: the slowest rank's expert time over the mean (1: even) says how
  unevenly the work falls; the ranks that sent it requests wait for it in the combine.
* **the exchange against the work** (lesson 15, where the time goes): ``exchange_vs_experts``.
"""
from __future__ import annotations

import statistics


def measured_bytes(records) -> list[int]:
    """Lesson 13: the bytes that arrived from other ranks in each step, all ranks together."""
    steps = len(records[0].traffic_by_step)
    return [sum(r.traffic_by_step[s]["forward"] + r.traffic_by_step[s]["backward"] for r in records)
            for s in range(steps)]


def asked(records, step: int, block: int) -> list[int]:
    """Lesson 13: the requests each expert got in ``step`` at ``block``, from all ranks' tokens."""
    return [sum(col) for col in zip(*(r.routing[step][block]["asked"] for r in records))]


def imbalance(records, block: int | None = None) -> list[float]:
    """Lesson 13: per step, the busiest expert's requests / the mean (1: even), the worst of the blocks
    (or of ``block`` only)."""
    blocks = range(len(records[0].routing[0])) if block is None else [block]
    out = []
    for step in range(len(records[0].routing)):
        ratios = [max(a) / statistics.mean(a) for a in (asked(records, step, b) for b in blocks)]
        out.append(max(ratios))
    return out


def dropped(records) -> list[int]:
    """Lesson 13: the requests dropped in each step (over capacity), all blocks and ranks together."""
    return [sum(b["dropped"] for r in records for b in r.routing[s]) for s in range(len(records[0].routing))]


def settled(values: list[float], last: int = 10) -> dict:
    """Lesson 13: the mean of the last ``last`` steps' values and their range (training has settled)."""
    tail = values[-last:]
    return {"mean": statistics.mean(tail), "low": min(tail), "high": max(tail)}


def matrix(records, step: int, block: int) -> list[list[int]]:
    """Lesson 13: tokens sent from rank i (row) to rank j (column) of an expert group in ``step``."""
    return [r.routing[step][block]["matrix"] for r in sorted(records, key=lambda r: r.rank)]


def expert_work(records, step: int) -> list[float]:
    """Lesson 13: each rank's CPU seconds in its experts in ``step`` (all blocks): work, not waiting."""
    return [sum(b["expert_cpu"] for b in r.routing[step]) for r in sorted(records, key=lambda r: r.rank)]


def slowest_vs_mean(records, skip: int = 2) -> list[float]:
    """Lesson 13: per step (after ``skip`` warm-up steps), the slowest expert rank's work / the mean."""
    out = []
    for step in range(skip, len(records[0].routing)):
        work = expert_work(records, step)
        out.append(max(work) / statistics.mean(work))
    return out


def rows_arrived(records, step: int) -> list[int]:
    """Lesson 13: the requests each rank's experts served in ``step`` (all blocks): their workload."""
    ranks = sorted(records, key=lambda r: r.rank)
    return [sum(sum(r.routing[step][b]["matrix"][j] for r in ranks) for b in range(len(ranks[0].routing[step])))
            for j in range(len(ranks))]


def timeline(records, step: int, block: int) -> list[dict]:
    """Lesson 13: each rank's forward through one MoE layer, its parts (route, counts, dispatch, experts,
    combine) in seconds from the moment the first rank began."""
    ranks = sorted(records, key=lambda r: r.rank)
    t0 = min(r.routing[step][block]["times"]["route"][0] for r in ranks)
    return [{part: (a - t0, b - t0) for part, (a, b) in r.routing[step][block]["times"].items()} for r in ranks]


def as_one_process(records) -> dict:
    """Lesson 13: every rank's parameters put together under one process's names (a rank's records name
    its experts by their number among all the experts), each expert taken from the first data replica
    that holds it, the dense ones from rank 0."""
    out = {}
    for r in sorted(records, key=lambda r: r.rank, reverse=True):      # rank 0 written last: its copy stays
        out.update(r.params)
    return out


def exchange_vs_experts(records) -> list[list[dict]]:
    """Lesson 15: per step and rank, the seconds in the dispatch and combine all-to-alls against the seconds
    the experts computed (all blocks).  ``all_to_all``: forward and backward, ``all_to_all_forward``: the
    forward's only, ``experts``: the experts' forward, wall clock (``experts_cpu``: its CPU seconds), ``ratio``:
    forward all-to-all / experts' forward, ``bytes``: what arrived from other ranks in the step.  ``exposed``
    is always True here: the exchange blocks (the rank waits for its tokens before its experts can start,
    and for their results before the layer can go on); DeepSeek-V3's DualPipe hides it behind another
    micro-batch's compute, which only a ratio near or below 1 makes worth it."""
    out = []
    for step in range(len(records[0].routing)):
        row = []
        for r in sorted(records, key=lambda r: r.rank):
            blocks = r.routing[step]
            forward = sum(b["exchange"]["forward"] for b in blocks)
            backward = sum(b["exchange"]["backward"] for b in blocks)
            experts = sum(b["times"]["experts"][1] - b["times"]["experts"][0] for b in blocks)
            moved = r.traffic_by_step[step]
            row.append({"rank": r.rank, "step": step, "all_to_all": forward + backward, "all_to_all_forward": forward,
                        "experts": experts, "experts_cpu": sum(b["expert_cpu"] for b in blocks),
                        "ratio": forward / experts if experts else float("inf"),
                        "bytes": moved["forward"] + moved["backward"], "exposed": True})
        out.append(row)
    return out
