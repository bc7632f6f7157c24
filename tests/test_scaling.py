"""Lesson 05: measuring speedup, the fits that explain it, large batches, the speedup widget.

Fits are checked on synthetic inputs with known answers; one tiny real measurement (two
launches, through the widget's own "measure" button) checks shapes and sanity, never
timing thresholds.
"""
import math

import pytest
import torch

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.measure import large_batch, scaling, speedup
from distlab.predict import flops, traffic
from distlab.predict import speedup as predicted
from distlab.predict.alpha_beta import all_reduce_seconds
from distlab.widgets import speedup as sw

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")


# ---------------------------------------------------------------------------------------------
# counting work
# ---------------------------------------------------------------------------------------------
def test_flops_and_bytes_follow_the_layers():
    w = 32
    assert flops.flops_per_sample("mlp", w) == 2 * (64 * w + w * w + w * 10)
    # conv1: 1->w, conv2: w->2w, both 3x3 on 8x8; then a linear layer on the pooled 4x4 maps
    assert flops.flops_per_sample("cnn", w) == 2 * (9 * w * 64 + 9 * w * 2 * w * 64 + 2 * w * 16 * 10)
    params = (64 * w + w) + (w * w + w) + (w * 10 + 10)
    assert traffic.gradient_bytes("mlp", w) == 4 * params
    assert traffic.gradient_bytes("mlp", w, "float64") == 8 * params
    # the CNN does far more work per byte of gradient than an MLP of similar compute
    assert flops.compute_per_byte("cnn", 32, 64) > 10 * flops.compute_per_byte("mlp", 1024, 64)


# ---------------------------------------------------------------------------------------------
# the fits, on synthetic inputs with a known answer
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("serial", [0.0, 0.07, 0.25, 0.5])
def test_fit_amdahl_recovers_a_known_serial_fraction(serial):
    ns = [1, 2, 3, 4, 8, 16]
    measured = [predicted.amdahl_speedup(n, serial) for n in ns]
    assert speedup.fit_amdahl(ns, measured) == pytest.approx(serial, abs=1e-12)
    assert predicted.amdahl_speedup(1, serial) == pytest.approx(1.0)
    # one point with more than one worker is enough: Amdahl has one unknown
    assert speedup.fit_amdahl([2], [predicted.amdahl_speedup(2, serial)]) == pytest.approx(serial)


def test_fit_amdahl_needs_more_than_one_worker():
    with pytest.raises(ValueError, match="more than one worker"):
        speedup.fit_amdahl([1, 1], [1.0, 1.0])


def _row(world, nbytes, tensors, comm, **extra):
    return dict(world_size=world, grad_bytes=nbytes, n_tensors=tensors, comm_s=comm, **extra)


def test_fit_alpha_beta_recovers_known_latency_and_bandwidth():
    alpha, beta = 50e-6, 1 / 2e9          # 50 us per message, 2 GB/s
    rows = [_row(n, b, k, all_reduce_seconds(b, n, alpha, beta, k))
            for n in (2, 4) for b, k in [(1e4, 2), (1e6, 6), (4e6, 6), (1e5, 4)]]
    a, b = speedup.fit_alpha_beta(rows + [_row(1, 1e6, 6, 0.5)])   # N = 1 rows are ignored
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)
    assert all_reduce_seconds(1e6, 1, alpha, beta) == 0.0


def test_fit_alpha_beta_never_goes_negative():
    # times that fall with size cannot be explained by a positive bandwidth term
    rows = [_row(2, 1e3, 1, 2e-3), _row(2, 1e6, 1, 1e-3)]
    a, b = speedup.fit_alpha_beta(rows)
    assert a >= 0 and b >= 0
    with pytest.raises(ValueError):
        speedup.fit_alpha_beta([_row(1, 1e6, 6, 0.1)])


def test_predicted_speedup_of_strong_and_weak_scaling():
    one = dict(scaling="strong", compute_s=0.10, other_s=0.02, step_s=0.12, grad_bytes=1e6, n_tensors=2)
    # no communication cost: compute halves, the rest does not -> 0.12 / 0.07
    assert predicted.predicted_speedup(one, 2, 0.0, 0.0) == pytest.approx(0.12 / 0.07)
    comm = all_reduce_seconds(1e6, 2, 1e-4, 1e-9, 2)
    assert predicted.predict_step_seconds(one, 2, 1e-4, 1e-9) == pytest.approx(0.05 + 0.02 + comm)
    weak = dict(one, scaling="weak")      # each rank keeps its batch: twice the samples per step
    assert predicted.predicted_speedup(weak, 2, 0.0, 0.0) == pytest.approx(2.0)


def test_split_step_times_from_a_synthetic_timeline():
    # 2 ranks, 3 steps of 0.1 s; rank 1 computes 0.02 s longer, so rank 0 waits 0.02 s
    steps = []
    for r in range(2):
        rank_steps = []
        for s in range(3):
            t = 100.0 + 0.1 * s
            c = t + 0.05 + 0.02 * r
            rank_steps.append([t, c, c, t + 0.08, t + 0.1 - 0.001])
        steps.append(rank_steps)
    split = scaling.split_step_times(torch.tensor(steps, dtype=torch.float64), batch_size=10, skip=1)
    assert split["step_s"] == pytest.approx((0.2 - 0.001) / 2)
    assert split["samples_per_s"] == pytest.approx(2 * 10 / split["step_s"])
    assert split["compute_s"] == pytest.approx(0.06)       # mean of 0.05 and 0.07
    assert split["wait_s"] == pytest.approx(0.01)          # rank 0 waits 0.02, rank 1 waits 0
    assert split["comm_s"] == pytest.approx(0.01)          # from the last arrival (0.07) to 0.08
    total = split["compute_s"] + split["wait_s"] + split["comm_s"] + split["other_s"]
    assert total == pytest.approx(split["step_s"])


# ---------------------------------------------------------------------------------------------
# bad input fails before any process starts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(configs=[]), "configs is empty"),
    (dict(configs=[dict(model="mlp", width=8, global_batch_size=63)]), "does not divide"),
    (dict(configs=[dict(model="mlp", width=8, batch_size=8, threads=2)]), "unknown configuration"),
    (dict(configs=[dict(model="rnn", width=8, batch_size=8)]), "unknown model"),
    (dict(configs=[dict(model="mlp", width=8, batch_size=8)], steps=4, skip=3), "skip"),
])
def test_bad_measurements_fail_before_start(kwargs, message):
    with pytest.raises(ValueError, match=message):
        distlab.launch(scaling.measure, world_size=2, progress="none", **kwargs)


# ---------------------------------------------------------------------------------------------
# warm-up and the large-batch study
# ---------------------------------------------------------------------------------------------
def test_warmup_starts_at_the_single_worker_rate_and_reaches_lr():
    lrs = [dp.warmup_lr(0.8, s, 4, 4) for s in range(6)]
    assert lrs[0] == pytest.approx(0.2) and lrs[4:] == [0.8, 0.8]
    assert all(a < b for a, b in zip(lrs[:4], lrs[1:5]))
    assert [dp.warmup_lr(0.8, s, 0, 4) for s in range(3)] == [0.8] * 3
    with pytest.raises(ValueError, match="warmup_steps"):
        dp.train_single(world_size=2, batch_size=8, steps=2, warmup_steps=-1)


def test_warmup_changes_training_and_ranks_match_one_process():
    kw = dict(model="mlp", width=16, batch_size=16, steps=6, lr=0.5, seed=3, record_grads_at=())
    recs = distlab.launch(dp.train, world_size=2, progress="none", warmup_steps=4, **kw)
    single = dp.train_single(world_size=2, warmup_steps=4, **kw)
    assert recs[0].config["warmup_steps"] == 4
    assert distlab.max_param_difference(recs[0].params, single.params) < 1e-5
    plain = dp.train_single(world_size=2, **kw)
    assert distlab.max_param_difference(plain.params, single.params) > 1e-3


def test_large_batch_study_rows():
    rows = large_batch.large_batch_study((1, 2), batch_size=32, epochs=1, lr=0.1, seeds=(0,))
    assert [(r["world_size"], r["rule"]) for r in rows] == [
        (n, rule) for n in (1, 2) for rule in ("same lr", "linear scaling", "linear + warm-up")]
    one, two = rows[:3], rows[3:]
    assert len({r["accuracy"] for r in one}) == 1               # at N = 1 the rules coincide
    assert two[0]["steps"] * 2 == one[0]["steps"] == 44 and two[0]["global_batch_size"] == 64
    assert [r["lr"] for r in two] == pytest.approx([0.1, 0.2, 0.2])
    assert two[2]["warmup_steps"] == 11 and two[1]["warmup_steps"] == 0
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows)


# ---------------------------------------------------------------------------------------------
# one tiny real measurement, through the widget's "measure" button
# ---------------------------------------------------------------------------------------------
def test_widget_measures_for_real_and_draws():
    def measure(config):            # what lesson 05 hands the widget, with fewer steps
        return scaling.run_scaling([config], (1, 2), steps=4, skip=1, repeats=1)

    view = sw.speedup_widget(measure=measure)
    assert "0 configuration" in repr(view) and "image/png" not in view._repr_mimebundle_()
    view.model.value = "cnn"
    assert list(view.width.options) == sw.WIDTHS["cnn"]
    view.width.value, view.batch.value = 8, 64
    view.button.click()
    assert not view.status.value.startswith("failed"), view.status.value
    rows = view.rows
    # 1 process at 1 and 2 threads, then 2 ranks at 1 thread
    assert [(r["world_size"], r["threads"]) for r in rows] == [(1, 1), (1, 2), (2, 1)]
    for r in rows:
        assert r["model"] == "cnn" and r["width"] == 8 and r["global_batch_size"] == 64
        assert r["samples_per_s"] > 0 and r["compute_s"] > 0 and r["comm_s"] >= 0
        assert r["wait_s"] >= 0 and r["launch_s"] > 0
        # an epoch is every training sample once (each rank's shard, padded to equal size)
        assert r["epoch_s"] == pytest.approx(1438 / r["samples_per_s"], rel=1e-9)
        parts = r["compute_s"] + r["comm_s"] + r["wait_s"] + r["other_s"]
        assert parts == pytest.approx(r["step_s"], rel=1e-9)
    assert rows[2]["batch_size"] == 32 and rows[0]["batch_size"] == 64
    assert rows[0]["grad_bytes"] == traffic.gradient_bytes("cnn", 8)
    table = speedup.speedups(rows)
    assert [t["world_size"] for t in table] == [1, 2]
    two = table[1]
    assert two["efficiency"] == pytest.approx(two["speedup"] / 2)
    assert two["vs_all_cores"] == pytest.approx(rows[2]["samples_per_s"] / rows[1]["samples_per_s"])
    s = speedup.fit_amdahl([2], [two["speedup"]])
    assert predicted.amdahl_speedup(2, s) == pytest.approx(two["speedup"])
    a, b = speedup.fit_alpha_beta(rows)
    assert a >= 0 and b >= 0 and math.isfinite(predicted.predicted_speedup(rows[0], 2, a, b))
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"] == "<speedup explorer: 1 configuration(s) measured>"
    assert bundle["image/png"] and view.image.value[:4] == b"\x89PNG"
    assert "2 ranks:" in view.status.value


def test_the_all_reduce_time_is_the_closed_form_of_lesson_05():
    """2(N-1) k alpha + 2(N-1)/N n beta (the exercise's formula), computed from lesson 03's ring."""
    alpha, beta = 30e-6, 1 / 3e9
    for world, nbytes, k in ((2, 35_880, 6), (8, 35_880, 6), (4, 1e6, 1), (5, 12_345, 3)):
        closed = 2 * (world - 1) * k * alpha + 2 * (world - 1) / world * nbytes * beta
        assert all_reduce_seconds(nbytes, world, alpha, beta, k) == pytest.approx(closed, rel=1e-12)


def test_verdicts_are_the_one_rule_over_the_repeats_ratios():
    """Issue 37: ``distlab.verdict.against`` on each repeat's ratio, log=True: no other rule."""
    def row(world, threads, rep, sps):
        return dict(model="mlp", width=64, scaling="strong", global_batch_size=64, batch_size=32,
                    method="by_hand", world_size=world, threads=threads, repeat=rep, samples_per_s=sps)

    def rows_of(two_ranks, base=(100, 100, 100), threaded=(80, 80, 80)):
        return ([row(1, 1, i, s) for i, s in enumerate(base)] + [row(1, 2, i, s) for i, s in enumerate(threaded)]
                + [row(2, 1, i, s) for i, s in enumerate(two_ranks)])

    lines = speedup.verdicts(rows_of((150, 90, 120), threaded=(50, 30, 40))).splitlines()
    assert lines[0].endswith("no clear difference: the runs allow either order")
    assert "1.20x (repeats 0.90 to 1.50)" in lines[0] and "3.00x (repeats 3.00 to 3.00)" in lines[1]
    assert lines[1].endswith("faster") and "vs 1 process x 2 threads" in lines[1]
    assert speedup.verdicts(rows_of((60, 61, 59))).splitlines()[0].endswith("slower")
    assert speedup.verdicts(rows_of((100, 100, 100))).splitlines()[0].startswith("mlp64") \
        and "no clear difference" in speedup.verdicts(rows_of((100, 100, 100))).splitlines()[0]
    two = [r for r in rows_of((150, 160, 155)) if r["repeat"] < 2]       # two repeats: too few to tell
    assert speedup.verdicts(two).splitlines()[0].endswith("no clear difference: too few runs")


def test_the_table_and_the_verdict_print_one_speedup():
    """Lesson 05 printed 1.39 in its table and 1.45 in its verdict for the same runs: the table
    divided median samples/s, the verdict took the median of each repeat's ratio.  Now both
    come from ``repeat_ratios``."""
    def row(world, threads, rep, sps, compute):
        return dict(model="mlp", width=1024, scaling="weak", global_batch_size=448 * world, batch_size=448,
                    method="by_hand", world_size=world, threads=threads, repeat=rep, samples_per_s=sps,
                    step_s=1.0, epoch_s=1.0, compute_s=compute, comm_s=0.0, wait_s=0.0, other_s=0.0)

    rows = [row(1, 1, 0, 100, 0.4), row(1, 1, 1, 60, 0.5), row(1, 2, 0, 150, 0.3), row(1, 2, 1, 150, 0.3),
            row(2, 1, 0, 120, 0.6), row(2, 1, 1, 110, 0.6)]
    two = next(t for t in speedup.speedups(rows) if t["world_size"] == 2)
    ratios = [120 / 100, 110 / 60]
    assert two["speedup"] == pytest.approx(sum(ratios) / 2)          # not median(120, 110) / median(100, 60)
    assert (two["speedup_lo"], two["speedup_hi"]) == pytest.approx((min(ratios), max(ratios)))
    assert f"{two['speedup']:.2f}x (repeats {min(ratios):.2f} to {max(ratios):.2f})" in speedup.verdicts(rows)
    (ratio,) = speedup.compute_ratios(rows)
    assert ratio["ratios"] == pytest.approx([0.6 / 0.5, 0.6 / 0.4]) and ratio["ideal"] == 1.0


def test_alpha_beta_with_the_measured_compute():
    one = dict(scaling="strong", compute_s=0.10, other_s=0.02, step_s=0.12, grad_bytes=1e6, n_tensors=2)
    assumed = predicted.predicted_speedup(one, 2, 0.0, 0.0)               # compute halves: 0.12 / 0.07
    measured = predicted.predicted_speedup(one, 2, 0.0, 0.0, compute_s=0.09)
    assert assumed == pytest.approx(0.12 / 0.07) and measured == pytest.approx(0.12 / 0.11)


def test_side_by_side_times_each_way_while_the_other_rank_idles():
    """bench/scaling.py's blocks: one process alone, then both ranks, in one launch; the rank that
    waits at the barrier must not use a core meanwhile (else "alone" would not be alone)."""
    cfg = dict(model="mlp", width=256, global_batch_size=512)
    out = distlab.launch(scaling.side_by_side, 2, config=cfg, steps=6, skip=1, blocks=3, progress="none")
    assert len(out[0]) == 3 and out[0] == out[1]                 # every rank returns the same rows
    for row in out[0]:
        assert {"alone", "all_cores_alone", "together"} <= row.keys()
        assert all(row[k] > 0 for k in ("alone", "all_cores_alone", "together"))
        assert row["alone_waiting_cpu"] < 0.3 and row["all_cores_alone_waiting_cpu"] < 0.3
