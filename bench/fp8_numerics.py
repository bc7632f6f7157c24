"""Benchmark for issue 38: FP8 numerics on a CPU (lesson 14), ``distlab.precision.fp8``.

Numbers, not times: the rounding to E4M3 is exact on any machine, so each figure below is a measured
error, the same on every run with the same seeds (the REPEAT check should find them equal).

- ``fp8_tile_error_vs_tensor_error`` (GOAL): on activations with outlier channels
  (``fp8_lab.outlier_activations``: 1024 tokens x 512 features, 6 channels 20 times the rest; synthetic,
  as a model small enough for a CPU grows no outliers), multiplied by a random (512, 512) weight, the
  relative error of the E4M3 product scaled DeepSeek-V3's way (activations per 1x128 tile, weights per
  128x128 block: ``"fine"``) over the error with one scale per tensor; one round per seed, 5 seeds.
  Target ``<= 0.9``, not the 0.5 one might hope for: FP8 is a *float*, so one scale costs the values
  beside an outlier no precision until they fall below E4M3's smallest normal number times the scale
  (outliers some 28,000 times larger than them).  The gain measured here (0.79 to 0.82) comes from
  each group's largest value landing exactly on 448: the outlier channels' rounding error falls from
  0.026 to 0.010 with tiles, the quiet channels' stays at 0.026 (tests/test_fp8.py checks both).
  DeepSeek-V3 (2024, section 3.3.2) gives no ratio, only that fine scales absorb outliers; the issue
  asked for "below 1".
- REPORT, the lesson's own model: the course's transformer (``TransformerConfig()``, untrained, built
  from each seed) on 16 real lines of 8 digits, the inputs of its blocks' linear layers captured with
  ``fp8_lab.capture_activations`` (the layers DeepSeek-V3 runs in FP8; it keeps the embedding and the head
  in higher precision): the same ratio, the mean over the layers.  Its activations show no outliers
  (the largest 4 to 18 times the median), so the ratio stays near 1 (about 0.97).
- REPORT, per granularity and per kind: E4M3's error beside bf16's (one bf16 product per input), the
  figure the lesson plots; the share of real gradients E4M3 and E5M2 flush to zero, with and without
  a scale; what ``fp8_lab.device_part`` says of this machine.

Run time: about 30 s on 2 busy cores (load average 6).
"""
import math
import os
import statistics
import sys
import time
import warnings

import torch

from distlab.data import load_digits
from distlab.precision import fp8, fp8_lab
from distlab.sequence import lines as L
from distlab.sequence.transformer import TransformerConfig, build_transformer, loss_and_accuracy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scripts.goals import goal  # noqa: E402

SEEDS = (0, 1, 2, 3, 4)
GRANULARITIES = ("tensor", "row", "tile", "block", "fine")
TOKENS, FEATURES = 1024, 512


def outlier_errors(seed: int) -> dict:
    """Each granularity's ``matmul_error`` on the outlier activations of ``seed`` and a random weight."""
    x = fp8_lab.outlier_activations(TOKENS, FEATURES, seed)
    w = torch.randn(FEATURES, FEATURES, generator=torch.Generator().manual_seed(1000 + seed)) / math.sqrt(FEATURES)
    ref = x @ w.T
    return {g: fp8.matmul_error(x, w, "e4m3", g, reference=ref) for g in GRANULARITIES}


def transformer_errors(seed: int, data) -> tuple[dict, torch.nn.Module, L.Lines]:
    """Each granularity's error on the transformer's blocks, the mean over their linear layers."""
    model = build_transformer(TransformerConfig(), seed=seed)
    lines = L.train_lines(data, 16, 8, seed=seed, step=0)
    per_layer = []
    for name, (x, w) in fp8_lab.capture_activations(model, lines.tokens).items():
        if name.startswith("blocks."):
            ref = x @ w.T
            per_layer.append({g: fp8.matmul_error(x, w, "e4m3", g, reference=ref) for g in GRANULARITIES})
    mean = {g: {kind: statistics.fmean(layer[g][kind] for layer in per_layer) for kind in ("fp8", "bf16")}
            for g in GRANULARITIES}
    return mean, model, lines


def bench() -> None:
    data = load_digits()
    rounds = {"outliers": [], "transformer": []}
    for seed in SEEDS:
        outliers = outlier_errors(seed)
        errors, model, lines = transformer_errors(seed, data)
        rounds["outliers"].append(outliers)
        rounds["transformer"].append(errors)
        print(f"seed {seed}: fine/tensor on outliers {outliers['fine']['fp8'] / outliers['tensor']['fp8']:.3f}, "
              f"on the transformer {errors['fine']['fp8'] / errors['tensor']['fp8']:.3f}", flush=True)
    ratios = {kind: [r["fine"]["fp8"] / r["tensor"]["fp8"] for r in got] for kind, got in rounds.items()}

    goal("fp8_tile_error_vs_tensor_error", ratios["outliers"], "<=", 0.9,
         note="outlier activations; fine = 1x128 tiles on activations, 128x128 blocks on weights")
    t = ratios["transformer"]
    print(f"REPORT fp8_tile_error_vs_tensor_error_transformer {statistics.median(t):.4g} "
          f"(rounds {min(t):.4g} to {max(t):.4g}; the course's model, mean over its blocks' layers)")
    for kind, got in rounds.items():
        for g in GRANULARITIES:
            e4m3 = statistics.median(r[g]["fp8"] for r in got)
            bf16 = statistics.median(r[g]["bf16"] for r in got)
            print(f"REPORT fp8_e4m3_error_{kind}_{g} {e4m3:.4g} (bf16 {bf16:.4g}: e4m3 {e4m3 / bf16:.1f} times bf16's)")

    model.zero_grad()
    loss_and_accuracy(model, lines)[0].backward()          # the last seed's model: real gradients
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    for name in fp8.FORMATS:
        u = fp8.gradient_underflow(grads, name)
        print(f"REPORT fp8_gradients_zeroed_{name} {u['zeroed']:.4g} (with one scale: {u['zeroed_scaled']:.4g}; "
              f"overflowed {u['overflowed']:.4g}; of {grads.count_nonzero().item()} nonzero gradients)")
    device = fp8_lab.device_part()
    print(f"REPORT fp8_fast_here {device['fast_fp8']} ({device['why']})")
    if device["fast_fp8"]:
        print(f"REPORT fp8_matmul_ms {device['fp8_ms']:.4g} (bf16 {device['bf16_ms']:.4g}, shape {device['shape']})")


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    t0 = time.time()
    bench()
    print(f"({time.time() - t0:.0f} s)")
