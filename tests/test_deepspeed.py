"""Lesson 08: DeepSpeed's ZeRO, stages 0 to 3, on real CPU ranks over gloo (its CPU accelerator).

Its config is written from the same settings as the hand-written ZeRO and FSDP2 and parsed by
DeepSpeed's own parser, and it is what DeepSpeed runs; its training (Adam, as the lesson) must
give plain data parallelism's parameters, which it does only with DeepSpeed's default gradient
clipping turned off (on, it departs from the 4th step of this model on); each rank
must hold what the memory model predicts, with one difference the model is told about:
DeepSpeed's ZeRO-1 and 2 keep an fp32 copy of the rank's shard even when training in fp32.
"""
import os
import time

import pytest
from helpers import trained

import distlab
from distlab.models import build_model, count_parameters
from distlab.zero import deepspeed_setup
from distlab.zero import deepspeed_zero as D
from distlab.predict import memory as M

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS, LR, BATCH, WIDTH = 6, 0.01, 64, 256
# Adam at width 256: with DeepSpeed's default clipping (1.0) its 4th update differed from ours
SETTINGS = dict(width=WIDTH, global_batch_size=BATCH, steps=STEPS, lr=LR, optimizer="adam")
MOMENTUM = dict(SETTINGS, optimizer="momentum")


def test_deepspeed_is_installed_here():
    assert D.available() is None, D.available()


def test_a_compile_lock_left_by_a_killed_compiler_is_removed_and_a_live_one_kept(tmp_path):
    """torch waits forever on its compile lock; a compiler killed halfway leaves it (CI run of 24e4d42:
    an out-of-memory kill mid-compile, then `make lab` hung in install_deepspeed.sh)."""
    old, live = tmp_path / "py311_cpu" / "old_op" / "lock", tmp_path / "py311_cpu" / "busy_op" / "lock"
    for lock in (old, live):
        lock.parent.mkdir(parents=True)
        lock.touch()
    os.utime(old, (time.time() - 2 * deepspeed_setup.STALE_LOCK_S,) * 2)
    assert deepspeed_setup.clear_stale_locks(str(tmp_path)) == [str(old)]
    assert not old.exists() and live.exists()


@pytest.fixture
def runs():
    """Every case in one launch on 2 ranks, launched once (helpers.trained)."""
    cases = {("plain", 0): ("zero", dict(SETTINGS, stage=0))}
    cases.update({("deepspeed", s): ("deepspeed_zero", dict(SETTINGS, stage=s)) for s in range(4)})
    cases[("plain momentum", 0)] = ("zero", dict(MOMENTUM, stage=0))
    cases[("deepspeed momentum", 1)] = ("deepspeed_zero", dict(MOMENTUM, stage=1))
    cases[("deepspeed clipped", 0)] = ("deepspeed_zero", dict(SETTINGS, stage=0, gradient_clipping=1.0))
    return trained(2, cases, timeout=300)


@pytest.mark.parametrize("stage", range(4))
def test_config_parsed_by_deepspeed(stage):
    cfg = D.config(4, stage=stage, global_batch_size=64)
    parsed = D.validate(cfg, world_size=4)
    assert parsed.zero_optimization_stage == stage
    assert parsed.train_micro_batch_size_per_gpu == 16


def test_config_names_our_optimizer_and_turns_clipping_off():
    """DeepSpeed's defaults would change the update: gradients clipped to norm 1.0, and its "Adam"
    being AdamW.  The config says otherwise, and DeepSpeed's parser reads it so."""
    from deepspeed.runtime.config import DeepSpeedConfig

    assert DeepSpeedConfig({"train_batch_size": 1}).gradient_clipping == 1.0     # the default we turn off
    parsed = D.validate(D.config(2, stage=2, lr=0.003, global_batch_size=64), world_size=2)
    assert parsed.gradient_clipping == 0.0
    assert parsed.optimizer_name == "adam"
    assert parsed.optimizer_params == {"lr": 0.003, "torch_adam": True, "adam_w_mode": False}
    momentum = D.validate(D.config(2, stage=1, optimizer="momentum", lr=0.1, global_batch_size=64), world_size=2)
    assert (momentum.optimizer_name, momentum.optimizer_params) == ("SGD", {"lr": 0.1, "momentum": 0.9})
    with pytest.raises(ValueError, match="gradient_clipping"):
        D.config(2, stage=1, global_batch_size=64, gradient_clipping=-1)


def test_bad_configs_fail_with_a_message():
    with pytest.raises(ValueError, match="train_batch_size 64 is not"):
        D.validate(D.config(4, stage=1, global_batch_size=64), world_size=2)
    broken = D.config(2, stage=1, global_batch_size=64)
    broken["zero_optimization"]["stage"] = "two"
    with pytest.raises(Exception, match="stage"):            # DeepSpeed's own (pydantic) error
        D.validate(broken, world_size=2)
    with pytest.raises(ValueError, match="stage must be 0"):
        D.config(2, stage=4, global_batch_size=64)


@pytest.mark.parametrize("stage", range(4))
def test_deepspeed_trains_like_plain_data_parallelism(runs, stage):
    for record, plain in zip(runs["deepspeed", stage], runs["plain", 0]):
        assert record.config["deepspeed"] == D.config(2, stage=stage, global_batch_size=BATCH, lr=LR)  # what ran
        assert distlab.max_param_difference(record.params, plain.params) <= 1e-6
        assert record.losses == pytest.approx(plain.losses, abs=1e-5)


def test_deepspeed_momentum_is_torch_sgd_by_name(runs):
    for record, plain in zip(runs["deepspeed momentum", 1], runs["plain momentum", 0]):
        assert distlab.max_param_difference(record.params, plain.params) <= 1e-6


def test_deepspeed_default_clipping_changes_adam_from_the_fourth_step(runs):
    """The cause of the old 2% difference: clipping at norm 1.0 leaves the first 3 updates alone
    (their gradients' norm is below 1), then scales the 4th gradient down."""
    for record, plain in zip(runs["deepspeed clipped", 0], runs["plain", 0]):
        assert record.losses[:4] == pytest.approx(plain.losses[:4], abs=1e-6)   # losses before update 4
        assert distlab.max_param_difference(record.params, plain.params) > 1e-4


@pytest.mark.parametrize("stage", range(4))
def test_deepspeed_holds_what_the_model_predicts(runs, stage):
    psi = count_parameters(build_model("mlp", WIDTH))
    predicted = M.per_rank(psi, 2, stage=stage, optimizer="adam", precision="fp32", master_copy=stage in (1, 2))
    for record in runs["deepspeed", stage]:
        assert record.memory["params"] == pytest.approx(predicted.params, rel=0.10)
        assert record.memory["optimizer"] == pytest.approx(predicted.optimizer, rel=0.10)
        assert record.memory["grads"] <= predicted.grads        # DeepSpeed frees them after the step
