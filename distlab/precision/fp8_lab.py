"""What FP8 is measured on, and where its speed could be: lesson 14's inputs to ``fp8`` (issue 38).

``fp8`` quantises and measures the error; this module gives it something to measure: activations with a
few outlier channels, as large transformers show them (made, and said to be made), and the operands of
every matrix product of a real model on a real batch (the course's own transformer).  ``device_part``
says whether FP8's *speed* can be measured here at all: only a GPU with FP8 tensor cores has it.
"""
from __future__ import annotations

import time

import torch
from torch import nn

from .fp8 import E4M3, quantize


def outlier_activations(rows: int, cols: int, seed: int, channels: int = 6, scale: float = 20.0) -> torch.Tensor:
    """Lesson 14: synthetic activations with a few outlier feature dimensions, from a seeded generator.

    Large transformers' hidden states carry a handful of feature dimensions far larger than the rest,
    in every token (Dettmers et al. 2022, LLM.int8(), section 4: magnitudes of 6 and more where the
    rest lie within about ±3.5; at 6.7B parameters they sit in about 6 of 4,096 dimensions).  A model
    small enough for a CPU has none (``capture_activations`` on the course's transformer shows it), so
    these are made: standard normal values, with ``channels`` columns (drawn by the generator)
    multiplied by ``scale`` (20 is our choice, not the paper's).  Synthetic, and said so: they exist to
    show what one scale per tensor loses when a few channels set it for everyone."""
    for name, v in (("rows", rows), ("cols", cols), ("channels", channels)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if channels > cols:
        raise ValueError(f"channels ({channels}) cannot exceed cols ({cols})")
    if not (isinstance(scale, (int, float)) and 0 < scale < float("inf")):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    x[:, torch.randperm(cols, generator=g)[:channels]] *= scale
    return x


def capture_activations(model: nn.Module, x: torch.Tensor) -> dict:
    """Lesson 14: run ``model`` on ``x`` once and keep, for every ``nn.Linear``, its two operands: the
    input it saw, as (tokens, in), and its weight, (out, in): ``{name: (inputs, weight)}``, ready for
    ``matmul_error``.  Forward hooks read the inputs; the model itself is not changed."""
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if not linears:
        raise ValueError(f"{type(model).__name__} has no nn.Linear: there is no matrix product to quantise")
    seen: dict = {}

    def keep(name):
        def hook(module, args, output):
            seen.setdefault(name, []).append(args[0].detach().reshape(-1, module.in_features).float())
        return hook

    handles = [m.register_forward_hook(keep(name)) for name, m in linears.items()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return {name: (torch.cat(seen[name]), linears[name].weight.detach().float()) for name in linears if name in seen}


def device_part(shape: tuple = (4096, 4096, 4096), repeats: int = 10) -> dict:
    """Lesson 14: can FP8 matrix products run fast here?  Numerics run anywhere; speed does not.

    FP8's speed comes from FP8 tensor cores: compute capability 8.9 (Ada) and 9.0 (Hopper) and later.
    On a CPU, or an older GPU, this returns ``{"fast_fp8": False, "why": ...}`` and measures nothing.
    On a capable GPU it times ``torch._scaled_mm`` (E4M3 operands, per-tensor scales, bf16 out)
    against a bf16 matmul of the same (m, k, n) ``shape``, a few ``repeats`` after one warm-up each,
    and returns both times in milliseconds.  NOT YET RUN: the course has not run this branch on a GPU
    (none was at hand when it was written); no number from it is quoted anywhere."""
    if not torch.cuda.is_available():
        return {"fast_fp8": False, "device": "cpu",
                "why": "no GPU here: FP8's speed needs the FP8 tensor cores of a Hopper-class (or Ada) GPU. "
                       "On a CPU this module measures FP8's numerics only (the rounding is exact, the "
                       "products run in fp32); nothing about its speed can be measured."}
    name, capability = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
    if capability < (8, 9):
        return {"fast_fp8": False, "device": name,
                "why": f"{name} has compute capability {capability[0]}.{capability[1]}: FP8 tensor cores start "
                       "at 8.9 (Ada) and 9.0 (Hopper). Here this module measures FP8's numerics only."}
    m, k, n = shape
    a, b = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    (a8, sa), (b8, sb) = quantize(a, E4M3, "tensor"), quantize(b, E4M3, "tensor")
    a16, b16 = a.bfloat16(), b.bfloat16()
    runs = {"fp8": lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
            "bf16": lambda: a16 @ b16.t()}
    ms = {}
    for label, run in runs.items():
        run()                                       # warm-up: kernel choice, first-call costs
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
        ms[label] = (time.perf_counter() - t0) / repeats * 1e3
    return {"fast_fp8": True, "device": name, "shape": tuple(shape), "fp8_ms": ms["fp8"], "bf16_ms": ms["bf16"],
            "why": "FP8 tensor cores present: times measured here, not claimed"}
