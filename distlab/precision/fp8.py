"""FP8 numerics: quantise to 8 bits and back, and measure what is lost (lesson 14, fitting more: issue 38).

Why 8 bits: half of bf16's bytes, and on a GPU with FP8 tensor cores (Hopper, Ada) twice bf16's
matrix-product rate.  Why it needs care: an 8-bit float has 3 or 2 mantissa bits (a relative step
of 2^-3 or 2^-2 where bf16 has 2^-7) and a short range, so every tensor is *scaled* before the
cast, and multiplied back after: ``x ~ q * s``, with ``s = amax / largest`` so that the group's
largest magnitude lands on the format's largest finite value (Micikevicius et al. 2022, "FP8
formats for deep learning", section 2; DeepSeek-V3 technical report 2024, section 3.3.2).

How many numbers share one scale is the *granularity*, the subject of this module:

* ``"tensor"``: one scale.  One large value (an outlier channel) sets it for everyone;
* ``"row"``: one per row (a token of an activation, an output channel of a weight);
* ``"tile"``: one per 1 x 128 run along a row: DeepSeek-V3's scaling of activations;
* ``"block"``: one per 128 x 128 block: DeepSeek-V3's scaling of weights.

Tiles and blocks both cut the *inner* dimension of ``x @ w.T`` into runs of 128, so each scale pair
factors out of a 128-long partial sum: the product can still run in FP8 (DeepSeek-V3, section 3.3.2).

What finer scales buy an 8-bit *float* is less than they buy an 8-bit integer: a float keeps its 3
mantissa bits at every size, so the values beside an outlier lose nothing to its large scale until
they fall below the smallest normal number times the scale (E4M3: outliers about 448 / 2^-6, some
28,000 times larger than them); then they turn subnormal, then 0.  Short of that, what a finer scale
buys is that each group's largest value lands exactly on ``largest``: more of the outliers' weight
is carried by exact numbers.  ``fp8_lab.outlier_activations`` and the tests measure both.

What a CPU can show, and what it cannot: the numbers are exact here (PyTorch casts to
``float8_e4m3fn`` and ``float8_e5m2`` on any machine, rounding to nearest even), so the error of
every granularity is measured for real.  The *speed* of FP8 needs a GPU's FP8 tensor cores;
``fp8_lab.device_part`` says plainly whether there is one.  The products below run in fp32 after
dequantising: they measure the quantisation error only, not the accumulation error of a
tensor core (DeepSeek-V3 section 3.3.2 promotes partial sums to fp32 every 128 for that reason).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class FP8Format:
    """Lesson 14: one 8-bit float format as data: 1 sign bit, ``exponent_bits``, ``mantissa_bits``."""

    name: str
    dtype: torch.dtype
    largest: float                 # the largest finite value
    exponent_bits: int
    mantissa_bits: int
    used_for: str

    @property
    def smallest_normal(self) -> float:
        return torch.finfo(self.dtype).smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        """Below half of it a number rounds to 0: what an unscaled small gradient becomes."""
        return self.smallest_normal * 2.0 ** -self.mantissa_bits

    @property
    def overflows_at(self) -> float:
        """From here on a number rounds beyond ``largest``: ``largest`` plus half the top binade's step
        (E4M3: 448 + 16; E5M2: 57344 + 4096).  E5M2 gives inf; E4M3 has none (PyTorch's cast saturates)."""
        top_step = 2.0 ** (math.floor(math.log2(self.largest)) - self.mantissa_bits)    # 32 and 8192
        return self.largest + top_step / 2


# Micikevicius et al. 2022, section 3: E4M3 for weights and activations (the forward pass), E5M2 for
# gradients, whose range matters more than their precision.  E4M3 gives up the infinities and all but
# one NaN pattern to reach 448; E5M2 keeps IEEE 754's special values.  DeepSeek-V3 (2024, section 3.3.2,
# "mantissa over exponents") uses E4M3 for *every* tensor, gradients included: its fine-grained scales
# stand in for the range that E5M2's extra exponent bit would give.
E4M3 = FP8Format("e4m3", torch.float8_e4m3fn, 448.0, 4, 3,
                 "weights and activations in the forward pass (Micikevicius et al. 2022); every tensor, with "
                 "1x128 and 128x128 scales, in DeepSeek-V3 (2024)")
E5M2 = FP8Format("e5m2", torch.float8_e5m2, 57344.0, 5, 2,
                 "gradients in the backward pass (Micikevicius et al. 2022): range before precision")
FORMATS = {f.name: f for f in (E4M3, E5M2)}
GRANULARITIES = ("tensor", "row", "tile", "block")


def _format(fmt) -> FP8Format:
    if isinstance(fmt, FP8Format):
        return fmt
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, got {fmt!r}")
    return FORMATS[fmt]


def _check(x, granularity: str, block: int, name: str = "x") -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {type(x).__name__}")
    if granularity != "tensor" and x.dim() != 2:
        raise ValueError(f"granularity={granularity!r} scales a matrix: {name} must be 2-D, got shape "
                         f"{tuple(x.shape)} (flatten the leading dimensions: x.reshape(-1, x.shape[-1]))")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty: there is nothing to scale")
    if not torch.isfinite(x.detach().abs().amax()):           # amax carries any inf or nan through
        raise ValueError(f"{name} holds inf or nan: there is no scale for a group without a finite largest value")


def cast(x: torch.Tensor, fmt="e4m3") -> torch.Tensor:
    """Lesson 14: the naive version, no scale at all: round ``x`` to ``fmt`` and back to fp32.

    Magnitudes below half the smallest subnormal become 0; above ``largest``, E4M3 saturates to it
    (PyTorch's cast) and E5M2 becomes inf.  Why scaling exists: see ``gradient_underflow``."""
    return x.float().to(_format(fmt).dtype).float()


def _group_amax(x: torch.Tensor, granularity: str, block: int) -> torch.Tensor:
    """The largest magnitude of each group.  Tiles and blocks are padded with zeros up to a multiple of
    ``block`` (a zero never raises a maximum), so a 200-wide row has two tiles: 128, then 72."""
    a = x.detach().abs().float()
    if granularity == "tensor":
        return a.amax()
    if granularity == "row":
        return a.amax(dim=1, keepdim=True)                                   # (rows, 1)
    rows, cols = a.shape
    pad_rows = (-rows) % block if granularity == "block" else 0
    a = F.pad(a, (0, (-cols) % block, 0, pad_rows))
    if granularity == "tile":
        return a.view(rows, -1, block).amax(dim=2)                           # (rows, tiles)
    return a.view(a.shape[0] // block, block, -1, block).amax(dim=(1, 3))    # (row blocks, column blocks)


def _expand(scales: torch.Tensor, granularity: str, shape, block: int) -> torch.Tensor:
    """Each element's scale, at ``shape`` (a tile's or a block's scale repeated over it, padding cut off)."""
    if granularity in ("tensor", "row"):
        return scales
    rows, cols = shape
    full = scales.repeat_interleave(block, dim=1)
    if granularity == "block":
        full = full.repeat_interleave(block, dim=0)
    return full[:rows, :cols]


def scale_shape(shape, granularity: str, block: int = 128) -> tuple:
    """Lesson 14: how many scales a tensor of ``shape`` carries: () per tensor, (rows, 1) per row,
    (rows, ceil(cols / block)) per tile, (ceil(rows / block), ceil(cols / block)) per block."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if granularity == "tensor":
        return ()
    rows, cols = shape
    up = -(-cols // block)
    return {"row": (rows, 1), "tile": (rows, up), "block": (-(-rows // block), up)}[granularity]


def quantize(x: torch.Tensor, fmt="e4m3", granularity: str = "tensor", block: int = 128):
    """Lesson 14: ``x`` as 8-bit floats ``q`` (the shape of ``x``) and fp32 ``scales``, with ``x ~ q * s``.

    Each group's scale is its largest magnitude over the format's largest value, so the group fills
    the format's range from the top; a group of zeros gets scale 1.  The division can land a hair
    above ``largest`` through fp32 rounding: clamping first makes the cast saturate, as a GPU's does."""
    f = _format(fmt)
    _check(x, granularity, block)
    amax = _group_amax(x, granularity, block)
    scales = torch.where(amax > 0, amax / f.largest, torch.ones_like(amax))
    scaled = x.float() / _expand(scales, granularity, x.shape, block)
    return scaled.clamp(-f.largest, f.largest).to(f.dtype), scales


def dequantize(q: torch.Tensor, scales: torch.Tensor, granularity: str = "tensor", block: int = 128) -> torch.Tensor:
    """Lesson 14: back to fp32: each 8-bit number times its group's scale."""
    values = q.float()
    _check(values, granularity, block, name="q")
    want = scale_shape(q.shape, granularity, block)
    if tuple(scales.shape) != want:
        raise ValueError(f"scales has shape {tuple(scales.shape)}, but a {tuple(q.shape)} tensor scaled per "
                         f"{granularity} with block={block} has {want}")
    return values * _expand(scales, granularity, q.shape, block)


def round_trip(x: torch.Tensor, fmt="e4m3", granularity: str = "tensor", block: int = 128) -> torch.Tensor:
    """Lesson 14: ``dequantize(quantize(x))`` in fp32: ``x`` as the FP8 product sees it."""
    return dequantize(*quantize(x, fmt, granularity, block), granularity, block)


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    """Lesson 14: ||got - reference|| / ||reference||, Frobenius norms."""
    norm = reference.float().norm()
    if norm == 0:
        raise ValueError("reference is all zeros: a relative error needs a nonzero reference")
    return float((got.float() - reference.float()).norm() / norm)


# "fine": DeepSeek-V3's pairing (section 3.3.2): activations in 1x128 tiles, weights in 128x128 blocks
PAIRINGS = {**{g: (g, g) for g in GRANULARITIES}, "fine": ("tile", "block")}


def matmul_error(x: torch.Tensor, w: torch.Tensor, fmt="e4m3", granularity: str = "fine",
                 reference: torch.Tensor | None = None, block: int = 128) -> dict:
    """Lesson 14: how far a linear layer's product ``x @ w.T`` moves when both operands go through FP8,
    beside the same product in bf16: ``{"fp8": ..., "bf16": ...}``, each a ``relative_error`` against
    the fp32 product (or ``reference``, when one is given: computed once for several granularities).

    ``granularity`` scales both operands alike, or ``"fine"``: ``x`` per 1x128 tile and ``w`` per
    128x128 block, as DeepSeek-V3 scales activations and weights.  ``x``: (tokens, in); ``w``: (out, in),
    as ``nn.Linear`` holds it."""
    if granularity not in PAIRINGS:
        raise ValueError(f"granularity must be one of {tuple(PAIRINGS)}, got {granularity!r}")
    for name, t in (("x", x), ("w", w)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features but w expects {w.shape[1]} (w is (out, in), as nn.Linear)")
    x, w = x.detach(), w.detach()
    gx, gw = PAIRINGS[granularity]
    ref = x.float() @ w.float().T if reference is None else reference
    eight = round_trip(x, fmt, gx, block) @ round_trip(w, fmt, gw, block).T
    sixteen = x.bfloat16() @ w.bfloat16().T
    return {"fp8": relative_error(eight, ref), "bf16": relative_error(sixteen, ref)}


def gradient_underflow(g: torch.Tensor, fmt="e5m2") -> dict:
    """Lesson 14: of ``g``'s nonzero values, the share that FP8 turns into 0 (``zeroed``) and the share
    beyond its largest value (``overflowed``), cast as they are and with one scale for the tensor.

    Gradients span many powers of two, most of them small: E4M3's smallest subnormal is 2^-9, E5M2's
    2^-16, so unscaled, E4M3 flushes far more of them to zero.  A per-tensor scale lifts the largest to
    ``largest``; what still falls below then depends on the format's range (E4M3 about 2^18 from its
    smallest subnormal to its largest, E5M2 about 2^32): why gradients were given E5M2."""
    f = _format(fmt)
    _check(g, "tensor", 1, name="g")
    nonzero = g.detach().float().flatten()
    nonzero = nonzero[nonzero != 0]
    if nonzero.numel() == 0:
        raise ValueError("g has no nonzero value: nothing to lose")
    q, scale = quantize(nonzero, f, "tensor")
    n = nonzero.numel()
    return {"format": f.name,
            "zeroed": int((cast(nonzero, f) == 0).sum()) / n,
            "overflowed": int((nonzero.abs() >= f.overflows_at).sum()) / n,
            "zeroed_scaled": int((q.float() == 0).sum()) / n,
            "overflowed_scaled": int((nonzero.abs() / scale >= f.overflows_at).sum()) / n}
