"""Does my parallel run compute the same thing?  Two runs, step by step (lesson 01; every build-it exercise).

It is the question learners ask most of a parallel training they wrote, and "the loss looks about
the same" does not answer it: a gradient summed where it should be averaged, a shard added twice or
a micro-batch skipped all train, and all train a little differently.  ``compare`` walks two runs
step by step and names the first step and parameter where they part, by how much, where inside the
tensor, and, when the two differ by a constant factor, the factor (2.00x on 2 ranks is a sum where
a mean was due).  The exercises' checkers use it on the learner's function run on real ranks against
one process or the library; learners can use it on their own code:

    >>> report = distlab.compare(my_steps, reference_steps)     # lists of {name: tensor}, one a step
    >>> print(report)

A run is a list of ``{name: tensor}``, one a step (parameters after each update, or gradients), or
one such dict (the final parameters), or a ``RankRecord`` (its final ``params``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

TOLERANCE = 1e-5      # float32 sums in another order differ by ~1e-7; a real mistake by far more


def snapshot(params) -> dict[str, torch.Tensor]:
    """Lesson 01: a step's parameters (a module's, or a ``{name: tensor}``), copied off the graph."""
    items = params.named_parameters() if isinstance(params, torch.nn.Module) else params.items()
    return {name: p.detach().to("cpu", copy=True) for name, p in items}


@dataclass
class Comparison:
    """Lesson 01: where two runs part.  ``step`` and ``name`` are None when they agree throughout."""
    names: tuple[str, str]
    steps: int
    tolerance: float
    step: int | None = None
    name: str | None = None
    difference: float = 0.0          # at the parting step and parameter (or the largest, if they agree)
    largest_at: str = ""             # where the largest agreeing difference was
    index: tuple | None = None
    factor: float | None = None      # mine / reference, when one constant factor explains the gap
    others: tuple[str, ...] = ()     # other parameters already apart at that step
    problem: str = ""                # names or shapes that do not match: nothing else was compared

    @property
    def same(self) -> bool:
        return self.step is None and not self.problem

    def __str__(self) -> str:
        mine, ref = self.names
        if self.problem:
            return self.problem
        if self.same:
            return (f"{mine} and {ref} agree within {self.tolerance:g} at every one of {self.steps} step(s) "
                    f"(largest difference {self.difference:.1e}{self.largest_at})")
        where = f"at step {self.step}, parameter {self.name}" if self.steps > 1 else f"at {self.name}"
        text = (f"{mine} and {ref} part {where}: largest difference "
                f"{self.difference:.3g} at index {list(self.index)} (tolerance {self.tolerance:g})")
        if self.step:
            text += f"; steps 0 to {self.step - 1} agree"
        if self.factor is not None:
            text += f". {mine} is {self.factor:.3g}x {ref} there: a constant factor"
            if self.factor > 1.5 and abs(self.factor - round(self.factor)) < 1e-3:
                text += ", as a sum where a mean is due"
        if self.others:
            text += f". Also apart at that step: {', '.join(self.others)}"
        return text


def _steps(run) -> list[dict[str, torch.Tensor]]:
    if hasattr(run, "params") and not isinstance(run, dict):
        return [run.params]
    if isinstance(run, dict):
        return [run]
    return list(run)


def _factor(mine: torch.Tensor, ref: torch.Tensor) -> float | None:
    """The constant c with mine = c * ref, if one explains the whole tensor."""
    big = ref.abs() > 1e-6 * ref.abs().max()
    if big.sum() < 2:
        return None
    ratios = mine[big] / ref[big]
    c = ratios.median().item()
    if abs(c - 1) < 1e-3 or not torch.allclose(mine, c * ref, rtol=1e-3, atol=1e-6 * ref.abs().max().item()):
        return None
    return c


def compare(mine, reference, *, names=("yours", "the reference"), tolerance: float = TOLERANCE) -> Comparison:
    """Lesson 01: walk two runs step by step; report the first step and parameter where they part."""
    a, b = _steps(mine), _steps(reference)
    out = Comparison(tuple(names), min(len(a), len(b)), tolerance)
    if len(a) != len(b):
        out.problem = f"{names[0]} has {len(a)} step(s) and {names[1]} {len(b)}: compare runs of the same length"
        return out
    largest = (0.0, "")
    for step, (x, y) in enumerate(zip(a, b)):
        if x.keys() != y.keys():
            only_x, only_y = sorted(set(x) - set(y)), sorted(set(y) - set(x))
            out.problem = (f"step {step}: different parameter names (only in {names[0]}: {only_x}; only in "
                           f"{names[1]}: {only_y})")
            return out
        apart = []
        for name in y:
            p, q = x[name].detach().double().cpu(), y[name].detach().double().cpu()
            if p.shape != q.shape:
                out.problem = (f"step {step}, {name}: shape {tuple(p.shape)} in {names[0]} and {tuple(q.shape)} "
                               f"in {names[1]} (a rank's shard? gather the pieces into one tensor first)")
                return out
            gap = (p - q).abs()
            worst = gap.max().item() if gap.numel() else 0.0
            if worst > tolerance or worst != worst:
                apart.append((name, worst, p, q, gap))
            elif worst > largest[0]:
                largest = (worst, f" in {name} at step {step}")
        if apart:
            name, worst, p, q, gap = apart[0]
            out.step, out.name, out.difference = step, name, worst
            out.index = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
            out.factor = _factor(p, q)
            out.others = tuple(n for n, *_ in apart[1:])
            return out
    out.difference, out.largest_at = largest
    return out
