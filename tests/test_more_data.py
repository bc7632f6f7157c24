"""Lesson 05: more data, more accuracy (distlab/measure/more_data.py and bench/more_data.py).

The summaries and verdicts on rows built by hand (a tie must read as a tie), then the two
measurements for real, in miniature: trainings on growing sets, and data-parallel runs on 1 and
2 ranks timed to a target accuracy.
"""
import os
import sys

import pytest

from distlab.measure import more_data

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

pytestmark = pytest.mark.usefixtures("warm_ranks")


def rows(accuracies: dict) -> list[dict]:
    return [{"model": "cnn", "samples": n, "seed": s, "accuracy": a, "seconds": 0.0}
            for n, accs in accuracies.items() for s, a in enumerate(accs)]


def test_summary_gives_median_and_half_range_per_size():
    s = more_data.summarise(rows({100_000: [0.97, 0.99, 0.98], 300: [0.90, 0.92, 0.94]}))
    assert [r["samples"] for r in s] == [300, 100_000]                    # sorted by size
    assert s[0]["median"] == 0.92 and s[0]["spread"] == pytest.approx(0.02) and s[1]["seeds"] == 3


def test_gain_is_a_verdict_only_beyond_twice_the_spread():
    clear = more_data.gain(more_data.summarise(rows({300: [0.90, 0.91, 0.92], 100_000: [0.97, 0.98, 0.99]})), "cnn")
    assert clear["points"] == pytest.approx(7.0) and clear["twice_spread"] == pytest.approx(2.0)
    assert clear["verdict"] == "more data helped"
    tie = more_data.gain(more_data.summarise(rows({300: [0.90, 0.95, 0.97], 100_000: [0.93, 0.96, 0.98]})), "cnn")
    assert tie["verdict"] == "no clear difference"
    worse = more_data.gain(more_data.summarise(rows({300: [0.95, 0.95], 100_000: [0.90, 0.90]})), "cnn")
    assert worse["verdict"] == "more data hurt"


def test_speed_verdict_says_no_clear_difference_when_the_range_holds_one():
    assert more_data.speed_verdict([1.3, 1.4, 1.5]).startswith("2 ranks reached it sooner")
    assert more_data.speed_verdict([0.7, 0.8]).startswith("2 ranks reached it later")
    assert more_data.speed_verdict([0.9, 1.2, 1.1]).startswith("no clear difference")
    assert more_data.speed_verdict([1.5]).startswith("one repeat only")
    assert "can compute 1.90x" in more_data.speed_verdict([1.5, 1.6], 1.9)
    result = {1: {"seconds_to_target": [2.0, None, 3.0]}, 2: {"seconds_to_target": [1.0, 1.0, 2.0]}}
    assert more_data.speedup_to_target(result) == [2.0, 1.5]               # a run that missed is left out


def test_the_bench_goal_compares_the_median_gain_with_twice_the_spread(capsys):
    from more_data import accuracy_goal

    assert accuracy_goal(rows({300: [0.90, 0.91, 0.92], 100_000: [0.97, 0.98, 0.99]})) is True
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == ("GOAL accuracy_gain_largest_vs_smallest 7 > 2.0 PASS "
                    "(cnn, 300 -> 100000 samples; more data helped)")
    assert accuracy_goal(rows({300: [0.90, 0.95, 0.97], 100_000: [0.93, 0.96, 0.98]})) is False
    assert "GOAL accuracy_gain_largest_vs_smallest 1 > 7.0 MISS (cnn, 300 -> 100000 samples; no clear difference)" \
        in capsys.readouterr().out


def test_accuracy_grows_with_the_real_training_set():
    """Real trainings, small: 60 real digits against all 1,438 (no distortion needed to see it)."""
    found = more_data.accuracy_vs_samples((64, 1_438), (0,), ("mlp",), steps=150)
    assert [(r["model"], r["samples"], r["seed"]) for r in found] == [("mlp", 64, 0), ("mlp", 1_438, 0)]
    assert found[1]["accuracy"] > found[0]["accuracy"] + 0.03
    with pytest.raises(ValueError, match="smaller than the batch"):
        more_data.accuracy_vs_samples((32,), (0,), ("mlp",), steps=1)


def test_time_to_accuracy_times_real_data_parallel_runs_on_one_and_two_ranks():
    found = more_data.time_to_accuracy(0.5, (1, 2), model="mlp", width=32, steps=40, global_batch_size=32,
                                       evaluate_every=10, samples=20_000, probe=True)
    (probe,) = found["probe"]                      # lesson 06's ceiling, measured on the same ranks
    assert 0 < probe < 4
    for n in (1, 2):
        (curve,) = found[n]["curves"]
        assert [step for step, _, _ in curve] == [10, 20, 30, 40]
        assert all(0 < t for _, t, _ in curve) and [t for _, t, _ in curve] == sorted(t for _, t, _ in curve)
    # the same seed and global batches on 1 and 2 ranks: the same accuracy after every step
    assert [a for *_, a in found[1]["curves"][0]] == pytest.approx([a for *_, a in found[2]["curves"][0]], abs=0.01)
    reached = [t for n in (1, 2) for t in found[n]["seconds_to_target"] if t is not None]
    if reached:
        assert found["budget"] == pytest.approx(min(reached))
    with pytest.raises(ValueError, match="target is a test accuracy"):
        more_data.time_to_accuracy(95)
    with pytest.raises(ValueError, match="probe compares world sizes"):
        more_data.time_to_accuracy(0.5, (2,), probe=True)


def test_the_exercise_checks_both_ways(capsys):
    from distlab.course.exercises import sets_read

    assert sets_read(..., (300, 1_438, 100_000), 100, 64) is None
    assert sets_read([1_438, 300], (300, 1_438, 100_000), 100, 64) is True
    assert sets_read([300, 1_438, 100_000], (300, 1_438, 100_000), 100, 64) is False
    assert "need more than 100 x 64 visits" in capsys.readouterr().out
