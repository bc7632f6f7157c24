"""Lesson 08: the memory model, and ZeRO on real ranks (by hand for stages 1 and 2, FSDP2 for 3).

Every run must train exactly like one process at the global batch (the shards' updates are
the whole update, cut in pieces), and every rank must hold what the memory model predicts,
counted tensor by tensor, within 10%.
"""
import pytest
import torch
from helpers import once, trained

import distlab
from distlab.train import memory_held
from distlab.models import build_model, count_parameters
from distlab.data_parallel import data_parallel as dp
from distlab.zero import zero
from distlab.predict import memory as M
from distlab.predict.activations import mlp_activation_bytes

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS, LR, BATCH, WIDTH = 8, 0.01, 48, 64
SETTINGS = dict(width=WIDTH, global_batch_size=BATCH, steps=STEPS, lr=LR)
OPTIMIZERS = ("adam", "momentum")
WORLDS = (2, 4)


def cases(optimizer):
    return {("zero", 0): ("zero", dict(SETTINGS, stage=0, optimizer=optimizer)),
            ("zero", 1): ("zero", dict(SETTINGS, stage=1, optimizer=optimizer)),
            ("zero", 2): ("zero", dict(SETTINGS, stage=2, optimizer=optimizer)),
            ("overlapped", 2): ("zero", dict(SETTINGS, stage=2, optimizer=optimizer, overlap=True)),
            ("fsdp", 3): ("fsdp", dict(SETTINGS, optimizer=optimizer))}


@pytest.fixture
def runs():
    """Every case of both optimizers, one launch per world size, launched once (helpers.trained)."""
    out = {}
    for world in WORLDS:
        both = {(o, *k): v for o in OPTIMIZERS for k, v in cases(o).items()}
        for key, records in trained(world, both, timeout=120).items():
            out[(world, *key)] = records
    return out


@pytest.fixture
def references():
    """One process per optimizer, run once (helpers.once)."""
    return {o: once(dp.train_single, world_size=2, global_batch_size=BATCH, width=WIDTH, steps=STEPS, lr=LR,
                    optimizer=o, record_grads_at=()) for o in OPTIMIZERS}


KEYS = [(w, o, how, s) for w in WORLDS for o in OPTIMIZERS
        for how, s in (("zero", 0), ("zero", 1), ("zero", 2), ("overlapped", 2), ("fsdp", 3))]


@pytest.mark.parametrize("key", KEYS, ids=lambda k: f"{k[0]}ranks-{k[1]}-{k[2]}{k[3]}")
def test_zero_trains_like_plain_data_parallelism(runs, key):
    world, optimizer = key[:2]
    for record, plain in zip(runs[key], runs[world, optimizer, "zero", 0]):     # rank by rank
        assert distlab.max_param_difference(record.params, plain.params) <= 1e-5
        assert record.losses == pytest.approx(plain.losses, abs=1e-5)


@pytest.mark.parametrize("world", WORLDS)
def test_plain_data_parallelism_trains_like_one_process(runs, references, world):
    """With momentum the update is linear in the gradient: rounding stays at rounding's size.  Adam
    divides by the root of the squared gradient, which turns a rounding difference in a gradient
    near zero into a step of up to lr times that difference over eps: compared loosely."""
    for optimizer, tolerance in (("momentum", 1e-6), ("adam", 1e-3)):
        for record in runs[world, optimizer, "zero", 0]:
            assert distlab.max_param_difference(record.params, references[optimizer].params) <= tolerance


@pytest.mark.parametrize("key", KEYS, ids=lambda k: f"{k[0]}ranks-{k[1]}-{k[2]}{k[3]}")
def test_each_rank_holds_what_the_model_predicts(runs, key):
    world, optimizer, _, stage = key
    psi = count_parameters(build_model("mlp", WIDTH))
    predicted = M.per_rank(psi, world, stage=stage, optimizer=optimizer, precision="fp32")
    for record in runs[key]:
        for category in ("params", "grads", "optimizer"):
            assert record.memory[category] == pytest.approx(getattr(predicted, category), rel=0.10), category
    if stage:   # and sharding really shrank what was copied: optimizer state 1/N of plain DP's (+ padding)
        plain = runs[world, optimizer, "zero", 0][0].memory
        assert runs[key][0].memory["optimizer"] <= plain["optimizer"] / world * 1.1


def test_zero_paper_figure_1():
    """Rajbhandari et al., Figure 1: 7.5B parameters, 64 ranks, Adam in mixed precision (K = 12)."""
    gb = M.zero_paper_example()
    assert [round(gb[s], 1) for s in M.STAGES] == [120.0, 31.4, 16.6, 1.9]


def test_communication_volume_as_in_the_paper():
    psi = 1e9
    rounded = {s: M.zero_volume(psi, 64, stage=s, exact=False)["elements"] for s in M.STAGES}
    assert rounded == {0: 2 * psi, 1: 2 * psi, 2: 2 * psi, 3: 3 * psi}
    exact = M.zero_volume(psi, 4, stage=0, precision="fp32")
    assert exact["elements"] == pytest.approx(2 * psi * 3 / 4)        # a ring: 2 (N-1)/N
    assert exact["bytes"] == pytest.approx(4 * exact["elements"])


def test_model_parallel_layouts_divide_before_zero_shards():
    whole = M.per_rank(8e9, 8, stage=1)
    split = M.per_rank(8e9, 8, stage=1, pipeline=2, tensor=2)          # 2-way data parallel
    assert split.params == whole.params / 4
    assert split.optimizer == pytest.approx(12 * 8e9 / 4 / 2)
    with pytest.raises(ValueError, match="multiple of pipeline x tensor"):
        M.per_rank(1e9, 6, pipeline=4)


def test_largest_model_is_where_the_budget_runs_out():
    budget = 80e9
    psi = M.largest_model(budget, 64, stage=3)
    assert M.per_rank(psi, 64, stage=3).total == pytest.approx(budget)
    assert M.largest_model(budget, 64, stage=0) == pytest.approx(budget / 16)
    assert M.largest_model(1.0, 2, activations=2.0) == 0.0


@pytest.mark.parametrize("bad, message", [
    (dict(stage=4), "stage must be one of"), (dict(optimizer="lion"), "optimizer must be one of"),
    (dict(precision="fp8"), "precision must be one of"), (dict(world_size=0), "world_size must be"),
])
def test_bad_settings_are_named(bad, message):
    args = dict(params=1e6, world_size=2)
    args.update({k: v for k, v in bad.items() if k in args})
    with pytest.raises(ValueError, match=message):
        M.per_rank(args["params"], args["world_size"], **{k: v for k, v in bad.items() if k not in args})


@pytest.mark.parametrize("depth, width, batch", [(2, 64, 32), (3, 128, 7)])
def test_activations_counted_as_predicted(depth, width, batch):
    model = build_model("mlp", width, depth=depth)
    x, y = torch.randn(batch, 1, 8, 8), torch.randint(0, 10, (batch,))
    counted = memory_held.activation_bytes(model, x, y)
    assert counted == pytest.approx(mlp_activation_bytes(batch, width, depth), rel=0.01)


def test_hand_written_zero_refuses_stage_3_before_starting():
    with pytest.raises(ValueError, match="stage 3 is FSDP2 or DeepSpeed"):
        distlab.launch(zero.train, 2, stage=3, global_batch_size=8, progress="none")
    with pytest.raises(ValueError, match="overlap=True is the optimised stage 2"):
        distlab.launch(zero.train, 2, stage=1, overlap=True, global_batch_size=8, progress="none")


def test_overlapped_stage_2_reduces_during_backward(runs):
    """Its reduce-scatters start inside backward: before the compute part of the step has ended."""
    for record in runs[2, "adam", "overlapped", 2]:
        assert all(s.t_comm_start < s.t_compute_end for s in record.steps)
