"""Build-it exercises of lessons 01, 02 and 04: the learner writes the mechanism, real ranks run it.

Introduced in lesson 01.  Each checker takes the learner's function (typed in a notebook cell),
runs it on real ranks through ``build`` inside the library's own training loop (``train.loop``:
the learner's code replaces exactly one piece of a ``Strategy``), and compares what the ranks did
with one process or with the library's own piece, step by step, through ``distlab.compare``.  The
hint names the step, the parameter and, where one explains the gap, the factor.

* lesson 01, ``gradient_average``: after backward, make every rank's gradients the ranks' average
  (the reference: one process on the whole global batch);
* lesson 02, ``start_from_rank_0``: under Horovod, give every rank rank 0's parameters before the
  first step (each rank is first given a start of its own, as separately built copies would have);
* lesson 04, ``parameter_average``: local SGD's periodic average of the parameters (the reference:
  the library's ``LocalSGD`` in the same launch).
"""
from __future__ import annotations

import torch

from ..data import rank_batch
from ..data_parallel.data_parallel import train_single
from ..data_parallel.gradient_sync import AllReduceEachParameter
from ..data_parallel.local_sgd import LocalSGD
from ..stepwise import compare, snapshot
from ..train.loop import start, train_steps
from ..train.reduce import GradientReducer
from . import build

SETTINGS = dict(model="mlp", width=16, lr=0.5, seed=0, dtype="float32")
BATCH = 32             # per rank


def begin(worker, steps: int, *, settings: dict = SETTINGS, batch: int = BATCH):
    """Lesson 01: a build-it exercise's run on this rank: its data, its model from the seed, its optimizer."""
    return start(worker, method="by_hand", config=dict(settings, batch_size=batch, steps=steps), **settings)


def train_for(worker, strategy, steps: int, *, settings: dict = SETTINGS, batch: int = BATCH, first: int = 0,
              run=None, record_grads: bool = False):
    """Lesson 01: ``steps`` steps of the library's loop on this rank with ``strategy``, from step ``first``
    (the mini-batches are a function of the seed and the step), on ``run`` or a new one: (run, record).
    Every build-it checker that trains (lessons 01, 02, 04, 05, 10) trains through here."""
    run = run or begin(worker, steps, settings=settings, batch=batch)
    n, seed = run.data.n_train, settings["seed"]
    record = train_steps(run, strategy, steps,
                         lambda step: rank_batch(n, worker.rank, worker.world_size, batch, first + step, seed=seed),
                         record_grads_at=range(steps) if record_grads else ())
    return run, record


class TracedAverage(AllReduceEachParameter):
    """Lesson 01: the library's data parallelism (each gradient all-reduced), keeping the parameters after
    every update: what a checker compares step by step (lessons 10 and 14's checkers train through it)."""

    def __init__(self, worker):
        super().__init__(worker)
        self.trace = []

    def update(self, run, step):
        super().update(run, step)
        self.trace.append(snapshot(run.model))


class YourAverage(AllReduceEachParameter):
    """Lesson 01: data parallelism with the learner's gradient average in place of the library's."""

    def __init__(self, worker, average):
        super().__init__(worker)
        self.average = average

    def communicate(self, run, step):
        began = run.clock()
        self.average(run.model, self.worker)
        return began, run.clock()


class YourStart(AllReduceEachParameter):
    """Lesson 02: the library's gradient average, after the learner's start from rank 0's parameters."""

    def __init__(self, worker, start_fn):
        super().__init__(worker)
        self.start_fn = start_fn

    def prepare(self, run):
        if self.worker.rank:                 # a copy built on its own starts elsewhere
            torch.manual_seed(1000 + self.worker.rank)
            for module in run.model.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()
        run.record.start = snapshot(run.model)          # before the learner's function
        self.start_fn(run.model)
        run.record.started = snapshot(run.model)        # after it
        self.reducer = GradientReducer(self.worker, dict(run.model.named_parameters()), method=self.method)


class Traced(LocalSGD):
    """Lesson 04: local SGD that keeps every step's parameters; ``average`` (the learner's) or the library's."""

    def __init__(self, worker, k: int, steps: int, average=None):
        super().__init__(worker, k, steps)
        self.average, self.trace = average, []

    def communicate(self, run, step):
        if self.average is None:
            out = super().communicate(run, step)
        else:
            run.optimizer.step()
            out = None
            if self.talks(step):
                began = run.clock()
                with torch.no_grad():
                    self.average(run.model, self.worker)
                out = began, run.clock()
        self.trace.append(snapshot(run.model))
        return out

    def finish(self, run):
        super().finish(run)
        run.record.trace = self.trace


def average_task(worker, fn, steps: int):
    """Lesson 01: on each rank, ``steps`` steps with the learner's gradient average."""
    return train_for(worker, YourAverage(worker, fn), steps, record_grads=True)[1]


def start_task(worker, fn, steps: int):
    """Lesson 02: on each rank, the learner's start, then ``steps`` steps of the library's average."""
    return train_for(worker, YourStart(worker, fn), steps)[1]


def local_sgd_task(worker, fn, steps: int, k: int):
    """Lesson 04: local SGD with the learner's parameter average, then with the library's, in one launch."""
    return [train_for(worker, Traced(worker, k, steps, average), steps)[1] for average in (fn, None)]


def _say(exercise: str, report, hint: str) -> bool:
    print(f"{exercise}: not quite. {report}.")
    if hint:
        print(hint)
    return False


def gradient_average(fn, *, world_size: int = 3, steps: int = 4, backend: str = "torchrun") -> bool | None:
    """Lesson 01: ``fn(model, worker)`` must leave every rank's ``.grad`` the average over the ranks.

    Runs it on ``world_size`` real ranks for ``steps`` steps; compares each step's gradients with one
    process on the global batch, then every rank's final parameters with rank 0's.  Three ranks, so
    that a divisor written as 2 instead of ``worker.world_size`` shows."""
    exercise = "Build it: the gradient average"
    records = build.attempt(exercise, fn, "distlab.course.exercises_build:average_task",
                            world_size=world_size, backend=backend, steps=steps)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    single = train_single(world_size=world_size, global_batch_size=BATCH * world_size, steps=steps,
                          record_grads_at=range(steps), **SETTINGS)
    for r in records:
        mine = [{n: g["average"] for n, g in r.grads[s].items()} for s in range(steps)]
        ref = [{n: g["local"] for n, g in single.grads[s].items()} for s in range(steps)]
        report = compare(mine, ref, names=(f"rank {r.rank}'s gradient after your function", "one process's"))
        if not report.same:
            hint = ""
            if report.factor is not None and abs(report.factor - world_size) < 1e-3:
                hint = (f"{world_size} ranks, {report.factor:.3g}x: the all-reduce sums; divide by "
                        "worker.world_size to make the sum a mean.")
            elif report.step == 0:
                hint = ("The first step already differs: is every parameter's gradient all-reduced "
                        f"(model.parameters() has {len(mine[0])} tensors)?")
            return _say(exercise, report, hint)
    drift = compare(records[-1].params, records[0].params, names=(f"rank {records[-1].rank}", "rank 0"))
    if not drift.same:
        return _say(exercise, drift, "The ranks' copies drifted apart: every rank must apply the same gradient.")
    print(f"{exercise}: correct. On {world_size} real ranks, each of the {steps} steps' gradients equals one "
          "process's on the global batch, to rounding, and the copies stay identical.")
    return True


def start_from_rank_0(fn, *, world_size: int = 2, steps: int = 3) -> bool | None:
    """Lesson 02: under Horovod, ``fn(model)`` must give every rank rank 0's parameters (in place)."""
    exercise = "Build it: start from rank 0"
    records = build.attempt(exercise, fn, "distlab.course.exercises_build:start_task",
                            world_size=world_size, backend="horovod", steps=steps)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    zero = records[0].start
    for r in records[1:]:
        if compare(r.start, zero).same:
            raise AssertionError("the check gave rank 0 and another rank the same start: it could not fail")
        report = compare(r.started, zero, names=(f"rank {r.rank} after your function", "rank 0's start"))
        if not report.same:
            kept = compare(r.started, r.start).same
            hint = (f"Rank {r.rank} kept its own start. hvd.broadcast(t, root_rank=0) returns a new tensor "
                    "and leaves t alone; hvd.broadcast_ (with the underscore) writes into t."
                    if kept else "Every parameter must end as rank 0's: broadcast from root_rank=0.")
            return _say(exercise, report, hint)
    single = train_single(world_size=world_size, global_batch_size=BATCH * world_size, steps=steps, **SETTINGS)
    report = compare(records[-1].params, single.params, names=(f"rank {records[-1].rank} after training",
                                                               "one process"))
    if not report.same:
        return _say(exercise, report, "Every rank must also keep rank 0's values for every later step.")
    print(f"{exercise}: correct. Under Horovod every rank started from rank 0's parameters, and {steps} "
          "steps later every rank holds one process's parameters, to rounding.")
    return True


def parameter_average(fn, *, world_size: int = 2, steps: int = 8, k: int = 4) -> bool | None:
    """Lesson 04: ``fn(model, worker)``, called every ``k`` local steps, must average the parameters."""
    exercise = "Build it: local SGD's average"
    records = build.attempt(exercise, fn, "distlab.course.exercises_build:local_sgd_task",
                            world_size=world_size, steps=steps, k=k)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    for mine, library in records:
        report = compare(mine.trace, library.trace, names=(f"rank {mine.rank}, your local SGD", "the library's"))
        if not report.same:
            hint = ""
            if report.factor is not None and abs(report.factor - world_size) < 1e-3:
                hint = (f"{report.factor:.3g}x on {world_size} ranks: the parameters were summed; divide by "
                        "worker.world_size.")
            elif report.step == k - 1:
                hint = (f"Step {k - 1} is the first average (every {k} steps): look at what your function "
                        "all-reduces (the parameters, p.data, not their gradients).")
            return _say(exercise, report, hint)
    print(f"{exercise}: correct. On {world_size} real ranks your local SGD takes the library's {steps} steps, "
          "to rounding, on every rank.")
    return True
