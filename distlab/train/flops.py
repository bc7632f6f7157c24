"""The floating-point operations of a real step, counted as PyTorch runs it (lesson 05's MFU reads them).

Introduced in lesson 05 (does distributing pay: a step's work against the machine's peak).  A step's FLOPs
are known exactly only from what actually ran on a rank: a pipeline stage's share, a tensor-parallel
slice, the tokens an expert kept.  ``CountFlops`` is a PyTorch dispatch mode: while it is on, every
operation PyTorch dispatches (forward and backward alike) passes through it, and each matrix product or
convolution adds its FLOPs by PyTorch's own formulas (``torch.utils.flop_counter``'s table: 2 per
multiply-add).  It is ``FlopCounterMode`` without its per-module bookkeeping, whose backward hooks
collide with the gradients PyTorch's own pipeline schedules take (``autograd.grad``).  The loop counts
the first step of a run (the shapes are the same in every step): ``StepRecord.flops``.
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry


class CountFlops(TorchDispatchMode):
    """Lesson 05: ``with CountFlops() as count: <a step>`` then ``count.total``: its FLOPs."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out
