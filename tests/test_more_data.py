"""Lesson 05b: more data, more accuracy (distlab/measure/more_data.py and bench/more_data.py).

The summaries and verdicts on rows built by hand (a tie must read as a tie, and the verdict is
``distlab.verdict``'s), then the measurements for real, in miniature: trainings of a fixed number
of epochs on growing sets of real MNIST digits, and data-parallel runs on 1 and 2 ranks timed to a
target accuracy.
"""
import os
import sys

import pytest

from distlab.measure import more_data

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

pytestmark = pytest.mark.usefixtures("warm_ranks")


def rows(accuracies: dict, dataset: str = "mnist_5k") -> list[dict]:
    return [{"dataset": dataset, "samples": n, "seed": s, "accuracy": a, "seconds": 0.0}
            for n, accs in accuracies.items() for s, a in enumerate(accs)]


def test_summary_gives_mean_median_and_range_per_size():
    s = more_data.summarise(rows({4_000: [0.97, 0.99, 0.98], 250: [0.90, 0.92, 0.97]}))
    assert [r["samples"] for r in s] == [250, 4_000]
    assert s[0]["median"] == 0.92 and s[0]["mean"] == pytest.approx(0.93) and (s[0]["low"], s[0]["high"]) == (0.9, 0.97)
    assert s[0]["model"] == "mnist_5k" and s[0]["seeds"] == 3


def test_curve_verdicts_are_the_one_rule_and_a_tie_reads_as_a_tie():
    clear = more_data.curve_verdicts(rows({250: [0.65, 0.66, 0.64], 1_000: [0.87, 0.88, 0.86],
                                           4_000: [0.94, 0.93, 0.95]}))
    assert [(c["small"], c["large"]) for c in clear] == [(250, 1_000), (1_000, 4_000), (250, 4_000)]
    assert [c["said"] for c in clear] == ["more data helped"] * 3
    assert clear[-1]["verdict"].winner == "4,000 digits"
    tie = more_data.curve_verdicts(rows({250: [0.90, 0.95, 0.97], 4_000: [0.93, 0.96, 0.98]}))
    assert [c["said"] for c in tie] == ["no clear difference"]
    same = more_data.curve_verdicts(rows({250: [0.9, 0.9, 0.9], 4_000: [0.9, 0.9, 0.9]}))
    assert same[0]["said"] == "no clear difference"
    hurt = more_data.curve_verdicts(rows({250: [0.95, 0.96, 0.94], 4_000: [0.80, 0.81, 0.79]}))
    assert hurt[0]["said"] == "more data hurt"
    few = more_data.curve_verdicts(rows({250: [0.5, 0.5], 4_000: [0.9, 0.9]}))
    assert few[0]["said"] == "no clear difference" and "too few runs" in str(few[0]["verdict"])


def test_speed_verdicts_use_per_repeat_ratios_against_one_and_against_the_ceiling():
    result = {"target": 0.9, 1: {"seconds_to_target": [2.0, None, 3.0, 2.1, 1.9]},
              2: {"seconds_to_target": [1.0, 1.0, 1.5, 1.0, 1.0]}, "probe": [1.9, 1.8, 2.1, 2.0, 1.95]}
    assert more_data.speedup_to_target(result) == [2.0, 2.0, 2.1, 1.9]     # a run that missed is left out
    v = more_data.speed_verdicts(result)
    assert v["sooner"].winner == "2 ranks' speed-up to 90%"
    assert v["ceiling"].winner is None                                     # 2.0x against 1.95x: either order
    same = more_data.speed_verdicts({"target": 0.9, 1: {"seconds_to_target": [1.0, 1.0, 1.0]},
                                     2: {"seconds_to_target": [1.0, 1.0, 1.0]}})
    assert same["sooner"].winner is None and "ceiling" not in same


def test_epochs_not_steps_more_data_is_read_as_many_times():
    assert more_data.epoch_steps(250, 10, 64) == 30 and more_data.epoch_steps(4_000, 10, 64) == 620
    assert more_data.epoch_steps(32, 3, 64) == 3                      # a set smaller than a batch: a step an epoch


def test_accuracy_grows_with_the_real_training_set():
    """Real trainings, small: 125 real MNIST digits against 2,000, the same 4 epochs (so 16x the steps)."""
    found = more_data.learning_curve((125, 2_000), (0,), epochs=4)
    assert [(r["dataset"], r["samples"], r["seed"], r["steps"]) for r in found] == \
        [("mnist_5k", 125, 0, 4), ("mnist_5k", 2_000, 0, 124)]
    assert found[1]["accuracy"] > found[0]["accuracy"] + 0.1
    with pytest.raises(ValueError, match="smaller than the batch"):
        more_data.learning_curve((32,), (0,), epochs=1)


def test_a_model_trained_on_real_digits_reads_them_and_some_distorted_copies():
    (r,) = more_data.reads_distorted((0,), epochs=3, copies=200)
    assert r["train"] > 0.9 and r["test"] > 0.85
    assert 0.3 < r["train_distorted"] <= r["train"] and 0.3 < r["test_distorted"] <= r["test"]


def test_time_to_accuracy_times_real_data_parallel_runs_on_one_and_two_ranks():
    found = more_data.time_to_accuracy(0.5, (1, 2), dataset="mnist_5k", samples=1_024, epochs=1,
                                       evaluate_every=4, repeats=1, width=32)
    (probe,) = found["probe"]                      # the probe ceiling, measured on the same ranks
    assert 0 < probe < 4 and found["steps"] == 16
    for n in (1, 2):
        (curve,) = found[n]["curves"]
        assert [step for step, _, _ in curve] == [4, 8, 12, 16]
        assert all(0 < t for _, t, _ in curve) and [t for _, t, _ in curve] == sorted(t for _, t, _ in curve)
    # the same seed and global batches on 1 and 2 ranks: the same accuracy after every step
    assert [a for *_, a in found[1]["curves"][0]] == pytest.approx([a for *_, a in found[2]["curves"][0]], abs=0.01)
    with pytest.raises(ValueError, match="target is a test accuracy"):
        more_data.time_to_accuracy(95)
    with pytest.raises(ValueError, match="probe compares world sizes"):
        more_data.time_to_accuracy(0.5, (2,), probe=True)
