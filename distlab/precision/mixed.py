"""Mixed precision: compute in 16 bits, keep the weights in 32 (lesson 14, fitting more: issue 38).

Why 16 bits: a bf16 or fp16 number takes 2 bytes instead of 4 (half the activations' memory and
traffic), and a GPU's tensor cores multiply them many times faster than fp32.  Why the weights stay
in 32: an update ``lr x g`` is often smaller than the gap between two neighbouring 16-bit numbers
near the weight, and would round away; so the optimizer updates an fp32 *master* copy
(Micikevicius et al. 2018, "Mixed precision training", section 3.1).  ``torch.autocast`` does
exactly this for us: the parameters stay fp32, each matrix product casts its inputs to 16 bits.

The two 16-bit formats differ in where they put their bits:

* **bf16**: fp32's 8 exponent bits and 7 of its mantissa bits: the same range as fp32, coarser steps.
  No gradient is too small for it, so it needs no scaling;
* **fp16**: 5 exponent bits and 10 mantissa bits: finer steps, a small range.  The smallest
  normal fp16 number is 2^-14 and the smallest subnormal 2^-24: a gradient below that becomes 0.
  The cure is **loss scaling**: multiply the loss by S before backward (by the chain rule every
  gradient is multiplied by S too, lifting the small ones into range), divide the gradients by S
  before the update, and skip an update whose gradients overflowed (an inf or a nan), halving S;
  after ``growth_interval`` clean steps, double S (dynamic loss scaling: Micikevicius et al. 2018,
  section 3.2; ``torch.amp.GradScaler`` does the same).  ``LossScaler`` is that, written out.

Each policy fills the micro-step's ``Precision`` slot (``distlab.train.step``): ``autocast()`` for
the forward, ``scale(loss)`` for backward, ``step(optimizer)`` for the update.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..train.step import FP32, Precision

FP16_SMALLEST_NORMAL = 2.0 ** -14      # below it, fp16 loses precision (subnormals)
FP16_SMALLEST = 2.0 ** -24             # the smallest subnormal: below half of it, fp16 rounds to zero
FP16_LARGEST = 65504.0                 # above it, inf


@dataclass(frozen=True)
class Autocast(Precision):
    """Lesson 14: forward in ``dtype`` under ``torch.autocast`` (fp32 master weights), no loss scaling:
    what bf16 needs."""

    name: str = "bf16"
    dtype: torch.dtype = torch.bfloat16
    device_type: str = "cpu"

    def autocast(self):
        return torch.autocast(self.device_type, dtype=self.dtype)


class LossScaler:
    """Lesson 14: dynamic loss scaling, by hand.  ``scale`` multiplies the loss; ``unscale`` divides the
    gradients back and says whether they are all finite; ``update`` skips or grows.

    ``history`` keeps ``(scale, skipped)`` per update: the trace a lesson plots.  On several ranks the
    gradients must agree on "finite" before anyone steps: with all-reduced gradients they do (every
    rank holds the same numbers); a rank holding only a shard (ZeRO, FSDP) must all-reduce its
    verdict first, as PyTorch's ShardedGradScaler does."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        if not (init_scale > 0 and growth_factor > 1 and 0 < backoff_factor < 1 and growth_interval >= 1):
            raise ValueError("LossScaler needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 "
                             f"and growth_interval >= 1; got {init_scale}, {growth_factor}, {backoff_factor}, "
                             f"{growth_interval}")
        self.scale_value = float(init_scale)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.clean_steps = 0
        self.history: list[tuple[float, bool]] = []

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_value

    def unscale(self, params) -> bool:
        """Divide every gradient by the scale, in place; True when every one is finite."""
        finite = True
        for p in params:
            if p.grad is not None:
                p.grad.div_(self.scale_value)
                finite = finite and bool(torch.isfinite(p.grad).all())
        return finite

    def update(self, finite: bool) -> None:
        """After an update (``finite``) or a skipped one: halve on overflow, double after
        ``growth_interval`` clean updates in a row."""
        self.history.append((self.scale_value, not finite))
        if not finite:
            self.scale_value *= self.backoff_factor
            self.clean_steps = 0
            return
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            self.scale_value *= self.growth_factor
            self.clean_steps = 0


@dataclass(frozen=True)
class ScaledAutocast(Autocast):
    """Lesson 14: forward in fp16 under autocast, backward from the scaled loss, the update only when
    the unscaled gradients are finite (``LossScaler``)."""

    name: str = "fp16"
    dtype: torch.dtype = torch.float16
    scaler: LossScaler = field(default_factory=LossScaler)
    agree: object = field(default=None, compare=False)   # ranks holding shards: all agree on "finite"

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss)

    def step(self, optimizer) -> bool:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        finite = self.scaler.unscale(params)
        if self.agree is not None:
            finite = self.agree(finite)
        if finite:
            optimizer.step()
        self.scaler.update(finite)
        return finite

    def trace(self) -> list:
        return list(self.scaler.history)

    def state_dict(self) -> dict:
        s = self.scaler
        return {"loss_scaler": {"scale": s.scale_value, "clean_steps": s.clean_steps, "history": list(s.history)}}

    def load_state_dict(self, state: dict) -> None:
        if "loss_scaler" in state:          # a checkpoint saved by an fp16 run (else: start afresh)
            saved = state["loss_scaler"]
            s = self.scaler
            s.scale_value, s.clean_steps, s.history = saved["scale"], saved["clean_steps"], list(saved["history"])


@dataclass(frozen=True, eq=False)
class MasterWeights(Autocast):
    """Lesson 14: the parameters themselves stored in bf16, and an fp32 *master* copy that the optimizer
    updates (Micikevicius et al. 2018, section 3.1; Megatron-LM and DeepSpeed's bf16 training).

    ``Autocast`` keeps the parameters in fp32 and casts each weight to 16 bits for its matrix product:
    it halves the activations, not the weights (and keeps the 16-bit copy of every weight for backward).
    Here the model *is* 16-bit: its parameters and gradients take 2 bytes each, the all-reduce carries
    2 bytes a number, and the 4-byte master copy lives with the optimizer's state (which ZeRO shards):
    with Adam, 2 + 2 + 4 + 8 = 16 bytes a parameter (the ZeRO paper's K = 12).  The update itself is
    taken in fp32: each gradient is widened onto its master, the optimizer steps the masters, and each
    parameter is rounded from its master, so updates smaller than a bf16 step add up in the master
    instead of rounding away.  The fp32 gradients live only during the update."""

    name: str = "bf16_master"
    pairs: list = field(default_factory=list)     # (the model's bf16 parameter, its fp32 master)

    def prepare(self, model) -> list:
        """Store the model (a module, or the parameters a rank trains) in ``dtype``; return the fp32 masters,
        made before rounding (the exact start)."""
        if self.pairs:
            raise ValueError("a MasterWeights policy prepares one model: make a new policy for another")
        for p in (model.parameters() if isinstance(model, torch.nn.Module) else model):
            master = p.detach().clone().float()
            p.data = p.data.to(self.dtype)
            self.pairs.append((p, master))
        return [master for _, master in self.pairs]

    def step(self, optimizer) -> bool:
        for p, master in self.pairs:
            master.grad = None if p.grad is None else p.grad.float()
        optimizer.step()
        for p, master in self.pairs:
            p.data.copy_(master)          # rounded to bf16: the numbers the next forward uses
            master.grad = None
        return True

    def state_dict(self) -> dict:
        """A checkpoint must keep the masters: the optimizer's own state holds its moments, not the
        numbers it updates, and the bf16 parameters have lost the low bits."""
        return {"masters": [master.detach().clone() for _, master in self.pairs]}

    def load_state_dict(self, state: dict) -> None:
        if "masters" in state:
            for (_, master), saved in zip(self.pairs, state["masters"]):
                master.data.copy_(saved)


POLICIES = {"fp32": lambda device_type: FP32,
            "bf16": lambda device_type: Autocast(device_type=device_type),
            "fp16": lambda device_type: ScaledAutocast(device_type=device_type),
            # fp16 with nothing to lift small gradients: what loss scaling is for (a run warns first, measured)
            "fp16_unscaled": lambda device_type: Autocast(name="fp16_unscaled", dtype=torch.float16,
                                                          device_type=device_type),
            "bf16_master": lambda device_type: MasterWeights(device_type=device_type)}


def agree_on_overflow(policy: Precision, worker) -> None:
    """Lesson 14: ranks that each hold part of the gradients (ZeRO's shards; the tensor, context and expert
    axes' own parameters) must skip the same updates: fp16's scaler decides "finite" with one all-reduce
    over every rank, so one rank's overflow skips the step everywhere (PyTorch's ``ShardedGradScaler`` does
    the same).  Other policies have no verdict to share."""
    if isinstance(policy, ScaledAutocast):
        object.__setattr__(policy, "agree",      # (the policy is frozen: this run's own, set once at its start)
                           lambda finite: bool(worker.all_reduce(torch.tensor([0.0 if finite else 1.0]))[0] == 0))


def check(name: str, dtype: str = "float32") -> None:
    """Lesson 14: before any process starts: ``name`` must be a policy, and mixed precision keeps fp32
    master weights, so the model must be built in float32."""
    if name not in POLICIES:
        raise ValueError(f"precision must be one of {sorted(POLICIES)}, got {name!r}")
    if name != "fp32" and dtype != "float32":
        raise ValueError(f"precision={name!r} computes in 16 bits on fp32 master weights: it needs "
                         f"dtype='float32', got {dtype!r}")


def named(name: str) -> dict:
    """Lesson 14: what a record's config says of the precision: nothing for fp32 (every run before
    lesson 14 was fp32, and its records stay as they were), ``{"precision": name}`` otherwise."""
    return {} if name == "fp32" else {"precision": name}


def policy(name: str, device_type: str = "cpu", **scaler) -> Precision:
    """Lesson 14: the precision policy called ``name`` (``POLICIES``); ``scaler``: ``LossScaler``'s settings
    (fp16 only: bf16 and fp32 need none, and a setting nothing reads is refused)."""
    check(name)
    if scaler and name != "fp16":
        raise ValueError(f"{name} has no loss scaler: {sorted(scaler)} would be ignored (only fp16 scales)")
    if scaler:
        return ScaledAutocast(device_type=device_type, scaler=LossScaler(**scaler))
    return POLICIES[name](device_type)


def unscaled_warning(grads) -> str | None:
    """Lesson 14: what fp16 without loss scaling would do to ``grads`` (a run's first gradients, measured
    before it starts), as a warning's text; None when every value is within fp16's normal range."""
    h = exponent_histogram(grads)
    if not (h["zero_in_fp16"] or h["subnormal_in_fp16"] or h["overflow_in_fp16"]):
        return None
    return (f"precision='fp16_unscaled': measured on this run's first mini-batch before it starts, "
            f"{h['zero_in_fp16']:.2%} of the {h['count']:,} nonzero gradient values are below half of fp16's smallest "
            f"subnormal (2^-24) and become 0, {h['subnormal_in_fp16']:.2%} are subnormal (fewer significant bits), "
            f"{h['overflow_in_fp16']:.2%} overflow (later steps' gradients are not measured here). precision='fp16' "
            "scales the loss to lift them (dynamic loss scaling)")


def exponent_histogram(grads) -> dict:
    """Lesson 14: where gradients' magnitudes fall, as powers of two, and the share fp16 cannot hold:
    ``{"exponents": {e: count}, "zero_in_fp16": share below half the smallest subnormal (rounds to 0),
    "subnormal_in_fp16": share between that and the smallest normal, "overflow_in_fp16": share above
    the largest, "count": values, "fp16": the three limits}`` (exact zeros are left out: they are zero in
    every format; the limits travel with the counts, so a picture of them needs nothing else)."""
    values = torch.cat([g.detach().flatten().float().abs() for g in grads])
    values = values[values > 0]
    n = values.numel()
    limits = {"zero_below": FP16_SMALLEST / 2, "smallest_normal": FP16_SMALLEST_NORMAL, "largest": FP16_LARGEST}
    if n == 0:
        return {"exponents": {}, "zero_in_fp16": 0.0, "subnormal_in_fp16": 0.0, "overflow_in_fp16": 0.0, "count": 0,
                "fp16": limits}
    exps = torch.floor(torch.log2(values)).to(torch.int64)
    found, counts = torch.unique(exps, return_counts=True)
    return {"exponents": dict(zip(found.tolist(), counts.tolist())),
            "zero_in_fp16": float((values < FP16_SMALLEST / 2).sum()) / n,
            "subnormal_in_fp16": float(((values >= FP16_SMALLEST / 2) & (values < FP16_SMALLEST_NORMAL)).sum()) / n,
            "overflow_in_fp16": float((values > FP16_LARGEST).sum()) / n,
            "count": n, "fp16": limits}

