"""Benchmark for issues #26 and #37: more data, more accuracy, and do two workers reach it sooner?

The measurements of lesson 05b (``distlab.measure.more_data``), with more seeds and repeats, on
real 28x28 MNIST digits (``datasets.load_mnist_5k``: 4,000 to train on, 1,000 held out):

- ``more_data_real_250_to_4000``: the MLP trained ``EPOCHS`` epochs (so the computation grows with
  the data) on 250 and on 4,000 real training digits, ``SEEDS`` seeds each; goal: the one verdict
  rule (``distlab.verdict``) names 4,000 the winner.
- ``more_data_distorted_4000_to_16000``: the same at the 4,000 real digits and at 16,000 (3 elastic
  copies of each, Simard et al. 2003); goal: the verdict names 16,000 the winner.  At the same
  epochs the 16,000 also gets four times the steps, so this goal mixes data and computation:
- ``more_data_distorted_same_steps``: the 16,000 at ``DISTORTED_EPOCHS`` against the 4,000 real
  digits at four times as many epochs (the same steps, the same seeds); goal: the verdict names
  the 16,000 the winner (the copies buy accuracy, not only the extra steps).
- ``time_to_accuracy_2_ranks_vs_1``: real data-parallel training (``data_parallel.train``, DDP) on
  1 and on 2 warm ranks on the 16,000, repeats interleaved, the seconds to ``TARGET`` test
  accuracy, and the probe ceiling in every repeat.  Goal: the one rule does not put the per-repeat
  speed-up clearly below the probe ceiling (``verdict(..., log=True)``): two ranks get what the
  machine can give.  Each GOAL line prints the verdict it comes from.

Run time: about 2 to 3 minutes on 2 quiet cores.
"""
import time
import warnings

import distlab
from distlab.measure import more_data
from distlab.verdict import verdict

SEEDS, EPOCHS = (0, 1, 2, 3, 4), 10
DISTORTED_EPOCHS, DISTORTED_SEEDS = 5, (0, 1, 2, 3, 4)
TARGET, REPEATS = 0.9, 4


def verdict_goal(name: str, v, want: str | None, *, expect_winner: bool = True) -> bool:
    """PASS when the one rule names ``want`` the winner (or, ``expect_winner=False``, names no winner other than it)."""
    ok = v.winner == want if expect_winner else v.winner in (None, want)
    print(f"GOAL {name} winner={v.winner or 'none'} {'PASS' if ok else 'MISS'} ({v})", flush=True)
    return ok


def bench() -> None:
    t0 = time.time()
    real = more_data.learning_curve((250, 4_000), SEEDS, epochs=EPOCHS)
    bent = more_data.learning_curve((4_000, 16_000), DISTORTED_SEEDS, dataset="distorted_mnist_5k",
                                    epochs=DISTORTED_EPOCHS)
    longer = more_data.learning_curve((4_000,), DISTORTED_SEEDS, dataset="distorted_mnist_5k",
                                      epochs=4 * DISTORTED_EPOCHS)          # the 16,000's steps, real digits
    for s in more_data.summarise(real) + more_data.summarise(bent) + more_data.summarise(longer):
        print(f"{s['dataset']} {s['samples']:>6} digits: test accuracy mean {s['mean']:.4f}, "
              f"{s['low']:.4f} to {s['high']:.4f} over {s['seeds']} seeds", flush=True)
    print(f"({time.time() - t0:.0f} s for {len(real) + len(bent) + len(longer)} trainings)", flush=True)
    verdict_goal("more_data_real_250_to_4000", more_data.curve_verdicts(real)[-1]["verdict"], "4,000 digits")
    verdict_goal("more_data_distorted_4000_to_16000", more_data.curve_verdicts(bent)[-1]["verdict"], "16,000 digits")
    steps = {n: more_data.epoch_steps(n, e, more_data.MODEL["global_batch_size"])
             for n, e in ((16_000, DISTORTED_EPOCHS), (4_000, 4 * DISTORTED_EPOCHS))}
    assert steps[16_000] >= steps[4_000] * 0.99, steps
    same = verdict([r["accuracy"] for r in bent if r["samples"] == 16_000], [r["accuracy"] for r in longer],
                   names=("16,000 digits", "4,000 real digits, 4x the epochs"), better="higher")
    print(f"same computation: {steps[16_000]} against {steps[4_000]} steps")
    verdict_goal("more_data_distorted_same_steps", same, "16,000 digits")

    found = more_data.time_to_accuracy(TARGET, (1, 2), repeats=REPEATS, warm=True)
    for n in (1, 2):
        print(f"{n} rank(s): seconds to {TARGET} per repeat "
              + " ".join("-" if t is None else f"{t:.2f}" for t in found[n]["seconds_to_target"]), flush=True)
    print("probe ceilings " + " ".join(f"{c:.2f}" for c in found["probe"]))
    distlab.shutdown()
    said = more_data.speed_verdicts(found)
    print(f"sooner on 2 ranks? {said['sooner']}")
    verdict_goal("time_to_accuracy_2_ranks_vs_probe_ceiling", said["ceiling"], "2 ranks' speed-up to 90%",
                 expect_winner=False)


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    t0 = time.time()
    bench()
    print(f"({time.time() - t0:.0f} s)")
