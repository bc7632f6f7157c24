"""Lesson 14's pieces beside the levers themselves: offload refused where there is nothing to offload to,
fp16 without a loss scaler warned about with a measurement before start, and the memory calculator's
arithmetic (``widgets.fitting``), whose bars lesson 14 checks against counted runs."""
import warnings

import pytest
import torch

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.precision import mixed
from distlab.predict import activations as A
from distlab.predict import memory as M
from distlab.widgets import fitting as F
from distlab.zero import fsdp


@pytest.mark.parametrize("offload,match", [("params", "nothing to offload to"), ("disk", "offload 'none' or 'params'")])
def test_offload_on_cpu_ranks_is_refused_before_anything_starts(offload, match):
    with pytest.raises(ValueError, match=match):
        distlab.launch(fsdp.train, world_size=2, offload=offload, steps=1)


def test_the_unscaled_warning_counts_what_fp16_flushes():
    small = torch.tensor([2.0 ** -30, 2.0 ** -20, 1e-3, 0.5, 0.0])       # one below 2^-25, one subnormal
    text = mixed.unscaled_warning([small])
    assert "25.00% of the 4 nonzero gradient values" in text and "25.00% are subnormal" in text
    assert mixed.unscaled_warning([torch.tensor([1e-3, 0.5])]) is None


def test_fp16_without_a_scaler_runs_after_a_measured_warning():
    """The warning comes before start, from the run's own first gradients: the MLP at a learning rate and
    batch whose gradients reach below fp16's normal range."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = distlab.launch(dp.train, world_size=2, precision="fp16_unscaled", global_batch_size=64,
                                 steps=3, seed=0, progress="none")
    said = [str(w.message) for w in caught if "fp16_unscaled" in str(w.message)]
    first = dp.train_single(world_size=2, global_batch_size=64, steps=1, seed=0)
    expected = mixed.unscaled_warning([g["local"] for g in first.grads[0].values()])
    assert said == ([expected] if expected else [])
    assert records[0].config["precision"] == "fp16_unscaled" and not records[0].loss_scale
    assert all(torch.isfinite(torch.tensor(r.losses)).all() for r in records)


@pytest.mark.parametrize("policy", list(M.POLICY_ACCOUNTING))
def test_the_calculators_bars_are_the_policys_bytes_and_offload_only_moves_them(policy):
    n = 85_002
    device, host = F.fitting_bars(n, 2, stage=0, policy=policy, offload="none", activations=1000)
    want = {k: v * n for k, v in M.bytes_per_parameter(policy, "adam").items()}
    assert {k: device[k] for k in want} == pytest.approx(want) and sum(host[k] for k in want) == 0
    assert device["weight copies"] == (2 * n if policy in ("bf16", "fp16", "fp16_unscaled") else 0)
    for offload, moved in (("optimizer", {"master", "optimizer", "grads"}), ("params", set(want))):
        d, h = F.fitting_bars(n, 2, stage=0, policy=policy, offload=offload, activations=1000)
        assert all(d[k] == 0 and h[k] == pytest.approx(device[k]) for k in moved)
        assert d["activations"] == 1000 and h["activations"] == 0
    sharded = F.fitting_bars(n, 8, stage=1, policy=policy, offload="none", activations=0)[0]
    assert sharded["optimizer"] == pytest.approx(want["optimizer"] / 8)


def test_the_calculators_activations_follow_the_models():
    for mode in ("none", "selective", "full"):
        assert F.activation_bytes("the course's line reader", mode) == \
            A.transformer_activation_bytes(F.COURSE_READER, 8, 256, recompute=mode)["total"]
    layers, h, a, s = F.SHAPES["Llama 2 7B"]
    assert F.activation_bytes("Llama 2 7B", "none") == layers * A.korthikanti_layer_bytes(s, 1, h, a)
    assert F.activation_bytes("Llama 2 7B", "full") == layers * 2 * s * h       # each layer's 16-bit input


def test_the_calculator_redraws_with_every_lever():
    calc = F.fitting_calculator(105_000)
    model, ranks, stage, policy, recompute, offload, gpu = calc.controls
    first = bytes(calc.image.value)
    assert first.startswith(b"\x89PNG") and "on each accelerator" in repr(calc)
    before = repr(calc)
    offload.value = "params"
    assert repr(calc) != before and bytes(calc.image.value) != first
    recompute.value = "full"
    model.value = "the course's line reader"
    assert "the course's line reader" in repr(calc)


def test_the_lessons_pictures_draw():
    F.exponent_figure(mixed.exponent_histogram([torch.tensor([2.0 ** -30, 1e-3, 0.5])]))
    with pytest.raises(ValueError, match="reader_params must be a positive"):
        F.fitting_calculator(0)
    F.loss_scale_figure([(65536.0, True), (32768.0, False)])
    F.policy_figure({"fp32": dict(params=4, grads=4, optimizer=8), "bf16_master": dict(params=2, grads=2, master=4,
                                                                                    optimizer=8)})
    with pytest.raises(ValueError, match="not fp16"):
        F.loss_scale_figure([])
