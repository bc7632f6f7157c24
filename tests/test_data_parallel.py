"""N ranks at batch B take exactly the steps of one process at batch N*B, by hand and with DDP."""
import pytest
import torch
from helpers import once

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.data import load_digits

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS = 60   # > one epoch for N=4, B=8: crosses an epoch boundary and a reshuffle
CONFIG = dict(model="mlp", width=32, batch_size=8, steps=STEPS, lr=0.2, seed=3, record_grads_at=(0, 59))


@pytest.fixture
def references():
    """One process at the global batch of 1, 2 and 4 ranks, each run once (helpers.once)."""
    return {n: once(dp.train_single, world_size=n, **CONFIG) for n in (1, 2, 4)}


@pytest.mark.parametrize("method", ["by_hand", "ddp"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_n_ranks_equal_one_big_batch_process(method, n, references):
    ref = references[n]
    recs = distlab.launch(dp.train, world_size=n, method=method, progress="none", **CONFIG)
    diffs = [distlab.max_param_difference(r.params, ref.params) for r in recs]
    print(f"{method} N={n}: max |param difference| vs one process at batch {8 * n}: {max(diffs):.2e}")
    assert max(diffs) <= 1e-6
    # the averaged gradient is the big-batch gradient; the local ones differ from it (N > 1)
    for step in (0, 59):
        for layer, g in ref.grads[step].items():
            avg = [r.grads[step][layer]["average"] for r in recs]
            local = torch.stack([r.grads[step][layer]["local"] for r in recs])
            assert all((a - g["local"]).abs().max() <= 1e-6 for a in avg)
            assert (local.mean(0) - g["local"]).abs().max() <= 1e-6
            if n > 1:
                assert (local[0] - local[1]).abs().max() > 1e-4
    _check_record_contents(recs, method, n)


def _check_record_contents(recs, method, n):
    digits = load_digits()
    n_train, n_test = digits.n_train, len(digits.y_test)
    shards = [set(r.shard.tolist()) for r in recs]
    assert set().union(*shards) == set(range(n_train))
    assert all(len(r.shard) == -(-n_train // n) for r in recs)
    for r in recs:
        assert (r.rank, r.world_size, r.method, r.backend) == (recs.index(r), n, method, "torchrun")
        assert [s.step for s in r.steps] == list(range(STEPS))
        # each step's accuracy is a share of this rank's 8 samples; the test accuracy a share of the test digits
        assert all((s.accuracy * CONFIG["batch_size"]).is_integer() and 0 <= s.accuracy <= 1 and s.loss > 0
                   for s in r.steps)
        assert all(s.t_start <= s.t_compute_end <= s.t_end for s in r.steps)
        if method == "by_hand":
            assert all(s.t_compute_end <= s.t_comm_start <= s.t_comm_end <= s.t_end for s in r.steps)
        else:
            assert all(s.t_comm_start is None for s in r.steps)   # overlapped with backward in DDP
        assert sorted(r.grads) == [0, 59] and set(r.grads[0]) == set(r.params)
        assert r.wall_time > 0 and 0 <= r.test_accuracy <= 1
        assert abs(r.test_accuracy * n_test - round(r.test_accuracy * n_test)) < 1e-9
    assert len({r.test_accuracy for r in recs}) == 1      # same parameters, same test accuracy
    assert recs[0].steps[-1].loss < recs[0].steps[0].loss   # it learned something


def test_float64_agrees_to_rounding_error(references):
    cfg = dict(CONFIG, dtype="float64", steps=50, record_grads_at=())
    ref = dp.train_single(world_size=2, **cfg)
    recs = distlab.launch(dp.train, world_size=2, method="by_hand", progress="none", **cfg)
    assert max(distlab.max_param_difference(r.params, ref.params) for r in recs) <= 1e-12


def test_cnn_trains_data_parallel_too():
    cfg = dict(model="cnn", width=4, global_batch_size=32, steps=50, lr=0.1, seed=1, record_grads_at=())
    ref = dp.train_single(world_size=2, **cfg)
    recs = distlab.launch(dp.train, world_size=2, method="ddp", progress="none", **cfg)
    assert max(distlab.max_param_difference(r.params, ref.params) for r in recs) <= 1e-6
