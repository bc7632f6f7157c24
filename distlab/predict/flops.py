"""How much arithmetic a training step does, counted from the model's shapes, not timed.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``: compute per byte of
gradient decides whether distributing pays); lesson 06 cuts pipelines by the same count, lesson 12
counts its transformer's.

* **forward**: a matrix product of an (m x k) and a (k x n) matrix does m k n multiply-adds, two
  floating-point operations each: forward FLOPs = 2 x multiply-adds.  A linear layer does one per
  weight and sample, a convolution one per weight, sample and output position.
* **training**: the backward pass computes two products for each forward one, the gradient of
  the layer's input and that of its weights, so a step costs about 3 x forward (Kaplan et al.
  2020, "Scaling laws for neural language models", section 2.1: C = 6N per token, 2N forward and
  4N backward).  The rule counts one product too many: nobody needs the gradient of the data, so
  the first layer's input gradient is never computed.  ``exact=True`` leaves it out, and then the
  count equals what ``torch.utils.flop_counter.FlopCounterMode`` counts on a real forward and
  backward (tests/test_predict.py).  The rule's excess is the first layer's share: 18% for the
  width-64 MLP (its first layer does half the work), 2% at width 1024, 1% for the width-16 CNN,
  under 0.1% for lesson 12's transformer.
* **attention** (lesson 12): besides its four projections, each layer computes the scores
  ``Q K^T`` and the weighted values ``P V``, s x s x d multiply-adds each for a line of s tokens
  of width d, whatever the number of heads: the part that grows with the square of the line.
  The causal model computes every score and hides half of them, so it costs the same.

Element-wise work (activations, softmax, LayerNorm, the optimizer's update) is left out, as
FlopCounterMode leaves it out: it moves bytes rather than multiplying matrices.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..models import build_model
from .traffic import gradient_bytes


def layer_costs(model: nn.Sequential, sample: torch.Tensor) -> list[int]:
    """Lesson 06: multiply-adds of each layer of ``model`` for one sample (0 for layers without
    weights), found by running one sample through it.

    A linear layer does one per weight for every vector it is applied to (one for a digit, one per
    token for lesson 12's transformer); a convolution one per weight per output position.  A layer made
    of layers (a transformer block) does what its linear layers and convolutions do together.
    """
    costs, x = [], sample[:1]
    with torch.no_grad():
        for layer in model:
            done = []

            def count(module, args, out, done=done):
                per = out.shape[-1] * out.shape[-2] if isinstance(module, nn.Conv2d) else out.numel() // out.shape[-1]
                done.append(module.weight.numel() * per)
            hooks = [m.register_forward_hook(count) for m in layer.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
            x = layer(x)
            for h in hooks:
                h.remove()
            costs.append(sum(done))
    return costs


def flops_per_sample(model: str, width: int, depth: int = 2) -> int:
    """Lesson 05: FLOPs (2 x multiply-adds) of one *forward* pass of the course's ``model`` on one
    8x8 digit, counted from its layers (``layer_costs``), so it follows the model if the model
    changes."""
    return 2 * sum(layer_costs(build_model(model, width, depth=depth), torch.zeros(1, 1, 8, 8)))


def training_flops(model: str, width: int, batch: int, depth: int = 2, exact: bool = False) -> int:
    """Lesson 05: FLOPs of one training step (forward and backward) on ``batch`` digits: 3 x
    forward (Kaplan et al. 2020, section 2.1), or, ``exact``, without the first layer's input
    gradient that nobody computes."""
    total = 3 * flops_per_sample(model, width, depth) * batch
    if exact:
        first = next(c for c in layer_costs(build_model(model, width, depth=depth), torch.zeros(1, 1, 8, 8)) if c)
        total -= 2 * first * batch
    return total


def compute_per_byte(model: str, width: int, batch_size: int, dtype: str = "float32") -> float:
    """Lesson 05: training FLOPs of one rank's step (3 x forward) per byte of gradient it must send:
    what decides whether a second rank pays for itself (the work shrinks with N, the bytes do not)."""
    return training_flops(model, width, batch_size) / gradient_bytes(model, width, dtype)


@dataclass(frozen=True)
class TransformerShape:
    """Lesson 12: the sizes the formulas need of a transformer, as plain numbers (lesson 12's
    ``sequence.transformer.TransformerConfig`` has the same fields, and either may be passed)."""

    d_model: int = 64
    heads: int = 4
    layers: int = 2
    mlp_ratio: int = 4
    causal: bool = False


def transformer_multiply_adds(shape, tokens: int, *, pixels: int = 4, per_digit: int = 16) -> dict[str, int]:
    """Lesson 12: multiply-adds of one line of ``tokens`` tokens through lesson 12's line reader, by
    part (``shape``: a ``TransformerShape`` or a ``TransformerConfig``).

    Each token is ``pixels`` numbers (a 2x2 patch), each digit ``per_digit`` tokens (as
    ``sequence.lines`` cuts them).  Per block, with s tokens, width h and MLP width m: Q, K, V and
    the output projection 4 s h^2, the scores and the weighted values s^2 h each (Vaswani et al.
    2017, "Attention is all you need", section 3.2.1), the MLP 2 s h m."""
    s, h = tokens, shape.d_model
    m, digits = shape.mlp_ratio * h, tokens // per_digit
    return {"embedding": s * pixels * h,
            "projections": shape.layers * 4 * s * h * h,
            "attention scores and values": shape.layers * 2 * s * s * h,
            "MLP": shape.layers * 2 * s * h * m,
            "read-out": digits * h * 10 + h * 2}


def transformer_training_flops(shape, batch: int, tokens: int, *, exact: bool = False, pixels: int = 4,
                               per_digit: int = 16) -> int:
    """Lesson 12: FLOPs of one training step of the line reader on ``batch`` lines of ``tokens``
    tokens: 3 x forward, forward = 2 x multiply-adds; ``exact`` leaves out the embedding's input
    gradient (the pixels need none), which is what FlopCounterMode counts."""
    parts = transformer_multiply_adds(shape, tokens, pixels=pixels, per_digit=per_digit)
    total = 3 * 2 * sum(parts.values()) * batch
    return total - 2 * parts["embedding"] * batch if exact else total


def recomputed_flops(shape, batch: int, tokens: int, recompute: str, *, pixels: int = 4,
                     per_digit: int = 16) -> int:
    """Lesson 14: the forward FLOPs one step computes a second time, in its backward pass, under activation
    recomputation (``train.recompute``), on ``batch`` lines of ``tokens`` tokens, from the shapes alone.

    ``"full"``: every block's forward again (projections, attention, MLP: 2 x their multiply-adds), so a
    step costs 4 x forward instead of 3 x (Korthikanti et al. 2022, section 5).  ``"selective"``: only
    attention's core again, its two products (the scores ``Q K^T`` and the weighted values ``P V``,
    ``2 s^2 h`` multiply-adds a block); the softmax between them is element-wise work, left out as
    everywhere in this module and by ``FlopCounterMode``.  Their ratio, ``2 s^2 h / (4 s h^2 + 2 s^2 h
    + 2 s h m)`` (``s / (6h + s)`` with ``m = 4h``), is what selective costs of full: small while the line
    is short next to six times the width, near one when attention's square dominates (the time ratio is
    larger: the softmax moves bytes FLOPs do not count; ``bench/recompute.py``).  One process, dense blocks
    (a mixture of experts computes what its routing decides); tests/test_recompute.py holds it to
    ``FlopCounterMode``."""
    if recompute not in ("none", "full", "selective"):
        raise ValueError(f"recompute must be 'none', 'full' or 'selective', got {recompute!r}")
    if recompute == "none":
        return 0
    parts = transformer_multiply_adds(shape, tokens, pixels=pixels, per_digit=per_digit)
    again = ("attention scores and values",) if recompute == "selective" else (
        "projections", "attention scores and values", "MLP")
    return 2 * batch * sum(parts[name] for name in again)
