"""Issue 39: the gradients sent during backward (``train.overlap``, lesson 15).

Every way (a hook per parameter, buckets, reduce-scatter then all-gather, DDP with a small bucket cap)
takes exactly the steps of one process, on plain data parallelism and on the data axis of the five-axis
transformer (with tensor and context partners, and with accumulated micro-batches, whose earlier
backwards send nothing).  The record's buckets show launches *during* backward, in the same order on
every rank.  Bad settings are refused before any process starts."""
import pytest
import torch
import workers
from helpers import once

import distlab
from distlab.cluster.config import RunConfig
from distlab.data_parallel import data_parallel as dp
from distlab.parallelize import trainer
from distlab.train import overlap

pytestmark = pytest.mark.usefixtures("warm_ranks")

MLP = dict(model="mlp", width=32, depth=3, batch_size=8, steps=8, lr=0.2, seed=3)
SMALL = 0.004            # MiB: a few of the MLP's tensors a bucket (its largest, 64 x 32 floats, is 8 KiB)
DP_CASES = {"hooks": ("data_parallel", dict(MLP, method="hooks")),
            "buckets": ("data_parallel", dict(MLP, method="buckets", bucket_mb=SMALL)),
            "reduce_scatter": ("data_parallel", dict(MLP, method="reduce_scatter", bucket_mb=SMALL)),
            "ddp small buckets": ("data_parallel", dict(MLP, method="ddp", bucket_mb=SMALL))}

LINES = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=6, lr=0.05, optimizer="sgd", seed=0,
             test_lines=32)
AXES = dict(data=1, pipeline=1, expert=1, context=1, tensor=1)
LINE_CASES = {
    "data 2 x tensor 2, hooks": dict(LINES, **dict(AXES, data=2, tensor=2), method="hooks"),
    "data 2 x context 2, reduce-scatter": dict(LINES, **dict(AXES, data=2, context=2), method="reduce_scatter",
                                               bucket_mb=0.01),
    "data 4, buckets, 4 micro-batches": dict(LINES, **dict(AXES, data=4), method="buckets", bucket_mb=0.01,
                                             micro_batches=4),
}


@pytest.fixture(scope="module")
def dp_runs():
    ranks = distlab.launch(workers.trainings, world_size=2, cases=DP_CASES, progress="none")
    return {name: [r[name] for r in ranks] for name in DP_CASES}


@pytest.fixture(scope="module")
def line_runs():
    ranks = distlab.launch(workers.five_axes, world_size=4, cases=LINE_CASES, progress="none", timeout=180)
    return {name: [r[name] for r in ranks if name in r] for name in LINE_CASES}


@pytest.mark.parametrize("name", DP_CASES)
def test_every_overlapped_way_equals_one_process(dp_runs, name):
    reference = once(dp.train_single, world_size=2, **MLP)
    records = dp_runs[name]
    assert max(distlab.max_param_difference(r.params, reference.params) for r in records) <= 1e-6


@pytest.mark.parametrize("name", ["buckets", "reduce_scatter"])
def test_the_first_bucket_leaves_while_backward_is_still_running(dp_runs, name):
    """The buckets are launched in order, the same on both ranks, and the first before backward ends."""
    records = dp_runs[name]
    orders = [[[(b["bucket"], b["tensors"], b["bytes"]) for b in step] for step in r.buckets] for r in records]
    assert orders[0] == orders[1] and len(orders[0]) == MLP["steps"]
    assert len(orders[0][0]) >= 3                                         # several buckets
    assert sum(b[2] for b in orders[0][0]) == sum(p.numel() * 4 for p in records[0].params.values())
    for r in records:
        for step, buckets in zip(r.steps, r.buckets):
            assert [b["bucket"] for b in buckets] == sorted(b["bucket"] for b in buckets)
            assert all(b["launched"] <= b["done"] for b in buckets)
            assert buckets[0]["launched"] < step.t_compute_end                # sent during backward
            assert buckets[-1]["done"] <= step.t_comm_end                   # and waited for before the update


def test_hooks_send_one_message_per_tensor(dp_runs):
    r = dp_runs["hooks"][0]
    assert [b["tensors"] for b in r.buckets[0]] == [1] * len(r.params)


@pytest.mark.parametrize("name", LINE_CASES)
def test_the_transformers_data_axis_sends_during_backward_like_one_process(line_runs, name):
    records = line_runs[name]
    reference = trainer.train_single(world_size=len(records), **LINE_CASES[name])
    difference = distlab.max_param_difference(trainer.assemble(records), reference.params)
    assert difference <= 1e-5, difference
    assert all(len(r.buckets) == LINE_CASES[name]["steps"] for r in records)


def test_accumulated_micro_batches_send_each_gradient_once_a_step(line_runs):
    """With 4 micro-batches only the last backward's hooks send (DDP's no_sync): one gradient's bytes a step,
    where all-reducing after every micro-batch would send four."""
    r = line_runs["data 4, buckets, 4 micro-batches"][0]
    gradient_bytes = sum(p.numel() * p.element_size() for p in r.params.values())
    assert {sum(b["bytes"] for b in step) for step in r.buckets} == {gradient_bytes}


def test_plan_buckets_follows_backward_and_the_cap():
    params = [torch.zeros(10), torch.zeros(20), torch.zeros(5), torch.zeros(100)]
    sizes = lambda buckets: [[p.numel() for p in b] for b in buckets]     # noqa: E731
    assert sizes(overlap.plan_buckets(params, 0)) == [[100], [5], [20], [10]]            # one a tensor
    assert sizes(overlap.plan_buckets(params, 4 * 30)) == [[100], [5, 20], [10]]       # a tensor over the cap alone
    assert sizes(overlap.plan_buckets(params, 4 * 1000)) == [[100, 5, 20, 10]]         # one bucket: "fused"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), True, "25"])
def test_a_bucket_of_no_bytes_is_refused_before_start(bad):
    with pytest.raises(ValueError, match="bucket_mb must be a positive number"):
        distlab.launch(dp.train, world_size=2, method="buckets", bucket_mb=bad, progress="none", **MLP)


def test_settings_the_overlapped_ways_cannot_take_are_refused_before_start():
    with pytest.raises(ValueError, match="hooks during backward; a pipeline stage"):
        trainer.train_single(world_size=2, **dict(LINES, **dict(AXES, pipeline=2), micro_batches=2, method="hooks"))
    with pytest.raises(ValueError, match="method='by_hand'"):
        distlab.launch(dp.train, world_size=2, method="hooks", collective="ring", progress="none", **MLP)
    with pytest.raises(ValueError, match="HOROVOD_FUSION_THRESHOLD"):
        distlab.launch(dp.train, world_size=2, backend="horovod", method="ddp", bucket_mb=1.0, progress="none",
                       **MLP)
    with pytest.raises(ValueError, match="bucket_mb"):
        RunConfig.model_validate({"parallel": {"strategy": "data", "method": "buckets", "bucket_mb": 0}})
