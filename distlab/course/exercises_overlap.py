"""Lesson 15's build-it exercise: a bucketed gradient reducer launched from hooks, run on real ranks.

The learner writes ``attach_buckets(model, worker, cap_bytes) -> finish`` (an answer is in
course/solutions_text/15_where_the_time_goes.py): cut the parameters into buckets of at most ``cap_bytes``
in the order backward writes their gradients (the model's order reversed; a tensor larger than the cap
alone), register a hook on every parameter (``register_post_accumulate_grad_hook``) that, once a bucket's
last gradient is written, launches an asynchronous average of the bucket laid end to end
(``worker.all_reduce(flat, op="avg", async_op=True)``), and return ``finish``, which the loop calls after
backward: wait for every bucket and copy the averages back into ``.grad``.  Buckets launched in order on
every rank (gloo matches collectives by order): the lesson's MLP writes its gradients in the same order on
both ranks, so launching each bucket when it fills keeps the order.

``bucket_task`` trains lesson 01's data-parallel MLP on each of 2 real ranks through the library's loop,
twice: with the library's ``method="buckets"`` (``train.overlap``) at the same cap, and with the learner's
function, whose ``worker.all_reduce`` calls are written down (when, how many numbers).  The checker names
the first thing that differs: no message at all (the hooks were never registered, or ``finish`` was not
returned), every message sent after backward had ended (nothing overlapped: the all-reduce belongs in the
hook), messages whose sizes are not the library's buckets, then the parameters after each step (a factor
of 2: summed, not averaged).
"""
from __future__ import annotations

import time

import torch

from ..data_parallel.gradient_sync import AllReduceEachParameter, Overlapped
from ..stepwise import compare, snapshot
from ..train.overlap import MIB, plan_buckets
from . import build
from .exercises_build import train_for

EXERCISE = "Build it: buckets sent during backward"
CAP_BYTES = 1024           # the MLP of width 16: its six tensors make four buckets
STEPS = 6
TASK = "distlab.course.exercises_overlap:bucket_task"


class Watched:
    """Lesson 15: the rank's worker, with each ``all_reduce`` the learner's code calls written down
    (``time.time()`` and the tensor's number of elements); everything else passed through."""

    def __init__(self, worker):
        self._worker, self.calls = worker, []

    def all_reduce(self, tensor, *args, **kwargs):
        self.calls.append((time.time(), tensor.numel()))
        return self._worker.all_reduce(tensor, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._worker, name)


class Traced:
    """Lesson 15: a strategy that keeps the averaged gradients of its first update and the parameters after
    every update (both of this exercise's runs: what the checker compares)."""

    def update(self, run, step):
        if not self.trace:
            self.first_grads = {n: p.grad.detach().clone() for n, p in run.model.named_parameters()}
        super().update(run, step)
        self.trace.append(snapshot(run.model))


class YourBuckets(Traced, AllReduceEachParameter):
    """Lesson 15: data parallelism whose gradients go through the learner's ``attach_buckets``."""

    def __init__(self, worker, fn, cap_bytes: int):
        super().__init__(worker)
        self.fn, self.cap, self.watched, self.trace = fn, cap_bytes, Watched(worker), []
        self.marks = []           # how many messages had been sent when each step's wait ended

    def prepare(self, run) -> None:
        with torch.no_grad():
            for p in run.model.parameters():
                self.worker.broadcast(p.data, src=0)
        self.finish_buckets = self.fn(run.model, self.watched, self.cap)
        if not callable(self.finish_buckets):
            raise TypeError(f"attach_buckets returned {type(self.finish_buckets).__name__}, not the function finish()")

    def communicate(self, run, step):
        began = run.clock()
        self.finish_buckets()
        self.marks.append(len(self.watched.calls))
        return began, run.clock()


class TracedBuckets(Traced, Overlapped):
    """Lesson 15: the library's buckets, keeping the parameters after every update."""

    def __init__(self, worker, cap_bytes: int):
        super().__init__(worker, "buckets", cap_bytes / MIB)
        self.trace = []


def bucket_task(worker, fn, cap_bytes: int = CAP_BYTES, steps: int = STEPS) -> dict:
    """Lesson 15 (on each rank): the library's buckets, then the learner's, on lesson 01's MLP: each run's
    parameters after every step, the learner's messages, and when each step's backward ended."""
    library = TracedBuckets(worker, cap_bytes)
    _, lib_record = train_for(worker, library, steps)
    yours = YourBuckets(worker, fn, cap_bytes)
    run, record = train_for(worker, yours, steps)
    return dict(rank=worker.rank, library=library.trace, yours=yours.trace, calls=yours.watched.calls,
                marks=yours.marks, grads=(yours.first_grads, library.first_grads),
                backward_ends=[s.t_compute_end for s in record.steps],
                buckets=[[b["bytes"] // 4 for b in step] for step in lib_record.buckets],
                names=[n for n, _ in run.model.named_parameters()])


def buckets(fn, *, world_size: int = 2, cap_bytes: int = CAP_BYTES, steps: int = STEPS) -> bool | None:
    """Lesson 15: check the learner's ``attach_buckets(model, worker, cap_bytes)`` on real ranks against the
    library's buckets: messages sent during backward, of the library's sizes, and the same parameters."""
    records = build.attempt(EXERCISE, fn, TASK, world_size=world_size, cap_bytes=cap_bytes, steps=steps)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    for r in sorted(records, key=lambda r: r["rank"]):
        why = _why(r, cap_bytes)
        if why:
            print(f"{EXERCISE}: not quite. Rank {r['rank']}: {why}")
            return False
    sizes = records[0]["buckets"][0]
    print(f"{EXERCISE}: correct. On {world_size} real ranks your hooks sent {len(sizes)} buckets a step "
          f"({', '.join(map(str, sizes))} numbers), in backward's order, the first while backward was still "
          f"running, and every step's parameters equal the library's buckets, to rounding.")
    return True


def _why(r: dict, cap_bytes: int) -> str | None:
    """What one rank's runs show: the first way the learner's messages or parameters part from the library's."""
    if not r["calls"]:
        return ("your code never called worker.all_reduce. Register a hook on every parameter "
                "(p.register_post_accumulate_grad_hook) that sends a bucket once it is full, and return finish.")
    marks = [0] + r["marks"]
    per_step = [r["calls"][a:b] for a, b in zip(marks, marks[1:])]
    for step, (calls, end) in enumerate(zip(per_step, r["backward_ends"])):
        if calls and all(t > end for t, _ in calls):
            return (f"at step {step} every all_reduce was called after backward had ended: nothing overlapped. "
                    "Call it from the hook, as soon as a bucket's last gradient is written, and only wait in finish.")
        sizes = [n for _, n in calls]
        if sizes != r["buckets"][step]:
            return (f"at step {step} you sent {len(sizes)} messages of {sizes} numbers; buckets of at most "
                    f"{cap_bytes} bytes in backward's order ({', '.join(reversed(r['names']))}) are "
                    f"{r['buckets'][step]} numbers. A tensor larger than the cap travels alone.")
    report = compare(*r["grads"], names=("your averaged gradients", "the library's"))
    if not report.same:
        return f"at step 0, before the update: {report}."
    for step, (mine, theirs) in enumerate(zip(r["yours"], r["library"])):
        report = compare(mine, theirs, names=("your buckets", "the library's"))
        if not report.same:
            return f"after step {step}: {report}. Average (op='avg'), and copy each part back into its own .grad."
    return None


def expected_buckets(model, cap_bytes: int = CAP_BYTES) -> list[int]:
    """Lesson 15: the library's buckets for ``model`` at ``cap_bytes``, in numbers each (what the lesson prints)."""
    return [sum(p.numel() for p in b) for b in plan_buckets(list(model.parameters()), cap_bytes)]

