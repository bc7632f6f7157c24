"""Lesson 05: more data, more accuracy.  Does a bigger training set give a better model, and do
more workers get there sooner?

The insurance company's question has two halves, measured here and shared by the lesson and
``bench/more_data.py``:

1. ``accuracy_vs_samples``: the same model trained for the same number of steps on training sets
   of growing size (``distorted.DistortedDigits``: the first 1,438 samples are the real training
   digits, every later one a distorted copy), tested on the real held-out digits, which are never
   distorted and never trained on.  Several seeds per size, because one run's accuracy moves with
   its seed (initial weights, batch order, distortions); ``summarise`` gives median and spread.
   One process trains each (``data_parallel.train_single``, the loop every rank runs): N ranks
   averaging gradients take exactly the steps of one process at their global batch (lesson 01),
   so the accuracy a data set buys does not depend on how many workers compute it.
2. ``time_to_accuracy``: what the workers change is the *time*.  Real data-parallel jobs
   (``distlab.launch`` of ``data_parallel.train`` on the distorted digits, each rank making its
   own mini-batches) on 1 and 2 ranks, at one global batch, evaluated every few steps: the
   training seconds until the test accuracy first reaches ``target``, and the accuracy each
   reached within the same time budget.
"""
from __future__ import annotations

import statistics

SIZES = (300, 1_438, 10_000, 100_000)          # 1,438: all the real training digits


def accuracy_vs_samples(sizes=SIZES, seeds=(0, 1, 2), models=("mlp", "cnn"), *, steps: int = 300,
                        global_batch_size: int = 64, lr: float = 0.05, optimizer: str = "momentum",
                        widths: dict | None = None) -> list[dict]:
    """Lesson 05: test accuracy of each model trained ``steps`` steps on each size, for each seed.

    Returns rows ``{"model", "samples", "seed", "accuracy", "seconds"}``.  Every run takes the same
    number of steps of the same batch: a bigger set is seen fewer times over, not trained longer.
    ``widths``: hidden units of the MLP / channels of the CNN (default 64 and 16).
    """
    import time

    import torch

    from ..data_parallel import data_parallel

    widths = {"mlp": 64, "cnn": 16, **(widths or {})}
    for n in sizes:
        if n < global_batch_size:
            raise ValueError(f"size {n} is smaller than the batch ({global_batch_size})")
    rows, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)              # as one rank does: one core each, no fighting over them
    try:
        for model in models:
            for n in sizes:
                for seed in seeds:
                    t0 = time.perf_counter()
                    record = data_parallel.train_single(
                        model=model, width=widths[model], global_batch_size=global_batch_size, steps=steps,
                        lr=lr, optimizer=optimizer, seed=seed, dataset="distorted_digits", samples=n,
                        record_grads_at=())
                    rows.append({"model": model, "samples": n, "seed": seed, "accuracy": record.test_accuracy,
                                 "seconds": time.perf_counter() - t0})
    finally:
        torch.set_num_threads(threads)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Lesson 05: per model and size, the median test accuracy over seeds and its spread.

    ``spread`` is half the range (highest minus lowest over the seeds, halved): two medians closer
    than about twice it are not told apart by these runs.
    """
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        for n in sorted({r["samples"] for r in rows if r["model"] == model}):
            acc = [r["accuracy"] for r in rows if r["model"] == model and r["samples"] == n]
            out.append({"model": model, "samples": n, "median": statistics.median(acc), "low": min(acc),
                        "high": max(acc), "spread": (max(acc) - min(acc)) / 2, "seeds": len(acc)})
    return out


def gain(summary: list[dict], model: str) -> dict:
    """Lesson 05: accuracy of the largest set minus the smallest (points), against twice their spread.

    ``verdict`` is "more data helped" or "more data hurt" only when the gap is larger than twice
    the larger spread of the two sizes; otherwise "no clear difference".
    """
    rows = [r for r in summary if r["model"] == model]
    if len(rows) < 2:
        raise ValueError(f"need at least two sizes of model {model!r}")
    small, large = rows[0], rows[-1]
    points = 100 * (large["median"] - small["median"])
    noise = 2 * 100 * max(small["spread"], large["spread"])
    verdict = ("no clear difference" if abs(points) <= noise
               else "more data helped" if points > 0 else "more data hurt")
    return {"model": model, "smallest": small["samples"], "largest": large["samples"], "points": points,
            "twice_spread": noise, "verdict": verdict}


def time_to_accuracy(target: float = 0.95, world_sizes=(1, 2), *, model: str = "cnn", width: int = 16,
                     samples: int = 100_000, steps: int = 200, global_batch_size: int = 128, lr: float = 0.05,
                     evaluate_every: int = 10, repeats: int = 1, budget: float | None = None,
                     warm: bool | str = "auto", probe: bool = False) -> dict:
    """Lesson 05: real data-parallel training on the distorted digits, on each world size.

    Each repeat launches every world size once (the order turns from repeat to repeat, so that a
    busy moment of a shared machine hits both), with the repeat's seed: on every world size the
    same global batches, so the same accuracy after each step, and only the time differs.
    Returns ``{world_size: {"seconds_to_target": [...], "accuracy_at_budget": [...],
    "curves": [[(step, seconds, accuracy), ...], ...]}}`` plus ``"budget"``: by default the median
    time the fastest world size took to reach ``target`` (None entries: target not reached).

    ``probe``: in every repeat, also the machine's probe ceiling (lesson 06: ranks multiplying
    matrices with no communication; the work per second of the largest world size over the
    smallest's, ``ceiling.ceiling``'s ratio when the smallest is 1), measured on the same ranks
    right after each training: ``"probe"``, one ceiling per repeat.  On warm ranks that costs no
    start-up (``ceiling.ceiling`` would start its own ranks), and each repeat's ceiling is
    measured when its trainings ran.
    """
    from ..processes.launcher import launch
    from ..data_parallel import data_parallel
    from .ceiling import compute_alone

    if not 0 < target < 1:
        raise ValueError(f"target is a test accuracy between 0 and 1, got {target!r}")
    sizes = list(world_sizes)
    if probe and len(sizes) < 2:
        raise ValueError("probe compares world sizes: give at least two")
    found = {n: {"seconds_to_target": [], "accuracy_at_budget": [], "curves": []} for n in sizes}
    ceilings = []
    for r in range(repeats):
        probe_s = {}
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            record = launch(data_parallel.train, world_size=n, progress="none", warm=warm, model=model,
                            width=width, global_batch_size=global_batch_size, steps=steps, lr=lr,
                            optimizer="momentum", method="ddp", seed=r, dataset="distorted_digits",
                            samples=samples, evaluate_every=evaluate_every, record_grads_at=())[0]
            curve = list(record.evaluations)
            found[n]["curves"].append(curve)
            found[n]["seconds_to_target"].append(next((t for _, t, a in curve if a >= target), None))
            if probe:                                  # the slowest rank's seconds for the same work
                probe_s[n] = max(launch(compute_alone, world_size=n, progress="none", warm=warm))
        if probe:
            few, many = min(sizes), max(sizes)
            ceilings.append(many / few * probe_s[few] / probe_s[many])
    if budget is None:
        medians = [statistics.median(ts) for n in sizes
                   if (ts := [t for t in found[n]["seconds_to_target"] if t is not None])]
        budget = min(medians) if medians else None
    for n in sizes:
        found[n]["accuracy_at_budget"] = [max((a for _, t, a in curve if budget is not None and t <= budget),
                                              default=None) for curve in found[n]["curves"]]
    return {"target": target, "budget": budget, **({"probe": ceilings} if probe else {}), **found}


def speedup_to_target(result: dict, fast: int = 2, slow: int = 1) -> list[float]:
    """Lesson 05: per repeat, seconds to target on ``slow`` ranks over seconds on ``fast`` ranks."""
    return [a / b for a, b in zip(result[slow]["seconds_to_target"], result[fast]["seconds_to_target"])
            if a is not None and b is not None]


def speed_verdict(ratios: list[float], ceiling: float | None = None) -> str:
    """Lesson 05: "2 ranks reached it sooner", "later", or "no clear difference" (the range includes 1)."""
    if not ratios:
        return "target not reached on both: no comparison"
    low, high = min(ratios), max(ratios)
    if len(ratios) < 2:
        words = "one repeat only: no spread to tell a difference by"
    elif low <= 1 <= high:
        words = "no clear difference"
    else:
        words = "2 ranks reached it sooner" if low > 1 else "2 ranks reached it later"
    text = f"{words} (1 rank's time over 2 ranks': median {statistics.median(ratios):.2f}, " \
           f"{low:.2f} to {high:.2f} over {len(ratios)} repeats)"
    if ceiling is not None:
        text += f"; the probe says two ranks can compute {ceiling:.2f}x as much as one here"
    return text
