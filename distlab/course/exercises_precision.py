"""Lesson 14's build-it exercise: a dynamic loss scaler, written by the learner, trained with on real ranks.

Why loss scaling exists: fp16 has 5 exponent bits, so its smallest subnormal number is 2^-24 (about
6e-8) and its largest 65504.  Many gradients of a real network are smaller than 2^-24, and computed in
fp16 inside backward they round to zero.  Micikevicius et al. 2018 ("Mixed precision training", section
3.2) multiply the loss by a scale S before backward: by the chain rule every gradient is S times larger,
lifted into fp16's range; before the update each is divided by S again, in fp32.  Too large an S
overflows (an inf or a nan), so the scale is *dynamic*: an update whose gradients overflowed is skipped
and S halved; after ``GROWTH`` clean updates in a row S is doubled, to find the largest S that fits.

The learner writes ``scaler_step(optimizer, scale, clean) -> (new_scale, new_clean)`` (an answer is in
course/solutions_text/14_fitting_more.py), called after backward of ``loss * scale``: divide every
gradient by ``scale``; if all are finite, step the optimizer; return ``(scale * 0.5, 0)`` on an
overflow, else ``(scale, clean + 1)``, or ``(scale * 2, 0)`` when ``clean + 1`` reaches ``GROWTH``
(``mixed.LossScaler``'s rule).

``precision_task`` trains, on each of 2 real ranks, lesson 01's data-parallel MLP in fp16 (float32
weights, forward and backward under fp16 autocast) through the library's loop, twice: with the library's
``LossScaler(init_scale=INIT_SCALE, growth_interval=GROWTH)`` and with the learner's function as the
update.  ``INIT_SCALE`` overflows fp16 at once, so the first updates are skipped while the scale halves,
and within ``STEPS`` the scale grows again (the checker makes sure the library's run shows both).

The checker compares the two runs, the traces first (the scale at each update, and whether it was
skipped), then the parameters after every step (``distlab.compare``).  To say *why* they part, each call
of the learner's function is also judged on its own inputs (the gradients, scale and count it was given)
against the rule, and the hint names the first call that broke it: gradients left scaled, a step on an
overflow, a scale not halved, one that never grows or grows at the wrong count, a return that is not a
pair.  Testing for finite gradients before dividing them gives the same verdict (an inf stays an inf),
and is accepted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..precision.mixed import Autocast, LossScaler, ScaledAutocast
from ..stepwise import TOLERANCE, compare
from ..train.loop import start
from . import build
from .exercises_build import TracedAverage, train_for

EXERCISE = "Build it: a loss scaler"
SETTINGS = dict(model="mlp", width=16, lr=0.1, optimizer="momentum", seed=0, dtype="float32")
BATCH = 32                 # per rank
GROWTH = 4                 # clean updates in a row before the scale doubles (the lesson prints it)
INIT_SCALE = 2.0 ** 24     # the loss times 2^24 overflows fp16 (65504) inside backward at once
STEPS = 16
TASK = "distlab.course.exercises_precision:precision_task"


@dataclass(frozen=True, eq=False)
class YourScaler(Autocast):
    """Lesson 14: fp16 under autocast, the loss multiplied by the learner's scale, and the learner's
    ``scaler_step`` as the update.  ``history`` keeps ``(scale, skipped)`` per update, as
    ``LossScaler.history`` does (skipped: the function did not call ``optimizer.step()``); ``calls`` keeps
    what each call was given and what it did, for the hint."""

    name: str = "fp16"
    dtype: torch.dtype = torch.float16
    fn: object = None
    now: dict = field(default_factory=lambda: {"scale": INIT_SCALE, "clean": 0})
    names: dict = field(default_factory=dict)          # id(parameter) -> its name
    history: list = field(default_factory=list)
    calls: list = field(default_factory=list)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.now["scale"]

    def step(self, optimizer) -> bool:
        scale, clean = self.now["scale"], self.now["clean"]
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        given = [p.grad.detach().clone() for p in params]
        finite = all(bool(torch.isfinite(g / scale).all()) for g in given)   # the rule's verdict
        stepped = []
        hook = optimizer.register_step_post_hook(lambda *_: stepped.append(1))
        try:
            out = self.fn(optimizer, scale, clean)
        finally:
            hook.remove()
        call = dict(scale=scale, clean=clean, finite=finite, steps=len(stepped), wrong=_not_a_pair(out),
                    returned=None, unscaled=None)
        if finite and stepped:
            call["unscaled"] = self._unscaled(params, given, scale)
        if call["wrong"] is None:
            call["returned"] = tuple(_number(x) for x in out)
            self.now.update(scale=call["returned"][0], clean=int(call["returned"][1]))
        self.history.append((scale, not stepped))
        self.calls.append(call)
        return bool(stepped)

    def _unscaled(self, params, given, scale) -> dict | None:
        """Where the gradients the optimizer stepped with differ from the given ones over ``scale``."""
        def name(i, p):
            return self.names.get(id(p), f"parameter {i}")
        used = {name(i, p): torch.zeros_like(g) if p.grad is None else p.grad.detach()
                for i, (p, g) in enumerate(zip(params, given))}
        want = {name(i, p): g / scale for i, (p, g) in enumerate(zip(params, given))}
        largest = max([w.abs().max().item() for w in want.values()] + [1e-30])
        report = compare(used, want, tolerance=TOLERANCE * largest)
        return None if report.same else dict(name=report.name, factor=report.factor)

    def trace(self) -> list:
        return list(self.history)


def _number(x) -> float | None:
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        x = x.item()
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _not_a_pair(out) -> str | None:
    """Lesson 14: what is wrong with what the learner's function returned; None for a pair of numbers, the
    second a whole one."""
    shown = repr(out) if len(repr(out)) <= 60 else repr(out)[:57] + "..."
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return f"a {type(out).__name__} ({shown})"
    scale, clean = (_number(x) for x in out)
    if scale is None or clean is None or not math.isfinite(clean) or clean != int(clean):
        return f"{shown}, whose parts are not a number and a whole number"
    return None


def precision_task(worker, fn, steps: int = STEPS, init_scale: float = INIT_SCALE) -> dict:
    """Lesson 14 (on each rank): fp16 data parallelism with the library's loss scaler, then with the
    learner's ``scaler_step``: each run's (scale, skipped) trace and parameters after every step, and
    what each call of the learner's function was given and did."""
    device = worker.device.type
    library = ScaledAutocast(device_type=device, scaler=LossScaler(init_scale=init_scale, growth_interval=GROWTH))
    yours = YourScaler(device_type=device, fn=fn, now={"scale": float(init_scale), "clean": 0})
    out = dict(rank=worker.rank)
    for who, precision in (("library", library), ("yours", yours)):
        run = start(worker, method="by_hand", precision=precision,
                    config=dict(SETTINGS, batch_size=BATCH, steps=steps, precision="fp16"), **SETTINGS)
        yours.names.update({id(p): n for n, p in run.model.named_parameters()})
        strategy = TracedAverage(worker)   # the all-reduced, still scaled gradients, then the precision's update
        _, record = train_for(worker, strategy, steps, settings=SETTINGS, batch=BATCH, run=run)
        out[who] = dict(trace=record.loss_scale, params=strategy.trace)
    out["calls"] = yours.calls
    return out


def loss_scaler(fn, *, world_size: int = 2, steps: int = STEPS, init_scale: float = INIT_SCALE) -> bool | None:
    """Lesson 14: check the learner's ``scaler_step(optimizer, scale, clean)`` in fp16 training on real ranks
    against the library's ``LossScaler``: the scale and skips at every update, then the parameters."""
    records = build.attempt(EXERCISE, fn, TASK, world_size=world_size, steps=steps, init_scale=init_scale)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    trace = records[0]["library"]["trace"]
    skipped = [s for s, (_, skip) in enumerate(trace) if skip]
    grew = [s for s in range(1, len(trace)) if trace[s][0] > trace[s - 1][0]]
    if not skipped or not grew:
        raise AssertionError(f"the library's run shows {len(skipped)} skipped updates and {len(grew)} growths: "
                             "the check needs both to tell a right scaler from a wrong one")
    for r in sorted(records, key=lambda r: r["rank"]):
        why = _why(r)
        if why:
            print(f"{EXERCISE}: not quite. Rank {r['rank']}: {why}")
            return False
    print(f"{EXERCISE}: correct. On {world_size} real ranks training in fp16, your scaler skipped the "
          f"{len(skipped)} updates whose gradients overflowed (steps {', '.join(map(str, skipped))}), halving the "
          f"scale each time, and doubled it after {GROWTH} clean updates in a row (it grew at step "
          f"{', '.join(map(str, grew))}), as the "
          f"library's LossScaler did. Scale per step ({len(trace)} steps, * skipped): {_scales(trace)}. Every "
          "step's parameters equal the library's, to rounding.")
    return True


def _p2(x: float) -> str:
    """A scale as a power of two when it is one."""
    e = math.log2(x) if x > 0 and math.isfinite(x) else None
    return f"2^{int(e)}" if e is not None and e == int(e) else f"{x:g}"


def _scales(trace) -> str:
    return " ".join(_p2(s) + ("*" if skip else "") for s, skip in trace)


def _why(r: dict) -> str | None:
    """What one rank's runs show: the first call of the learner's function that broke the rule, or where
    its run parts from the library's (the trace, then the parameters), or None."""
    broken = _broken_rule(r["calls"], r["yours"]["params"])
    if broken:
        return broken
    mine, library = r["yours"]["trace"], r["library"]["trace"]
    for s, (a, b) in enumerate(zip(mine, library)):
        if a != b:
            return (f"at step {s} your run's (scale, skipped) is ({_p2(a[0])}, {a[1]}) and the library's "
                    f"({_p2(b[0])}, {b[1]}).")
    report = compare(r["yours"]["params"], r["library"]["params"], names=("your run", "the library's"))
    if not report.same:
        return f"{report}. Your function must change nothing but the gradients (divided) and the parameters (one step)."
    return None


def _broken_rule(calls: list, params: list) -> str | None:
    """Lesson 14: the first call of the learner's function that did not do what the rule does with what it was
    given, named; ``params``: the parameters after each step.  Up to that call every return was right, so the
    count a call was given is the rule's own."""
    for s, c in enumerate(calls):
        scale, clean, finite = c["scale"], c["clean"], c["finite"]
        if c["steps"] and not finite:
            wrecked = not all(bool(torch.isfinite(t).all()) for t in params[s].values())
            return (f"at step {s} the gradients overflowed (scale {_p2(scale)}: an inf or a nan after dividing), "
                    "yet your function called optimizer.step(): it stepped on an overflow, and the parameters "
                    f"{'became inf or nan' if wrecked else 'moved where the library skipped the update'}. "
                    "When any gradient is not finite, return before optimizer.step().")
        if finite and not c["steps"]:
            return (f"at step {s} every gradient was finite (scale {_p2(scale)}), yet your function did not call "
                    "optimizer.step(): a clean update must be taken.")
        if c["steps"] > 1:
            return f"at step {s} your function called optimizer.step() {c['steps']} times: one update a step."
        if c["unscaled"]:
            u = c["unscaled"]
            if u["factor"] is not None and abs(u["factor"] / scale - 1) < 1e-3:
                return (f"at step {s} the gradients were not divided by the scale: the optimizer stepped with "
                        f"gradients {_p2(scale)} times too large ({u['name']} first). Divide every p.grad by "
                        "scale (p.grad.div_(scale)) before optimizer.step().")
            times = f"{u['factor']:.3g}x" if u["factor"] is not None else "not"
            return (f"at step {s} the gradients the optimizer stepped with are {times} the given ones divided by "
                    f"the scale {_p2(scale)} ({u['name']} first). Divide every p.grad by scale, once.")
        if c["wrong"]:
            return (f"at step {s} your function returned {c['wrong']}, not a pair (new_scale, new_clean). "
                    "End every path with `return new_scale, new_clean`.")
        got_scale, got_clean = c["returned"]
        if not finite:
            if got_scale == scale:
                left = sum(1 for later in calls[s:] if later["steps"] == 0)
                return (f"at step {s} the gradients overflowed and your function returned the same scale "
                        f"{_p2(scale)}: the scale was not halved, so the next step overflows again ({left} of "
                        f"the {len(calls) - s} updates from there on were skipped). Return scale * 0.5.")
            if got_scale != scale * 0.5:
                return (f"at step {s} the gradients overflowed: the scale goes from {_p2(scale)} to "
                        f"{_p2(scale * 0.5)} (scale * 0.5), and yours returned {_p2(got_scale)}.")
            if got_clean != 0:
                return (f"at step {s} the gradients overflowed and your function returned the count {got_clean:g}: "
                        "after an overflow the count of clean updates starts again at 0.")
            continue
        count = clean + 1
        grows = count == GROWTH
        if grows and got_scale == scale:
            later = next((t for t in range(s + 1, len(calls)) if calls[t]["scale"] > calls[t - 1]["scale"]), None)
            how = ("your scale never grows" if later is None else
                   f"yours doubled only after {calls[later - 1]['clean'] + 1} (step {later - 1})")
            return (f"at step {s}, the {GROWTH}th clean update in a row (GROWTH = {GROWTH}), the scale must double "
                    f"from {_p2(scale)} to {_p2(scale * 2)} and the count start again at 0; {how}. Without "
                    "growing, the scale stays as small as the worst overflow left it.")
        if not grows and got_scale == scale * 2:
            return (f"at step {s} your function doubled the scale after {count} clean update(s) in a row; it "
                    f"doubles after GROWTH = {GROWTH} (when clean + 1 reaches {GROWTH}).")
        if got_scale != (scale * 2 if grows else scale):
            return (f"at step {s} the gradients were finite (clean update {count} of {GROWTH}): the scale "
                    f"{'doubles to ' + _p2(scale * 2) if grows else 'stays ' + _p2(scale)}, and yours returned "
                    f"{_p2(got_scale)}.")
        if got_clean != (0 if grows else count):
            return (f"at step {s} your function returned the count {got_clean:g}, and the rule's is "
                    f"{0 if grows else count}: {'after growing it starts again at 0' if grows else 'clean + 1'}.")
    return None
