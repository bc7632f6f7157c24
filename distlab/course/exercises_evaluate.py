"""Lesson 05's build-it exercise: the test accuracy measured on shards, and every rank stopping together.

Introduced in lesson 05.  The time to a target accuracy (lesson 05b) needs the accuracy measured
while training runs.  The library's loop lets every rank evaluate the *whole* test set, the same
work N times over; a real job splits the test set too, so each rank evaluates 1/N of it, and then
must do two things right:

* **count every test sample once**: combine the ranks' counts of correct answers and of samples
  (sums), not their accuracies (a mean of ratios over shards of different sizes is not the ratio);
* **decide together**: a rank that decides from its own shard may stop while another goes on, and
  the one left waits in its next all-reduce for a partner that never comes (until the timeout).

The learner writes ``fn(worker, correct, total, target) -> (accuracy, stop)``, given this rank's
counts on its shard.  ``evaluate_task`` runs it on real ranks inside the library's data-parallel
loop (plain SGD, lesson 01's gradient average) every ``EVERY`` steps; after each call the ranks
show each other their answers (an all-gather, so that a disagreement is recorded instead of left
to hang) and each rank also evaluates the whole test set at the same parameters: the accuracy one
process would measure, which the learner's must equal (it is a ratio of two integers; within
``CLOSE``, so that a division in float32 counts).
Each evaluation asks three times: with the lesson's target, and with targets just below and just
above the whole set's accuracy, where a decision taken from one shard's accuracy (which lies on
one side of it or the other) cannot agree with every rank's.
"""
from __future__ import annotations

import torch

from ..data_parallel.gradient_sync import AllReduceEachParameter
from ..train.loop import evaluate
from . import build
from .exercises_build import train_for

EXERCISE = "Build it: accuracy on shards, one decision"
SETTINGS = dict(model="mlp", width=64, lr=0.1, optimizer="momentum", seed=0, dtype="float32")
BATCH, STEPS, EVERY, TARGET = 32, 60, 6, 0.85       # per rank; the target is crossed about two thirds in
CLOSE = 1e-7      # an accuracy divided in float32 is off by ~1e-8; the mean of shard accuracies by ~1e-5
SIDE = 1e-6       # the targets either side of the accuracy, beyond float32's rounding


def shard_of(n: int, rank: int, world_size: int) -> torch.Tensor:
    """Lesson 05: this rank's test samples: contiguous blocks, as equal as ``n`` allows (359 -> 180 + 179)."""
    return torch.arange(n).tensor_split(world_size)[rank]


class EvaluatedOnShards(AllReduceEachParameter):
    """Lesson 05: data parallelism that, every ``every`` steps, asks the learner's ``fn`` for the
    whole test set's accuracy from this rank's shard, and records what every rank answered."""

    def __init__(self, worker, fn, every: int, target: float):
        super().__init__(worker)
        self.fn, self.every, self.target, self.seen = fn, every, target, []

    def update(self, run, step):
        super().update(run, step)                 # the optimizer's step: then measure
        if (step + 1) % self.every:
            return
        device = self.worker.device
        x, y = run.data.x_test.to(device), run.data.y_test.to(device)
        mine = shard_of(len(y), self.worker.rank, self.worker.world_size).to(device)
        with torch.no_grad():
            run.model.eval()
            correct = int((run.model(x[mine]).argmax(1) == y[mine]).sum())
            run.model.train()
        whole = evaluate(run.model, x, y)               # one process's measure, at these parameters
        for target in (self.target, whole - SIDE, whole + SIDE):     # the lesson's; then either side of it
            accuracy, stop = self.fn(self.worker, correct, len(mine), target)
            said = torch.tensor([float(accuracy), float(bool(stop))], dtype=torch.float64, device=device)
            everyone = self.worker.all_gather(said)        # every rank's answer, on every rank
            self.seen.append(dict(step=step + 1, target=target, correct=correct, total=len(mine),
                                  answers=[tuple(a.tolist()) for a in everyone], whole=whole))

    def finish(self, run):
        super().finish(run)
        run.record.evaluated = self.seen


def evaluate_task(worker, fn, steps: int = STEPS, every: int = EVERY, target: float = TARGET, **changed):
    """Lesson 05 (on each rank): the library's loop, with the learner's evaluation every ``every`` steps."""
    return train_for(worker, EvaluatedOnShards(worker, fn, every, target), steps,
                     settings=dict(SETTINGS, **changed), batch=BATCH)[1]


def _why(seen: dict, world_size: int) -> str | None:
    """What the learner's answers at one evaluation got wrong, or None."""
    step, whole, answers = seen["step"], seen["whole"], seen["answers"]
    stops = {bool(s) for _, s in answers}
    if len(stops) > 1:
        who = ", ".join(f"rank {r} {'stop' if s else 'go on'}" for r, (_, s) in enumerate(answers))
        return (f"after step {step}, with a target of {seen['target']:.6f}, the ranks disagreed ({who}). "
                "A rank that stops alone leaves the others waiting in their next all-reduce for it, until "
                "the timeout: decide from numbers every rank shares (combine them with a collective first)")
    for r, (acc, _) in enumerate(answers):
        if abs(acc - whole) > CLOSE:
            said = (f"after step {step} rank {r} answered accuracy {acc:.6f}; the whole test set's is "
                    f"{whole:.6f} (one process, same parameters)")
            if world_size > 1 and abs(acc - seen["own"][r]) < CLOSE:
                return f"{said}: that is rank {r}'s own shard. Combine the ranks' counts with a collective"
            if abs(acc - sum(seen["own"]) / len(seen["own"])) < CLOSE:
                return (f"{said}: that is the mean of the ranks' shard accuracies, and the shards hold "
                        f"{' and '.join(str(t) for t in seen['totals'])} samples. Sum the correct answers and the "
                        "samples over the ranks, then divide: each test sample counts once")
            return f"{said}. Sum the correct answers and the samples over the ranks, then divide"
    if stops != {whole >= seen["target"]}:
        return (f"after step {step} the accuracy is {whole:.6f} against a target of {seen['target']:.6f}, and "
                f"every rank said {'stop' if stops == {True} else 'go on'}")
    return None


def accuracy_on_shards(fn, *, world_size: int = 2, steps: int = STEPS, every: int = EVERY,
                       target: float = TARGET) -> bool | None:
    """Lesson 05: check the learner's ``fn(worker, correct, total, target) -> (accuracy, stop)`` on real ranks.

    Every evaluation of the run must give, on every rank, the whole test set's accuracy (exactly:
    one process's at the same parameters) and the same decision, ``accuracy >= target``."""
    records = build.attempt(EXERCISE, fn, "distlab.course.exercises_evaluate:evaluate_task",
                            world_size=world_size, steps=steps, every=every, target=target)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    records = sorted(records, key=lambda r: r.rank)
    for i, seen in enumerate(records[0].evaluated):
        each = [r.evaluated[i] for r in records]
        seen = dict(seen, own=[e["correct"] / e["total"] for e in each],
                    totals=[e["total"] for e in each])
        why = _why(seen, world_size)
        if why:
            print(f"{EXERCISE}: not quite: {why}.")
            return False
    first = next((s["step"] for s in records[0].evaluated if s["whole"] >= target), None)
    totals = " + ".join(str(s["total"]) for s in (r.evaluated[0] for r in records))
    decision = f"stop after step {first}" if first else "go on to the end"
    print(f"{EXERCISE}: correct. On {world_size} real ranks each evaluated only its shard ({totals} test "
          f"samples), and at all {len(records[0].evaluated) // 3} evaluations every rank gave the whole test set's "
          f"accuracy and the same decision ({decision} at a target of {target:.0%}; and right either side of "
          "the accuracy itself), as one process evaluating them all would.")
    return True
