"""Where to cut a model into pipeline stages: the balanced partition of its layers' work.

Introduced in lesson 06 ("Splitting the model"); lesson 08 reads from it which layers, and so
which parameters, each pipeline rank holds.  A pipeline runs at the pace of its slowest stage, so
the cut balances the *work*: given each layer's cost (its multiply-adds for one sample,
``flops.layer_costs``), give each stage a run of consecutive layers so that the busiest stage
does as little as possible.  This is the linear partition problem (Skiena, "The Algorithm Design
Manual", the partition problem of its dynamic-programming chapter); GPipe (Huang et al. 2019)
partitions its pipelines to balance the same kind of estimate.

The models here have a handful of layers, so ``balanced_starts`` tries every cut and keeps the
first best one: instant, and obviously right.  It takes plain numbers, so that
``pipeline.stages`` (which cuts real models) and the memory model (which predicts what each
stage holds) make the same cut.  The cut balances work, not memory: a stage may hold most of the
parameters when one layer does most of the work (lesson 08's width-2048 MLP).
"""
from __future__ import annotations

import itertools


def balanced_starts(costs: list[float], stages: int) -> list[int]:
    """Lesson 06: the index in ``costs`` where each of ``stages`` runs of consecutive layers begins
    (the first is 0), chosen so that the most costly run costs the least; ties go to the first cut
    found, in the order ``itertools.combinations`` gives them."""
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise ValueError(f"stages must be a positive integer, got {stages!r}")
    if stages > len(costs):
        raise ValueError(f"{stages} stages but only {len(costs)} layers to share out: each stage needs one")
    best, best_starts = None, None
    for cuts in itertools.combinations(range(1, len(costs)), stages - 1):
        bounds = (0, *cuts, len(costs))
        load = max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
        if best is None or load < best:
            best, best_starts = load, [0, *cuts]
    return best_starts


def stage_of(starts: list[int], layers: int) -> list[int]:
    """Lesson 06: for each of ``layers`` layers, the stage that holds it, given ``balanced_starts``."""
    bounds = [*starts[1:], layers]
    return [next(s for s, end in enumerate(bounds) if i < end) for i in range(layers)]
