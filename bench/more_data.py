"""Benchmark for issue #26: more data, more accuracy, and do two workers reach it sooner?

Two measurements (``distlab.measure.more_data``, the functions lesson 05 runs with smaller
settings):

- ``accuracy_gain_largest_vs_smallest``: the CNN trained ``STEPS`` steps on the distorted digits
  at the two ends of lesson 05's sizes (the smallest: a few hundred real digits; the largest:
  100,000, all but 1,438 of them distorted copies), ``SEEDS`` seeds each, tested on the real
  held-out digits.  Per seed, the test accuracy at the largest size minus the smallest, in
  points; goal: the median above twice the spread over seeds (the larger half-range of the two
  sizes), i.e. a gain the seeds cannot explain.  The sizes between, and the MLP, are lesson 05's
  to draw: here they would double the run time and answer no goal.
- ``time_to_accuracy_2_ranks_vs_1``: real data-parallel training (``data_parallel.train``, DDP,
  each rank making its own distorted mini-batches) on 1 and on 2 warm ranks at one global batch,
  evaluated every ``EVERY`` steps: per repeat, the training seconds 1 rank needed to first reach
  ``TARGET`` over the seconds 2 ranks needed.  Both take the same steps (same seed, same global
  batches), so the ratio is a speed ratio.  Next to it, the machine's probe ceiling
  (``distlab.measure.ceiling``: 2 ranks multiplying matrices with no communication, over 1),
  measured in every repeat: no training can gain more than it.  Goal: within 10% of it
  (``ratio >= 0.9 x ceiling``).

Run time: under 4 minutes on 2 quiet cores (221 and 226 s in two runs), about 90 s of it the 6
trainings of ``STEPS`` = 1500 steps, the rest the 4 repeats of time to accuracy and the probes.
Fewer steps do not answer the question: at 700 steps the CNN's seeds at 100,000 samples spread so
widely that its gain over 300 samples was not told apart from them (a MISS), because a training
that short reads less than half of the 100,000 samples.
"""
import statistics
import time
import warnings

import distlab
from distlab.measure import ceiling, more_data
from scripts.goals import goal

SIZES, SEEDS, STEPS = (300, 100_000), (0, 1, 2), 1500
TARGET, REPEATS, TTA = 0.95, 4, dict(model="cnn", width=16, global_batch_size=128, steps=300, lr=0.05,
                                     evaluate_every=10)


def accuracy_goal(rows: list[dict], model: str = "cnn", name: str = "accuracy_gain_largest_vs_smallest") -> bool:
    """Per seed, largest size minus smallest (points) against twice the spread over seeds."""
    summary = more_data.summarise(rows)
    g = more_data.gain(summary, model)
    by_seed = {}
    for r in rows:
        if r["model"] == model and r["samples"] in (g["smallest"], g["largest"]):
            by_seed.setdefault(r["seed"], {})[r["samples"]] = r["accuracy"]
    gains = [100 * (acc[g["largest"]] - acc[g["smallest"]]) for acc in by_seed.values() if len(acc) == 2]
    note = f"{model}, {g['smallest']} -> {g['largest']} samples; {g['verdict']}"
    return goal(name, gains, ">", round(g["twice_spread"], 2), note=note)


def bench() -> None:
    t0 = time.time()
    rows = more_data.accuracy_vs_samples(SIZES, SEEDS, ("cnn",), steps=STEPS)
    for s in more_data.summarise(rows):
        print(f"{s['model']} {s['samples']:>7} samples: test accuracy median {s['median']:.4f}, "
              f"{s['low']:.4f} to {s['high']:.4f} over {s['seeds']} seeds", flush=True)
    print(f"({time.time() - t0:.0f} s for {len(rows)} trainings of {STEPS} steps)", flush=True)
    accuracy_goal(rows, "cnn")

    ceilings = [ceiling.ceiling(2, warm=True) for _ in range(2)]          # before and after the runs
    found = more_data.time_to_accuracy(TARGET, (1, 2), repeats=REPEATS, warm=True, **TTA)
    ceilings += [ceiling.ceiling(2, warm=True) for _ in range(2)]
    for n in (1, 2):
        print(f"{n} rank(s): seconds to {TARGET} per repeat " + " ".join(
            "-" if t is None else f"{t:.2f}" for t in found[n]["seconds_to_target"])
            + f"; accuracy within {found['budget'] or float('nan'):.2f} s: "
            + " ".join("-" if a is None else f"{a:.4f}" for a in found[n]["accuracy_at_budget"]), flush=True)
    print("probe ceilings " + " ".join(f"{c:.2f}" for c in ceilings))
    ratios = more_data.speedup_to_target(found)
    distlab.shutdown()
    probe = statistics.median(ceilings)
    print(more_data.speed_verdict(ratios, probe))
    if ratios:
        goal("time_to_accuracy_2_ranks_vs_1", ratios, ">=", round(0.9 * probe, 3),
             note=f"probe ceiling {probe:.2f}: two ranks can compute {probe:.2f}x one here")
    else:
        print(f"GOAL time_to_accuracy_2_ranks_vs_1 nan >= {0.9 * probe:.3f} MISS (target {TARGET} not reached "
              f"in {TTA['steps']} steps; probe ceiling {probe:.2f})")


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    t0 = time.time()
    bench()
    print(f"({time.time() - t0:.0f} s)")
