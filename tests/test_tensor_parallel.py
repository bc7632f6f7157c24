"""Lesson 07: tensor parallelism by hand and with PyTorch's parallelize_module, on real ranks.

One launch per world size trains the depth-3 MLP with its fc2/fc3 block split across every
rank, by hand and with ``ColwiseParallel``/``RowwiseParallel``; both must end with the
parameters of one process training the whole model, and the hand-written one must all-reduce
exactly the bytes the lesson predicts (one ``batch x width`` tensor forward, one backward).
The hand-written one runs on Horovod too (the Worker's all-reduces): one launch of 4 ranks.
"""
import pytest
import torch
from helpers import once, trained

import distlab
from distlab.models import build_model
from distlab.data_parallel import data_parallel as dp
from distlab.tensor import tensor_parallel as T
from distlab.predict import traffic

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS, LR, BATCH, WIDTH = 20, 0.2, 48, 32
SETTINGS = dict(width=WIDTH, global_batch_size=BATCH, steps=STEPS, lr=LR)
WORLDS = (2, 4)
BY_HAND = [("torchrun", 2), ("torchrun", 4), ("horovod", 4)]


CASES = {"by hand": ("tensor_parallel", SETTINGS), "torch": ("tensor_parallel", dict(SETTINGS, use_torch=True))}


def runs(backend: str, p: int) -> dict:
    """``{case: each rank's record}``: on torchrun both splits in one launch per world size, on Horovod the
    one by hand; each launched once whichever test asks first (helpers.trained)."""
    if backend == "horovod":
        return trained(p, {"by hand": CASES["by hand"]}, backend="horovod", timeout=120)
    return trained(p, CASES, timeout=120)


def reference():
    """One process training the whole model on the whole batch (helpers.once)."""
    return once(dp.train_single, model="mlp", depth=3, width=WIDTH, global_batch_size=BATCH, steps=STEPS, lr=LR,
                record_grads_at=())


@pytest.mark.parametrize("backend,p", BY_HAND)
def test_split_by_hand_trains_like_one_process(backend, p):
    records = runs(backend, p)["by hand"]
    assert {r.backend for r in records} == {backend}
    assert records[0].params["fc2.weight"].shape == (WIDTH // p, WIDTH)      # each rank: its rows
    assert records[0].params["fc3.weight"].shape == (WIDTH, WIDTH // p)      # ... and its columns
    merged = T.merge_params([r.params for r in records])
    assert distlab.max_param_difference(merged, reference().params) <= 1e-6
    for r in records:                                                       # every rank saw the loss
        assert r.losses == pytest.approx(reference().losses, abs=1e-5)


@pytest.mark.parametrize("p", WORLDS)
def test_parallelize_module_trains_like_one_process_and_like_ours(p):
    ours = T.merge_params([r.params for r in runs("torchrun", p)["by hand"]])
    for r in runs("torchrun", p)["torch"]:
        theirs = r.params
        assert distlab.max_param_difference(theirs, reference().params) <= 1e-6
        assert distlab.max_param_difference(theirs, ours) <= 1e-6


@pytest.mark.parametrize("backend,p", BY_HAND)
def test_one_all_reduce_of_batch_x_width_each_way(backend, p):
    for r in runs(backend, p)["by hand"]:
        assert r.traffic == traffic.tensor_parallel_bytes(BATCH, WIDTH) == {"forward": BATCH * WIDTH * 4,
                                                                           "backward": BATCH * WIDTH * 4}
    # data parallelism on the same model would all-reduce every gradient instead
    w = WIDTH
    assert traffic.gradient_bytes("mlp", w, depth=3) == 4 * (64 * w + w + 2 * (w * w + w) + 10 * w + 10)


def test_the_block_split_by_hand_equals_the_whole_block_in_one_process():
    """Column then row split, without processes: the slices' partial sums add up to the layer."""
    whole = build_model("mlp", 8, depth=3, seed=1)
    x = torch.randn(5, 8)
    hidden = torch.relu(whole.fc2(x))
    expected = whole.fc3(hidden)
    partials = []
    for rank in range(4):
        rows = slice(rank * 2, rank * 2 + 2)
        h = torch.relu(x @ whole.fc2.weight[rows].T + whole.fc2.bias[rows])
        partials.append(h @ whole.fc3.weight[:, rows].T)
    assert torch.allclose(sum(partials) + whole.fc3.bias, expected, atol=1e-6)


def test_a_width_the_ranks_cannot_share_is_refused_before_starting():
    with pytest.raises(ValueError, match="tensor-parallel size of 3 does not divide the width 64"):
        distlab.launch(T.train, world_size=3, width=64, progress="none")


def test_what_horovod_cannot_do_is_refused_naming_what_can():
    with pytest.raises(ValueError, match=r"use_torch=True runs on launch\(backend='torchrun'\) only"):
        T.train.validate_args(2, backend="horovod", width=64, global_batch_size=64, steps=2, lr=0.1,
                              dtype="float32", use_torch=True)
    with pytest.raises(ValueError, match=r"device='cuda' runs on launch\(backend='torchrun'\)"):
        T.train.validate_args(2, backend="horovod", device="cuda", width=64, global_batch_size=64, steps=2,
                              lr=0.1, dtype="float32")
    assert {"torchrun", "horovod"} <= T.train.supports
