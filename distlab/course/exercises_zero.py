"""Lesson 08's build-it exercise: the learner writes ZeRO-1's update, real ranks train with it.

The learner writes ``my_zero1_update(worker, flat, flat_grad, shard, optimizer)``, called once a
step after backward, in place of the library's ``ShardedOptimizer`` stage 1 communication and
update.  ``flat`` is the whole model's parameters in one buffer (every parameter a view of it),
``flat_grad`` this rank's full gradient buffer (not yet combined with the other ranks'), ``shard``
this rank's slice of ``flat`` (a view: ``flat[r * size:(r + 1) * size]``) and ``optimizer`` the
optimizer over ``shard`` alone, which keeps only this shard's state.  The learner's function must

1. give ``shard`` its gradient: everyone's gradients for this slice, summed, over N (a mean, as
   data parallelism's): the reduce-scatter half of an all-reduce (``worker.reduce_scatter``);
2. step the optimizer: only this rank's shard moves;
3. all-gather the updated shards into ``flat``, so that every rank holds the whole new model.

The checker sends the function to two real ranks (``course.build``), trains lesson 08's MLP with
SGD with momentum (an optimizer whose state ZeRO-1 shards, and whose update, unlike Adam's, shows
a gradient twice too large), and compares each rank's update (its parameters after one step, less
the start) with one process's (``distlab.compare``), naming the rank, the parameter, by how much,
and what the difference points at.
"""
from __future__ import annotations

import time

from ..zero.zero import ShardedOptimizer

EXERCISE = "ZeRO-1 update"
SETUP = dict(model="mlp", width=64, global_batch_size=64, lr=0.5, optimizer="momentum", seed=0)   # a large step: its
# difference from the start is far above float32 rounding, so a factor between two updates shows as one
STEPS = 1              # one update, compared with one process's: a factor shows as a factor
TASK = "distlab.course.exercises_zero:train_zero1"


class LearnersZero1(ShardedOptimizer):
    """Lesson 08: stage 1's flat buffers and sharded optimizer, with the learner's function as the
    step's communication and update."""

    def __init__(self, worker, fn, optimizer: str, lr: float):
        super().__init__(worker, 1, optimizer, lr)
        self.fn = fn

    def communicate(self, run, step: int) -> tuple[float, float]:
        now = time.time()            # the learner's update communicates: nothing to do before it
        return now, now

    def update(self, run, step: int) -> None:
        self.fn(self.worker, self.flat, self.flat_grad, self.shard, run.optimizer)


def train_zero1(worker, fn, *, steps: int, optimizer: str, model: str, width: int, global_batch_size: int,
                lr: float, seed: int):
    """Lesson 08: on a rank, lesson 08's training with the learner's ZeRO-1 update (``fn``)."""
    from ..train.loop import train_steps
    from ..zero.zero import start_sharded

    run, batch_at = start_sharded(worker, "zero1 (yours)", optimizer=optimizer, model=model, width=width,
                                  depth=2, batch_size=None, global_batch_size=global_batch_size, steps=steps,
                                  lr=lr, seed=seed, dtype="float32", stage=1)
    return train_steps(run, LearnersZero1(worker, fn, optimizer, lr), steps, batch_at)


def zero1_update(fn, world_size: int = 2) -> bool | None:
    """Lesson 08: check the learner's ZeRO-1 update on real ranks against one process."""
    from .. import compare, snapshot
    from ..data_parallel.data_parallel import train_single
    from ..models import build_model
    from .build import attempt

    records = attempt(EXERCISE, fn, TASK, world_size=world_size, steps=STEPS, **SETUP)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    one = train_single(world_size=world_size, steps=STEPS, record_grads_at=(), **SETUP)
    start = snapshot(build_model(SETUP["model"], SETUP["width"], seed=SETUP["seed"]))
    reference = {k: one.params[k] - start[k] for k in start}          # one process's update
    for r in records:
        update = {k: r.params[k] - start[k] for k in start}
        report = compare(update, reference, names=(f"rank {r.rank}'s update", "one process's"))
        if not report.same:
            still = [k for k in update if not update[k].any() and reference[k].any()]
            size = (sum(u.norm() ** 2 for u in update.values()) / sum(u.norm() ** 2 for u in reference.values())) ** 0.5
            why = (f"rank {r.rank}'s {', '.join(still)} did not move at all: the shards of the other ranks "
                   "never reached it (the all-gather)" if still else
                   f"the whole update is {size:.3g}x one process's: a sum of the ranks' gradients where their "
                   "mean is due" if abs(size - world_size) < 0.01 else
                   "check your shard's gradient (everyone's, summed, over N), the step, and the all-gather")
            print(f"{EXERCISE}: not quite, after {STEPS} step {report}. So: {why}.")
            return False
    print(f"{EXERCISE}: correct. On {world_size} real ranks, each updating only its shard, every rank made "
          f"one process's update.")
    return True
