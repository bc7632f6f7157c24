"""The one micro-step: forward, the model's own loss, backward.  Every gradient in distlab is made here.

Introduced in lesson 01 (the loop's step), used by lesson 06's pipeline stages and lesson 13's experts.
Whatever the parallelism, computing a gradient is the same three moves: run the model forward, ask the
*model* for its loss (a digit classifier's cross-entropy, the line reader's two-part loss: the loop never
names one), run backward.  Written once, here, a lever that changes how a step computes is one change in
one place: mixed precision (an autocast context and a loss scaler) fills the ``Precision`` slot; a layer
that adds a loss of its own (the experts' balancing losses) sets ``extra_loss`` and is found here.

=========================  =========================================================================
``micro_step``             forward, loss (+ extra losses), backward of one (micro-)batch: a rank's step,
                           one of k accumulated micro-batches (``share=k``), one process
``forward_loss``           the forward half alone: a pipeline's last stage ends its forward with it
``stage_backward``         a pipeline stage that does not compute the loss: backward from the gradient
                           of its output that the next stage sent back, plus its own layers' extra losses
``input_backward``,        lesson 15: the same backward in two halves, B (the gradient of the stage's input,
``weight_backward``        and of each piece's output on the way) and W (the parameters', later), from what
                           ``piece_outputs`` kept in the forward
``make_optimizer``         every optimizer distlab builds (what it keeps per parameter is what ZeRO shards)
=========================  =========================================================================

Only two kinds of training own their whole step and do not come here: DeepSpeed (``engine.backward``)
and PyTorch's pipelining schedules (``schedule.step``); torchtitan's trainer has the same two exceptions.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Precision:
    """Lesson 01: how a micro-step computes: here fp32 as built (no autocast, no loss scaling).  The slot
    the memory levers fill (lesson 14): ``prepare(model)`` what the optimizer updates, ``autocast()`` the
    context forward runs in, ``scale(loss)`` what backward starts from (a loss scaler multiplies it),
    ``step(optimizer)`` the update (a loss scaler unscales the gradients first, and skips an update whose
    gradients overflowed)."""

    name: str = "fp32"

    def prepare(self, model) -> list:
        """What the optimizer updates (lesson 14): the parameters of ``model`` (a module, or the parameters a
        rank trains) themselves, unless the precision keeps them in 16 bits and hands the optimizer an fp32
        master copy instead."""
        return list(model.parameters() if isinstance(model, nn.Module) else model)

    def autocast(self):
        return nullcontext()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def step(self, optimizer) -> bool:
        """The update; True when it was taken (a loss scaler skips one whose gradients overflowed)."""
        optimizer.step()
        return True

    def trace(self) -> list:
        """What the record keeps of this precision's updates (a loss scaler: its scale, step by step)."""
        return []

    def state_dict(self) -> dict:
        """What a checkpoint keeps of this precision (a loss scaler's state); nothing for fp32."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


FP32 = Precision()


def extra_losses(module: nn.Module):
    """Lesson 13: the losses ``module``'s layers add to the task's (the experts' balancing losses), summed:
    every submodule with an ``extra_loss`` from its latest forward.  0 for a model without any."""
    found = [m.extra_loss for m in module.modules() if getattr(m, "extra_loss", None) is not None]
    return sum(found) if found else 0.0


def forward_loss(model: nn.Module, x, y, *, net: nn.Module | None = None, share: int = 1,
                 precision: Precision = FP32, loss=None):
    """Lesson 01: ``net(x)`` (default: the model; DDP's wrapper around it), the model's loss on it (``loss``:
    the function, when ``model`` is a pipeline stage's part of the model) plus the extra losses of the
    model's layers, divided by ``share`` (k micro-batches that add up in ``.grad`` give the gradient of
    their mean).  Returns ``(total, loss, accuracy)``: the tensor backward starts from, and the task's loss
    and accuracy for the record."""
    with precision.autocast():
        out = (net or model)(x)
        loss, accuracy = (loss or model.loss)(out, y)
        extra = extra_losses(model)
        total = loss + extra if isinstance(extra, torch.Tensor) else loss
        if share != 1:
            total = total / share
    return total, loss.item(), accuracy


def backward(total: torch.Tensor, precision: Precision = FP32) -> None:
    """Lesson 01: gradients of ``total`` added into every parameter's ``.grad`` (through the precision's
    loss scaler, when it has one)."""
    precision.scale(total).backward()


def micro_step(model: nn.Module, x, y, *, net: nn.Module | None = None, share: int = 1,
               precision: Precision = FP32) -> tuple[float, float]:
    """Lesson 01: one (micro-)batch's forward, loss and backward; returns its loss and accuracy.
    ``share=k`` when k micro-batches add up in ``.grad`` before one update (their mean's gradient)."""
    total, loss, accuracy = forward_loss(model, x, y, net=net, share=share, precision=precision)
    backward(total, precision)
    return loss, accuracy


def stage_backward(out: torch.Tensor, grad: torch.Tensor, extra=None, share: int = 1,
                   precision: Precision = FP32) -> None:
    """Lesson 06: a pipeline stage's backward: from ``grad``, the gradient of its output ``out`` that the
    next stage sent back (already divided there), plus ``extra``, the losses its layers added in that
    micro-batch's forward (``extra_losses``, taken then: by now they may hold a later micro-batch's),
    divided by ``share``."""
    if isinstance(extra, torch.Tensor):
        torch.autograd.backward([out, precision.scale(extra / share)], [grad, None])
    else:
        out.backward(grad)


def _grad_tensors(out) -> list[torch.Tensor]:
    """The tensors in a piece's output (one, or a tuple: the line reader's head gives two) that gradients reach."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [t for t in outs if isinstance(t, torch.Tensor) and t.requires_grad]


@contextmanager
def piece_outputs(part: nn.Module):
    """Lesson 15: while ``part`` (a pipeline stage: a run of pieces) runs forward, keep ``(piece, its output
    tensors, its extra losses)`` for each of its pieces that hold parameters: what ``weight_backward`` needs."""
    kept: list = []
    pieces = [c for c in part.children() if any(True for _ in c.parameters())] or [part]
    hooks = [c.register_forward_hook(lambda piece, args, out: kept.append((piece, _grad_tensors(out),
                                                                            extra_losses(piece))))
             for c in pieces]
    try:
        yield kept
    finally:
        for hook in hooks:
            hook.remove()


def input_backward(out: torch.Tensor, grad, inp, kept: list, extra=None, share: int = 1,
                   precision: Precision = FP32):
    """Lesson 15: B, the first half of a split backward: the gradient of the stage's input ``inp`` (None on
    the first stage), which the previous stage is waiting for, and of each kept piece's outputs (free: the
    path to the input passes through them).  Nothing is added to any ``.grad`` yet.  ``out``, ``grad`` and
    ``extra`` are ``stage_backward``'s (on the last stage ``out`` is the loss and ``grad`` None).  Returns
    the input's gradient and what ``weight_backward`` needs: ``(piece, outputs, their gradients, extra)``."""
    outs, seeds = [out if grad is not None else precision.scale(out)], [grad]
    if isinstance(extra, torch.Tensor):
        outs, seeds = outs + [precision.scale(extra / share)], seeds + [None]
    wanted = [z for _, zs, _ in kept for z in zs] + ([inp] if inp is not None and inp.requires_grad else [])
    got = list(torch.autograd.grad(outs, wanted, seeds, retain_graph=True, allow_unused=True))
    pending = []
    for piece, zs, e in kept:
        pending.append((piece, zs, got[:len(zs)], e))
        del got[:len(zs)]
    return (got[0] if got else None), pending


def weight_backward(pending: list, share: int = 1, precision: Precision = FP32) -> None:
    """Lesson 15: W, the second half: each piece's parameters' gradients from the gradients of its outputs
    that B found, added into ``.grad`` as the fused backward adds them.  Only the piece's own operations run
    again (nothing is recomputed across pieces), so B + W costs what one backward does when the pieces are
    single layers, as distlab's MLP's are; a piece with layers inside (a transformer block) recomputes the
    gradients inside it.  A piece's extra loss (experts) reaches its parameters here, once: the part of it
    that flows through earlier pieces' outputs was in B's gradients already."""
    for piece, zs, gs, e in pending:
        params = [q for q in piece.parameters() if q.requires_grad]
        outs, seeds = [z for z, g in zip(zs, gs) if g is not None], [g for g in gs if g is not None]
        if isinstance(e, torch.Tensor) and e.requires_grad:
            outs, seeds = outs + [precision.scale(e / share)], seeds + [None]
        if not outs or not params:
            continue
        for q, dq in zip(params, torch.autograd.grad(outs, params, seeds, retain_graph=True, allow_unused=True)):
            if dq is not None:
                q.grad = dq if q.grad is None else q.grad.add_(dq)


OPTIMIZERS = {   # lesson 08: what an optimizer keeps per parameter is what ZeRO shards
    "sgd": lambda params, lr, **kw: torch.optim.SGD(params, lr=lr, **kw),                    # nothing
    "momentum": lambda params, lr, **kw: torch.optim.SGD(params, lr=lr, momentum=0.9, **kw),  # a velocity
    "adam": lambda params, lr, **kw: torch.optim.Adam(params, lr=lr, **kw),                  # two moments
}


def check_optimizer(name: str) -> None:
    """Lesson 08: ``name`` must be one of ``OPTIMIZERS``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {name!r}")


def make_optimizer(name: str, params, lr: float, *, foreach: bool | None = None) -> torch.optim.Optimizer:
    """Lesson 08: the optimizer called ``name`` over ``params``.  ``foreach=False`` when the parameters mix
    PyTorch's DTensors with plain tensors (lesson 12's ``parallelize_module``), which the fused loops refuse."""
    check_optimizer(name)
    return OPTIMIZERS[name](params, lr, **({} if foreach is None else {"foreach": foreach}))
