"""Lesson 06's build-it exercise: the learner writes 1F1B's order of passes, real ranks run it.

A schedule is plain data (``pipeline.schedules``): a list per stage of which pass of which
micro-batch to run next.  The learner writes the function that makes stage ``s``'s list for ``p``
stages and ``m`` micro-batches; the checker

1. calls it for every stage of a few pipelines (2, 3 and 4 stages) and checks each list before
   any process runs it: every pass exactly once, no stage waiting for ever (``schedules.check_order``;
   a wrong order would otherwise hang the ranks);
2. runs the learner's order on real ranks in lesson 06's pipeline (``pipeline.train(order=...)``),
   and compares the parameters with one process training the whole model (``distlab.compare``);
3. compares the passes each rank really ran (its recorded events) with the library's 1F1B, and
   names the first pass, stage and position, where they part, and what that costs in memory.

Any valid order gives one process's parameters (the gradients of the micro-batches add up in
any order): what makes 1F1B is *when* each backward runs, and so how many activations wait.
"""
from __future__ import annotations

from ..pipeline import schedules

EXERCISE = "1F1B order"
# a small pipeline, quick to run: lesson 06's MLP with three hidden layers, narrower
SETUP = dict(model="mlp", width=64, depth=3, global_batch_size=64, lr=0.1, seed=0)
CHECKED = ((2, 4), (3, 6), (4, 8))       # (stages, micro-batches) whose orders are checked as data
RUN = (2, 4)                              # the one run on real ranks


def first_difference(mine: list[list], reference: list[list]) -> tuple[int, int] | None:
    """Lesson 06: the first (stage, position) where two schedules' passes differ; None if they agree."""
    for s, (a, b) in enumerate(zip(mine, reference)):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return s, i
    return None


def _order_of(fn, p: int, m: int) -> list[list]:
    return [[op if isinstance(op, schedules.Op) else schedules.Op(*op) for op in fn(p, m, s)] for s in range(p)]


def _judge(order: list[list], p: int, m: int) -> str | None:
    """What is wrong with an order for ``p`` stages, ``m`` micro-batches, against 1F1B; None if nothing."""
    try:
        schedules.check_order(order, p, m)
    except ValueError as err:
        return f"with {p} stages and {m} micro-batches: {err}"
    reference = schedules.schedule("1f1b", p, m)
    where = first_difference(order, reference)
    if where is None:
        return None
    s, i = where
    held, most = schedules.held_activations(order[s]), schedules.held_activations(reference[s])
    text = (f"with {p} stages and {m} micro-batches, stage {s}'s pass number {i} is {order[s][i]} where 1F1B "
            f"runs {reference[s][i]} (1F1B's stage {s}: {' '.join(map(str, reference[s][:i + 1]))} ...)")
    if held != most:
        text += f"; your stage {s} holds {held} micro-batches' activations at once, 1F1B at most {most}"
    return text + ". Stage s runs p - 1 - s forwards first, then alternates one forward, one backward."


def one_f_one_b_order(fn, steps: int = 2) -> bool | None:
    """Lesson 06: check the learner's ``fn(stages, micro_batches, stage) -> [("F", 0), ("B", 0), ...]``.

    Returns None for the lesson's placeholder (no process started), False with the first wrong
    pass named, True when the learner's order, run on real ranks, trains to one process's
    parameters and runs 1F1B's passes in 1F1B's order."""
    from .build import unanswered

    if unanswered(EXERCISE, fn):
        return None
    orders = {}
    for p, m in CHECKED:
        try:
            orders[p, m] = _order_of(fn, p, m)
        except Exception as err:          # the learner's code: say what it raised, on which call
            print(f"{EXERCISE}: not quite. {fn.__name__}({p}, {m}, stage) raised {type(err).__name__}: {err}")
            return False
        wrong = _judge(orders[p, m], p, m)
        if wrong:
            print(f"{EXERCISE}: not quite, {wrong}")
            return False
    return _on_real_ranks(orders[RUN], steps)


def _on_real_ranks(order: list[list], steps: int) -> bool:
    from .. import compare
    from ..data_parallel.data_parallel import train_single
    from ..pipeline import pipeline
    from ..processes.launcher import launch

    p, m = RUN
    records = launch(pipeline.train, world_size=p, micro_batches=m, steps=steps, progress="none",
                     order=[[(op.kind, op.micro) for op in stage] for stage in order], **SETUP)
    report = compare(pipeline.merge_params(records), train_single(steps=steps, record_grads_at=(), **SETUP).params,
                     names=("your pipeline", "one process"))
    if not report.same:
        print(f"{EXERCISE}: not quite. {report}")
        return False
    ran = [[schedules.Op(e["kind"], e["micro"]) for e in r.events if e["step"] == 0 and e["kind"] in "FB"]
           for r in sorted(records, key=lambda r: r.config["stage"])]
    where = first_difference(ran, schedules.schedule("1f1b", p, m))
    if where is not None:
        s, i = where
        print(f"{EXERCISE}: not quite. On the ranks, stage {s}'s pass number {i} ran as {ran[s][i]}, "
              f"not as 1F1B's {schedules.schedule('1f1b', p, m)[s][i]}")
        return False
    held = [max(e["held"] for e in r.events) for r in sorted(records, key=lambda r: r.config["stage"])]
    print(f"{EXERCISE}: correct. On {p} real ranks with {m} micro-batches your order ran 1F1B's passes in "
          f"1F1B's order, held at most {' and '.join(map(str, held))} micro-batches' activations, and trained "
          f"to one process's parameters.")
    return True
