"""Lesson 04, keeping workers in sync: timelines, stragglers, asynchronous SGD, local SGD.

Few launches (each costs seconds of start-up), many checks per launch.  No wall-clock
limits: timing claims are comparisons measured inside the same test.
"""
import math

import numpy as np
import pytest
from helpers import launched

import distlab
from distlab.data_parallel import async_sgd, local_sgd
from distlab.data_parallel import data_parallel as dp
from distlab.data import load_digits, shard_indices
from distlab.records import max_param_difference
from distlab.widgets import timeline as tl

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

DELAY = 0.05          # seconds the straggler sleeps per step: large next to a step's noise
COMMON = dict(batch_size=32, lr=0.3, seed=0, progress="none")


@pytest.fixture
def straggler_runs():
    """Three ranks, without and with rank 2 sleeping DELAY seconds per step, each launched once (helpers.launched)."""
    plain = launched(dp.train, 3, steps=16, **COMMON)
    slow = launched(dp.train, 3, steps=16, straggler=(2, DELAY), **COMMON)
    return plain, slow


# -------------------------------------------------------------------------------------------
# timelines
# -------------------------------------------------------------------------------------------
def test_timelines_are_recorded_and_consistent_across_ranks(straggler_runs):
    for records in straggler_runs:
        for r in records:
            assert len(r.steps) == 16
            for s in r.steps:     # the five stamps of a step, in order
                assert s.t_start <= s.t_compute_end <= s.t_comm_start <= s.t_comm_end <= s.t_end
            for a, b in zip(r.steps, r.steps[1:]):
                assert a.t_end <= b.t_start
        for step in range(16):    # no rank leaves an all-reduce before the last one entered it
            last_in = max(r.steps[step].t_comm_start for r in records)
            assert all(r.steps[step].t_comm_end >= last_in for r in records)
        # each rank's wait: from its own arrival at the step's all-reduce to the last rank's (its stamps)
        arrived = [[s.t_comm_start for s in r.steps] for r in records]
        assert tl.waits(records).tolist() == [[max(a[step] for a in arrived) - mine[step] for step in range(16)]
                                              for mine in arrived]


def test_the_others_wait_for_a_straggler(straggler_runs):
    plain, slow = straggler_runs
    before, after = tl.mean_wait(plain), tl.mean_wait(slow)
    for rank in (0, 1):       # every other rank waits about DELAY longer per step
        assert after[rank] - before[rank] > 0.5 * DELAY, (before, after)
    assert after[2] < 0.5 * DELAY                   # the straggler itself hardly waits
    assert slow[2].config["straggler"] == (2, DELAY)
    # the delay shows as compute on the straggler only
    compute = [np.median([s.t_compute_end - s.t_start for s in r.steps]) for r in slow]
    assert compute[2] >= DELAY > max(compute[0], compute[1])
    assert distlab.throughput(slow) < distlab.throughput(plain)


def test_timeline_widget_draws_records_and_has_a_static_picture(straggler_runs):
    _, slow = straggler_runs
    bars = tl.phases(slow[0], tl.waits(slow)[0])
    assert {b["phase"] for b in bars} == {"compute", "waiting", "all-reduce"}
    assert all(b["end"] >= b["start"] for b in bars)
    fig = tl.timeline_figure(slow, (1, 5))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"compute", "waiting", "all-reduce"}
    view = tl.timeline_widget(slow)
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"] == "<timeline of 3 ranks, steps 1-8 of 16>"
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["image/png"]
    first = bytes(view.image.value)
    assert first.startswith(b"\x89PNG")
    view.controls[0].value = (10, 15)              # moving the slider redraws
    assert repr(view) == "<timeline of 3 ranks, steps 10-15 of 16>"
    assert bytes(view.image.value) != first
    with pytest.raises(ValueError, match="steps must satisfy"):
        tl.timeline_figure(slow, (5, 99))


def test_bad_straggler_fails_before_any_process_starts():
    for bad, match in [((5, 0.1), "outside 0..1"), ((1, -0.1), "between 0 and 10"),
                       (1, r"\(rank, seconds\)"), ((1, "slow"), r"\(rank, seconds\)")]:
        with pytest.raises(ValueError, match=match):
            distlab.launch(dp.train, world_size=2, steps=4, straggler=bad, **COMMON)


# -------------------------------------------------------------------------------------------
# asynchronous SGD with a parameter server
# -------------------------------------------------------------------------------------------
@pytest.fixture
def async_run():
    """A server and two workers; worker 2 is slow, so worker 1 moves the parameters meanwhile (launched once)."""
    return launched(async_sgd.train, 3, steps=60, straggler=(2, 0.03), **COMMON)


def test_the_server_applies_every_gradient_once_and_records_staleness(async_run):
    server, workers = async_run[0], async_run[1:]
    ups = server.updates
    assert len(ups) == 2 * 60
    assert [u.version for u in ups] == list(range(1, 121))
    assert sorted(u.worker for u in ups) == [1] * 60 + [2] * 60
    assert all(u.staleness == u.version - 1 - u.version_used >= 0 for u in ups)
    assert ups[0].staleness == 0
    # both workers computed their first gradient on version 0; only one can be applied first
    assert max(u.staleness for u in ups) > 0
    for w in (1, 2):          # after each push a worker pulls the version its own update made
        mine = [u for u in ups if u.worker == w]
        assert mine[0].version_used == 0
        assert all(b.version_used == a.version for a, b in zip(mine, mine[1:]))
    slow = np.mean([u.staleness for u in ups if u.worker == 2])
    fast = np.mean([u.staleness for u in ups if u.worker == 1])
    assert slow > fast, async_sgd.staleness_counts(server)
    assert sum(async_sgd.staleness_counts(server).values()) == 120
    assert [w.method for w in workers] == ["async", "async"] and all(len(w.steps) == 60 for w in workers)


def test_staleness_split_separates_the_slow_workers_stale_part_from_its_run_alone(async_run):
    """Lesson 04 c24/c25: the fast worker finishes early; the slow one then trains alone, fresh."""
    server = async_run[0]
    split = async_sgd.staleness_split(server)
    for w in (1, 2):          # every gradient lands in exactly one part, in order of application
        mine = [u.staleness for u in server.updates if u.worker == w]
        assert sorted(split[w]["shared"] + split[w]["alone"]) == sorted(mine)
        assert all(s == 0 for s in split[w]["alone"])
    assert split[1]["alone"] == [] and len(split[2]["alone"]) > 0        # worker 1 is the fast one
    assert np.mean(split[2]["shared"]) > np.mean(split[1]["shared"])
    assert np.mean(split[2]["shared"]) > np.mean(split[2]["shared"] + split[2]["alone"])


def test_staleness_split_on_a_constructed_record():
    """Worker 1 pushes 3 gradients while worker 2 computes one; then worker 2 is alone."""
    ups = [async_sgd.Update(v, w, used, v - 1 - used, 0.0, 0.0, 0.0)
           for v, w, used in ((1, 1, 0), (2, 1, 1), (3, 1, 2), (4, 2, 0), (5, 2, 4), (6, 2, 5))]
    server = async_sgd.ServerRecord(0, 3, {}, 0.0, ups)
    assert async_sgd.staleness_split(server) == {1: {"shared": [0, 0, 0], "alone": []},
                                                  2: {"shared": [3], "alone": [0, 0]}}


def test_async_workers_see_the_synchronous_data_and_learn(async_run):
    server = async_run[0]
    n = load_digits().n_train
    sync_shards = [shard_indices(n, r, 2, seed=0) for r in range(2)]
    for w, shard in zip(async_run[1:], sync_shards):
        assert w.shard.equal(shard)
    assert server.test_accuracy > 0.6
    curve = tl.curve_async(server)
    assert len(curve["loss"]) == 120 and curve["samples"][-1] == 120 * 32
    assert np.mean(curve["loss"][-10:]) < np.mean(curve["loss"][:10])
    assert all(b >= a for a, b in zip(curve["seconds"], curve["seconds"][1:]))
    # workers never wait for each other: their timelines have no barrier to measure
    with pytest.raises(ValueError, match="never wait"):
        tl.waits(async_run[1:])
    assert "server exchange" in {b["phase"] for b in tl.phases(async_run[1])}
    ax = tl.timeline_figure(async_run[1:], (1, 4)).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["worker 1", "worker 2"]


def test_sync_and_async_pictures(async_run, straggler_runs):
    plain, _ = straggler_runs
    view = tl.convergence_widget(plain, async_run[0])
    assert repr(view) == "<loss and accuracy against samples: synchronous vs asynchronous>"
    first = bytes(view.image.value)
    view.controls[0].value = "seconds"
    assert bytes(view.image.value) != first
    fig = tl.convergence_figure(plain, async_run[0], "updates")
    assert [a.get_ylabel() for a in fig.axes] == ["mini-batch loss", "mini-batch accuracy"]
    assert len(fig.axes[0].lines[1].get_xdata()) == 120 and len(fig.axes[0].lines[0].get_xdata()) == 16
    bars = tl.staleness_figure(async_run[0]).axes[0].patches
    assert sum(b.get_height() for b in bars) == 120


def test_async_with_one_worker_is_plain_sgd():
    records = distlab.launch(async_sgd.train, world_size=2, steps=20, dtype="float64", **COMMON)
    assert async_sgd.staleness_counts(records[0]) == {0: 20}
    reference = dp.train_single(world_size=1, batch_size=32, steps=20, lr=0.3, seed=0, dtype="float64")
    assert max_param_difference(records[0].params, reference.params) <= 1e-12


def test_bad_async_jobs_fail_before_start():
    with pytest.raises(ValueError, match="world_size >= 2"):
        distlab.launch(async_sgd.train, world_size=1, steps=4, **COMMON)
    with pytest.raises(ValueError, match="must be a worker"):
        distlab.launch(async_sgd.train, world_size=3, steps=4, straggler=(0, 0.1), **COMMON)


# -------------------------------------------------------------------------------------------
# the middle ground: gradient accumulation and local SGD
# -------------------------------------------------------------------------------------------
def test_gradient_accumulation_equals_one_step_at_k_times_the_batch():
    kw = dict(batch_size=16, steps=16, lr=0.3, seed=0, dtype="float64", progress="none")
    records = distlab.launch(local_sgd.train, world_size=2, k=4, average="gradients", **kw)
    big = dp.train_single(world_size=2, batch_size=4 * 16, steps=16 // 4, lr=0.3, seed=0, dtype="float64")
    for r in records:
        assert local_sgd.all_reduce_rounds(r) == 4
        assert max_param_difference(r.params, big.params) <= 1e-6


def test_local_sgd_talks_every_k_steps():
    ks = (1, 4, 16)
    records = distlab.launch(local_sgd.train_each, world_size=2, runs=[dict(k=k) for k in ks],
                             average="parameters", batch_size=16, steps=32, lr=0.3, seed=0,
                             progress="none")
    runs = {k: [records[0][i], records[1][i]] for i, k in enumerate(ks)}
    # k = 1 is synchronous SGD: averaging parameters after each step = averaging gradients
    sync = dp.train_single(world_size=2, batch_size=16, steps=32, lr=0.3, seed=0)
    assert max_param_difference(runs[1][0].params, sync.params) <= 1e-6
    for k, (a, b) in runs.items():
        assert local_sgd.all_reduce_rounds(a) == math.ceil(32 / k)
        assert max_param_difference(a.params, b.params) == 0   # the copies agree after averaging
        assert a.test_accuracy > 0.3
    assert runs[16][0].params["fc1.weight"].sub(sync.params["fc1.weight"]).abs().max() > 1e-4
    assert local_sgd.comm_seconds_per_sample(runs[16]) < local_sgd.comm_seconds_per_sample(runs[1])
    assert len(local_sgd.all_reduce_seconds(runs[4])) == 2 * 8        # every rank's every round


def test_bad_local_sgd_jobs_fail_before_start():
    for kw, match in [(dict(k=0), "positive integer"), (dict(average="weights"), "average must be"),
                      (dict(k=3, average="gradients", steps=16), "multiple of k")]:
        with pytest.raises(ValueError, match=match):
            distlab.launch(local_sgd.train, world_size=2, **{"steps": 12, **kw}, progress="none")
    with pytest.raises(ValueError, match="positive integer"):
        distlab.launch(local_sgd.train_each, world_size=2, runs=[dict(k=2), dict(k=-1)], progress="none")
    with pytest.raises(ValueError, match="non-empty list"):
        distlab.launch(local_sgd.train_each, world_size=2, runs=[], progress="none")
