"""Issue 37: the course's one verdict rule, on real runs.

Identical configurations must give "no clear difference" on any machine; a real, large difference
must name its winner; too few runs must never name one."""
import time

import pytest
import torch

from distlab import verdict as v
from distlab.data_parallel import data_parallel


def accuracies(steps: int, seeds=(0, 1, 2)) -> list[float]:
    """Real one-process trainings, one a seed: independent runs."""
    return [data_parallel.train_single(steps=steps, seed=s, global_batch_size=64, width=32, lr=0.1,
                                       record_grads_at=()).test_accuracy for s in seeds]


def matmul_seconds(n: int, repeats: int = 5) -> float:
    """One run: the median of a few timed products of two n x n matrices."""
    x = torch.randn(n, n)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x @ x
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def test_identical_trainings_give_no_clear_difference():
    a, b = accuracies(40), accuracies(40)
    assert a == b                                        # seeded runs repeat exactly
    said = v.verdict(a, b, names=("first", "second"))
    assert said.winner is None and "no clear difference" in said.text


def test_identical_timings_give_no_clear_difference():
    torch.set_num_threads(1)
    a, b = [], []
    for _ in range(6):                                   # interleaved, so a busy moment hits both
        a.append(matmul_seconds(192))
        b.append(matmul_seconds(192))
    said = v.verdict(a, b, names=("first", "second"), better="lower", log=True)
    assert said.winner is None, said.text


def test_a_real_large_difference_names_its_winner():
    torch.set_num_threads(1)
    small, large = [], []
    for _ in range(4):
        small.append(matmul_seconds(96))
        large.append(matmul_seconds(384))                # 64x the multiply-adds
    said = v.verdict(small, large, names=("n=96", "n=384"), better="lower", log=True)
    assert said.winner == "n=96", said.text
    trained = v.verdict(accuracies(150), accuracies(3), names=("150 steps", "3 steps"))
    assert trained.winner == "150 steps", trained.text


def test_too_few_runs_never_name_a_winner():
    said = v.verdict([0.9, 0.91], [0.1, 0.12, 0.11], names=("A", "B"))
    assert said.winner is None and "too few runs (2 of A" in said.text


def test_the_margin_and_the_interval_each_can_withhold_a_winner():
    # pinned down exactly, but a 0.5% gap is below the 2% that matters
    assert v.verdict([1.000, 1.000, 1.000], [1.005, 1.005, 1.005], better="lower").winner is None
    # a 10% gap, but runs that scatter by more
    assert v.verdict([1.0, 1.5, 0.7], [1.1, 0.8, 1.4], better="lower").winner is None
    # the same gap, tightly measured: clear
    assert v.verdict([1.00, 1.01, 0.99], [1.10, 1.11, 1.09], better="lower").winner == "A"


def test_the_standard_error_shrinks_with_runs_and_one_runs_spread_does_not():
    few = v.Runs("few", (1.0, 1.2, 0.8, 1.1))
    many = v.Runs("many", (1.0, 1.2, 0.8, 1.1) * 4)
    assert many.sd == pytest.approx(few.sd, rel=0.2)
    assert many.se < few.se / 1.8


def test_against_a_reference_reads_speedups():
    said = v.against([1.55, 1.58, 1.52], 1.0, names=("2 ranks", "1 rank"), log=True)
    assert said.winner == "2 ranks" and "2 ranks higher: a clear difference" in said.text, said.text
    assert v.against([0.9, 1.2, 1.05], 1.0, names=("2 ranks", "1 rank")).winner is None
    assert v.against([0.50, 0.52, 0.49], 1.0, names=("2 ranks", "1 rank")).winner == "1 rank"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="better must be"):
        v.verdict([1, 2, 3], [1, 2, 3], better="faster")
