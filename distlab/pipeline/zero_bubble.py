"""Where a pipeline's time goes: its bubble measured on real ranks, and predicted with and without messages.

Introduced in lesson 15 ("Where the time goes").  Lesson 06 predicted the bubble with free messages
and equal passes (``predict.bubbles``) and measured it on real ranks (``schedules.bubble`` of a run's
``timeline``); the two rarely agree, and this module says why, from the run's own record:

* ``pass_times``: how long each kind of pass (F, B, W) really took on each stage;
* ``message_times``: how long each message between stages took, from the moment both sides were ready
  (the later of the send's start and the receive's start) to the receive's end, the matching send read
  from the other rank's events (one machine, one clock); ``message_time`` their mean;
* ``predicted``: ``schedules.simulate`` of the schedule with those pass times and, if given, that
  message time on every stage boundary (an activation forward, a gradient back);
* ``compare``: the measured bubble beside the textbook's, the simulated one without messages and the
  simulated one with the measured message time.  What is still left over is the time between passes
  (posting sends, recording events) and the way messages share the cores with the passes: measured on
  2 cores, a message sent while its sender computes the next pass often arrives only when that pass
  ends.  No formula of the course counts these; lesson 06's ``widgets.pipeline.idle_breakdown`` shows
  them (its ``other`` and ``recv``).
"""
from __future__ import annotations

import statistics

from ..predict import bubbles
from . import schedules

KINDS = ("F", "B", "W")


def _stages(records) -> list:
    return sorted(records, key=lambda r: r.config.get("stage", r.rank))


def _steps(records, skip: int) -> range:
    """The steps after the first ``skip`` (the first steps also pay for first-time set-up)."""
    n = len(records[0].steps)
    return range(min(skip, n - 1), n)


def measured_bubble(records, skip: int = 2) -> float:
    """Lesson 15: one run's bubble, the median over its steps after ``skip`` of ``schedules.bubble``
    (lesson 06's measure: 1 - the passes' busy time / (p x the step's span))."""
    return statistics.median(schedules.bubble(schedules.timeline(records, s)) for s in _steps(records, skip))


def pass_times(records, skip: int = 2) -> dict[str, list[float]]:
    """Lesson 15: the median seconds of each kind of pass per virtual stage (``chunk * p + stage``, the
    model's order): ``{"F": [...], "B": [...], "W": [...]}`` (W all zeros when B was the whole backward)."""
    p, chunks = len(records), records[0].config.get("chunks", 1)
    steps = set(_steps(records, skip))
    times = {k: [[] for _ in range(p * chunks)] for k in KINDS}
    for s, r in enumerate(_stages(records)):
        for e in r.events:
            if e["kind"] in KINDS and e["step"] in steps:
                times[e["kind"]][e["chunk"] * p + s].append(e["end"] - e["start"])
    return {k: [statistics.median(t) if t else 0.0 for t in per] for k, per in times.items()}


def message_times(records, skip: int = 2) -> list[float]:
    """Lesson 15: the seconds each message took, send to receive, over the steps after ``skip``.

    A receive on virtual stage ``v`` before a forward gets what ``v - 1`` sent after its forward of the
    same micro-batch; before a backward, what ``v + 1`` sent after its backward.  The message's time is
    ``receive end - max(send start, receive start)``: the wait for the other stage to *compute* is the
    bubble's, not the message's."""
    p, stages, steps = len(records), _stages(records), set(_steps(records, skip))
    sends = {}
    for s, r in enumerate(stages):
        for e in r.events:
            if e["kind"] == "send" and e["step"] in steps:
                sends[(e["step"], e["pass"], e["micro"], e["chunk"] * p + s)] = e
    out = []
    for s, r in enumerate(stages):
        for e in r.events:
            if e["kind"] == "recv" and e["step"] in steps:
                v = e["chunk"] * p + s
                send = sends.get((e["step"], e["pass"], e["micro"], v - 1 if e["pass"] == "F" else v + 1))
                if send is not None:
                    out.append(e["end"] - max(send["start"], e["start"]))
    return out


def message_time(records, skip: int = 2, average=statistics.mean) -> float:
    """Lesson 15: a run's time per message (``message_times``), their mean by default: on a busy machine a
    few messages wait for the sender's core (one sent while the sender computes may arrive only when it
    is done), and the bubble pays the sum, which the median would hide.  0 with one stage (no messages)."""
    times = message_times(records, skip)
    return average(times) if times else 0.0


def predicted(schedule: str, stages: int, micro_batches: int, chunks: int = 1, *, forward=1.0,
              backward=2.0, weight=0.0, message: float = 0.0) -> float:
    """Lesson 15: the bubble ``schedules.simulate`` predicts for ``schedule`` with these pass times (one
    number, or one per virtual stage) and ``message`` seconds per message on every stage boundary: the
    prediction with the message cost, for every schedule of the course (gpipe, 1f1b, interleaved, zb_h1)."""
    ops = schedules.schedule(schedule, stages, micro_batches, chunks)
    return schedules.bubble(schedules.simulate(ops, forward, backward, weight, message=message))


def textbook(schedule: str, stages: int, micro_batches: int, chunks: int = 1) -> float:
    """Lesson 15: the closed form with equal passes and free messages (``predict.bubbles``): lesson 06's
    ``(p - 1) / (v m + p - 1)``, and ZB-H1's with ``T_F = T_B = T_W`` where it holds (m >= p)."""
    if schedule == "zb_h1":
        return bubbles.zb_h1_bubble_fraction(stages, micro_batches)
    return bubbles.bubble_fraction(stages, micro_batches, chunks)


def compare(records, skip: int = 2) -> dict:
    """Lesson 15: one hand-written pipeline run (``pipeline.train``'s records), measured and predicted.

    ``measured``: its median bubble; ``textbook``: the closed form; ``simulated``: the simulation with the
    run's own median pass times and free messages; ``with_messages``: the same with the run's mean
    ``message_s`` on every boundary (``message_median_s`` beside it); ``times``: the pass times it used."""
    config, p = records[0].config, len(records)
    name, m, chunks = config["schedule"], config["micro_batches"], config.get("chunks", 1)
    times, message = pass_times(records, skip), message_time(records, skip)
    split = any(times["W"])
    costs = dict(forward=times["F"], backward=times["B"], weight=times["W"] if split else 0.0)
    return dict(schedule=name, stages=p, micro_batches=m, measured=measured_bubble(records, skip),
                textbook=textbook(name, p, m, chunks), simulated=predicted(name, p, m, chunks, **costs),
                with_messages=predicted(name, p, m, chunks, **costs, message=message), message_s=message,
                message_median_s=message_time(records, skip, statistics.median), times=times)


def check_rounds(world_size: int, *, schedules_: tuple = ("1f1b", "zb_h1"), rounds: int = 3, skip: int = 2,
                 backend: str = "torchrun", device: str = "cpu", **settings) -> None:
    """Lesson 15: every schedule must be a valid pipeline job, and the rounds enough for the verdict rule."""
    from ..checks import check_int
    from ..processes.arguments import bind_arguments
    from .pipeline import train

    check_int("rounds", rounds)
    check_int("skip", skip, minimum=0)
    if settings.get("steps", 20) <= skip:
        raise ValueError(f"steps={settings.get('steps')} leaves no step after the {skip} skipped")
    for name in schedules_:
        bind_arguments(train, world_size, dict(settings, schedule=name), backend=backend, device=device)


def rounds(worker, *, schedules_: tuple = ("1f1b", "zb_h1"), rounds: int = 3, skip: int = 2, **settings) -> list:
    """Lesson 15 (a training function for ``distlab.launch``): each schedule trained once a round, in turn, on
    the same ranks (a busy moment falls on all alike): this rank's ``[{schedule: record}, ...]``, one dict a
    round (``summarise_rounds`` puts the ranks' records together)."""
    from .pipeline import train

    return [{name: train(worker, schedule=name, **settings) for name in schedules_} for _ in range(rounds)]


rounds.validate_args = check_rounds
rounds.supports = frozenset({"torchrun", "cpu", "cuda"})


def summarise_rounds(ranks: list, skip: int = 2) -> list[dict]:
    """Lesson 15: per round, ``{schedule: compare(its records)}`` from what every rank of ``rounds`` returned."""
    return [{name: compare([r[i][name] for r in ranks], skip) for name in ranks[0][i]} for i in range(len(ranks[0]))]
