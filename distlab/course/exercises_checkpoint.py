"""Lesson 10's build-it exercise: what a checkpoint must hold for a restarted job to go on exactly.

Introduced in lesson 10.  The learner writes ``save(model, optimizer, step) -> dict``: the state
a restarted process resumes from.  ``checkpoint_task`` runs, on each of 2 real ranks, inside the
library's data-parallel loop (lesson 01's gradient average, SGD with momentum):

1. the uninterrupted run, ``STEPS`` steps, its parameters kept after every step: the reference;
2. the same run stopped after ``AT`` steps, the learner's ``save`` called, and what it returned
   written to bytes and read back the way a checkpoint is (``torch.save``, then ``torch.load`` with
   ``weights_only=True``: tensors, numbers, strings and containers, never code);
3. a *restarted* rank: a new model with its own random start and a new optimizer (empty momentum),
   given the checkpoint by the library's loader (``resume``: ``state["model"]`` into
   ``model.load_state_dict``, ``state["optimizer"]`` into ``optimizer.load_state_dict``, then the
   steps from ``state["step"]`` on), trained to ``STEPS``.

The checker compares the restarted run with the uninterrupted one step by step
(``distlab.compare``) and names what the checkpoint lacked: the parameters, the optimizer's state
(momentum: the parameters come back, yet the first step after the restart moves them differently),
or the step (the restart replays or skips mini-batches).
"""
from __future__ import annotations

import io

import torch

from ..stepwise import compare, snapshot
from ..train.reduce import GradientReducer
from . import build
from .exercises_build import TracedAverage, begin, train_for

EXERCISE = "Build it: what a checkpoint holds"
SETTINGS = dict(model="mlp", width=16, lr=0.1, optimizer="momentum", seed=0, dtype="float32")
BATCH, STEPS, AT = 32, 8, 4          # per rank; the save comes after step AT of STEPS


class Traced(TracedAverage):
    """Lesson 10: lesson 01's data parallelism, keeping the parameters after every update."""

    def prepare(self, run):
        """No broadcast of rank 0's parameters (the library's does one): each rank's restart must stand on
        its own checkpoint.  The ranks start alike anyway, from the same seed."""
        self.reducer = GradientReducer(self.worker, dict(run.model.named_parameters()), method=self.method)


def resume(state: dict, model, optimizer) -> int:
    """Lesson 10: the library's loader for the exercise: what the checkpoint holds goes back in place;
    the step to go on from (0 when the checkpoint does not say)."""
    if "model" in state:
        model.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    return int(state.get("step", 0))


def _train(worker, steps: int, first: int = 0, run=None):
    """``steps`` steps of this rank's run from step ``first``: the run, and its parameters after every step."""
    strategy = Traced(worker)
    run, _ = train_for(worker, strategy, steps, settings=SETTINGS, batch=BATCH, first=first, run=run)
    return run, strategy.trace


def checkpoint_task(worker, fn, steps: int = STEPS, at: int = AT) -> dict:
    """Lesson 10 (on each rank): the uninterrupted run, then the learner's save, a restart and the rest."""
    whole = _train(worker, steps)[1]
    run, before = _train(worker, at)
    state = fn(run.model, run.optimizer, at)
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
    except Exception as err:              # the learner's checkpoint: say what a file could not hold
        return dict(unloadable=f"{type(err).__name__}: {str(err).split('.')[0][:200]}")
    if not isinstance(state, dict):
        return dict(unloadable=f"save returned a {type(state).__name__}, not a dict")
    restarted = begin(worker, steps, settings=SETTINGS, batch=BATCH)
    with torch.no_grad():                 # a new process: its own random start, then the checkpoint
        g = torch.Generator().manual_seed(1000 + worker.rank)
        for p in restarted.model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    first = resume(state, restarted.model, restarted.optimizer)
    loaded = snapshot(restarted.model)
    after = _train(worker, steps - first, first, run=restarted)[1] if 0 <= first < steps else []
    return dict(rank=worker.rank, whole=whole, saved=before[-1], loaded=loaded, first=first, after=after,
                keys=sorted(state))


def checkpoint_contents(fn, *, world_size: int = 2, steps: int = STEPS, at: int = AT) -> bool | None:
    """Lesson 10: check the learner's ``fn(model, optimizer, step) -> dict`` by a real restart on real ranks."""
    records = build.attempt(EXERCISE, fn, "distlab.course.exercises_checkpoint:checkpoint_task",
                            world_size=world_size, steps=steps, at=at)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    for r in sorted(records, key=lambda r: r.get("rank", 0)):
        why = _why(r, steps, at)
        if why:
            print(f"{EXERCISE}: not quite. {why}")
            return False
    print(f"{EXERCISE}: correct. On {world_size} real ranks, each restarted from its own random start with an "
          f"empty optimizer and given your checkpoint, steps {at + 1} to {steps} came out as in the run that "
          f"never stopped (keys kept: {', '.join(records[0]['keys'])}).")
    return True


def _why(r: dict, steps: int, at: int) -> str | None:
    """What one rank's restart shows the checkpoint lacked, or None."""
    if "unloadable" in r:
        return (f"a checkpoint file could not hold what save returned ({r['unloadable']}). Keep tensors, "
                "numbers and containers: model.state_dict() and optimizer.state_dict(), not the objects")
    rank, first = r["rank"], r["first"]
    loaded = compare(r["loaded"], r["saved"], names=("loaded", "saved"))
    if not loaded.same:
        return (f"rank {rank}: after the restart the parameters are not the ones saved ({loaded}). "
                "Save model.state_dict() under 'model'")
    if first != at:
        return (f"rank {rank}: the restart went on from step {first}, but the checkpoint was taken after step "
                f"{at}: {'it would train mini-batches again' if first < at else 'it would skip mini-batches'}. "
                "Save the step under 'step'")
    report = compare(r["after"], r["whole"][at:], names=(f"rank {rank} after the restart",
                                                         "the run that never stopped"))
    if not report.same:
        first_after = " (the first after the restart)" if not report.step else ""
        return (f"rank {rank}: the parameters came back, yet step {at + 1 + (report.step or 0)}{first_after} "
                f"moved {report.name} differently from the run that never stopped, by up to "
                f"{report.difference:.3g}: SGD with momentum keeps a velocity per parameter, and the restarted "
                "optimizer started it at zero. Save optimizer.state_dict() under 'optimizer'")
    return None
