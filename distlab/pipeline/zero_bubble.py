"""Where a pipeline's time goes: its bubble measured on real ranks, predicted with free messages and with its costs.

Introduced in lesson 15 ("Where the time goes").  Lesson 06 predicted the bubble with free messages
and equal passes (``predict.bubbles``) and measured it on real ranks (``schedules.bubble`` of a run's
``timeline``); the two rarely agree, and this module says why, from the run's own record:

* ``pass_times``: how long each kind of pass (F, B, W) really took on each stage;
* ``message_times``: how long each message between stages took, from the moment both sides were ready
  (the later of the send's start and the receive's start) to the receive's end, the matching send read
  from the other rank's events (one machine, one clock); ``message_time`` their mean;
* ``pass_overheads``: the time a stage spends between two passes that is neither a pass nor a receive
  (posting the send, the Python and the record between passes);
* ``predicted``: ``schedules.simulate`` of the schedule with those pass times and, if given, a message
  cost on every stage boundary (an activation forward, a gradient back) and an overhead after every pass;
* ``expected``: the same, every pass, receive and overhead drawn afresh from the run's own measured ones;
* ``compare``: the measured bubble beside the textbook's, the simulated one with free messages, and the
  one with the run's measured costs.  Three mechanisms make up that difference, each measured:

  1. **the receive is a rendezvous**: gloo moves a message only once its receive is posted (its TCP
     pair holds a send until the peer says "receive ready", and its device thread, on the sender's
     core, then writes it), so a receive costs its time from the *later* of the send and the receive,
     even when the message was sent long before.  ``message_times`` measures exactly that, so the
     prediction adds it after the later of the two too (``simulate(receive=)``), not after the send
     only (``message=``, where a receiver that comes late hides it);
  2. **the overhead between passes**: about a tenth to half a millisecond a pass, idle in the bubble;
  3. **slow passes and messages cost twice**: on 2 shared cores a rank is sometimes descheduled for a
     few milliseconds, inside a pass or while its message waits for its core.  The slow pass is busy
     time on its stage and a wait on the next one, so a pipeline idles more than a simulation with
     average costs says (the span of a max-plus chain grows with the spread of its terms).
     ``expected`` draws every cost from the run's own (``samples``), so the spread is counted.

  Lesson 06's ``widgets.pipeline.idle_breakdown`` shows where the idle time goes, stage by stage.
"""
from __future__ import annotations

import random
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


def _passes(records, skip: int) -> dict[str, list[list[float]]]:
    p, chunks = len(records), records[0].config.get("chunks", 1)
    steps = set(_steps(records, skip))
    times = {k: [[] for _ in range(p * chunks)] for k in KINDS}
    for s, r in enumerate(_stages(records)):
        for e in r.events:
            if e["kind"] in KINDS and e["step"] in steps:
                times[e["kind"]][e["chunk"] * p + s].append(e["end"] - e["start"])
    return times


def pass_times(records, skip: int = 2, average=statistics.median) -> dict[str, list[float]]:
    """Lesson 15: the median (or ``average``) seconds of each kind of pass per virtual stage (``chunk * p +
    stage``, the model's order): ``{"F": [...], "B": [...], "W": [...]}`` (W all zeros when B was the whole
    backward)."""
    return {k: [average(t) if t else 0.0 for t in per] for k, per in _passes(records, skip).items()}


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


def pass_overheads(records, skip: int = 2) -> list[float]:
    """Lesson 15: on every stage, the seconds between each pass's end and the next pass's start that were
    not spent receiving: posting the send, the Python and the record between passes."""
    out = []
    for r in records:
        for step in _steps(records, skip):
            events = [e for e in r.events if e["step"] == step]
            at = [i for i, e in enumerate(events) if e["kind"] in KINDS]
            for a, b in zip(at, at[1:]):
                receiving = sum(e["end"] - e["start"] for e in events[a + 1:b] if e["kind"] == "recv")
                out.append(events[b]["start"] - events[a]["end"] - receiving)
    return out


def samples(records, skip: int = 2) -> dict:
    """Lesson 15: every measured cost of a run, for ``expected``: each pass's seconds by ``(kind, virtual
    stage)``, each message's (``"receive"``, ``message_times``) and each overhead (``pass_overheads``)."""
    times = _passes(records, skip)
    out = {(k, v): t for k, per in times.items() for v, t in enumerate(per) if t}
    return dict(out, receive=message_times(records, skip) or [0.0], overhead=pass_overheads(records, skip) or [0.0])


def predicted(schedule: str, stages: int, micro_batches: int, chunks: int = 1, *, forward=1.0,
              backward=2.0, weight=0.0, message: float = 0.0, receive: float = 0.0, overhead: float = 0.0) -> float:
    """Lesson 15: the bubble ``schedules.simulate`` predicts for ``schedule`` with these pass times (one
    number, or one per virtual stage), ``message`` seconds in flight per message on every stage boundary,
    ``receive`` seconds per receive once both sides are ready and ``overhead`` seconds after every pass,
    for every schedule of the course (gpipe, 1f1b, interleaved, zb_h1)."""
    ops = schedules.schedule(schedule, stages, micro_batches, chunks)
    return schedules.bubble(schedules.simulate(ops, forward, backward, weight, message=message, receive=receive,
                                               overhead=overhead))


def expected(schedule: str, stages: int, micro_batches: int, chunks: int = 1, *, costs: dict,
             draws: int = 100, seed: int = 0) -> float:
    """Lesson 15: the median bubble of ``draws`` simulated steps (as ``measured_bubble`` is the median of the
    run's steps) in which every pass, receive and overhead takes a time drawn at random from ``costs``
    (``samples`` of a run): the spread of its costs included (a slow pass holds up the next stage too)."""
    rng, ops = random.Random(seed), schedules.schedule(schedule, stages, micro_batches, chunks)

    def draw(what: str, virtual: int) -> float:
        return rng.choice(costs[what] if what in ("receive", "overhead") else costs[(what, virtual)])

    return statistics.median(schedules.bubble(schedules.simulate(ops, draw=draw)) for _ in range(draws))


def textbook(schedule: str, stages: int, micro_batches: int, chunks: int = 1) -> float:
    """Lesson 15: the closed form with equal passes and free messages (``predict.bubbles``): lesson 06's
    ``(p - 1) / (v m + p - 1)``, and ZB-H1's with ``T_F = T_B = T_W`` where it holds (m >= p)."""
    if schedule == "zb_h1":
        return bubbles.zb_h1_bubble_fraction(stages, micro_batches)
    return bubbles.bubble_fraction(stages, micro_batches, chunks)


def _pass_costs(times: dict) -> dict:
    return dict(forward=times["F"], backward=times["B"], weight=times["W"] if any(times["W"]) else 0.0)


def compare(records, skip: int = 2) -> dict:
    """Lesson 15: one hand-written pipeline run (``pipeline.train``'s records), measured and predicted.

    ``measured``: its median bubble; ``textbook``: the closed form; ``simulated``: the simulation with the
    run's own median pass times and free messages; ``with_mean_costs``: with its mean pass times, its mean
    ``message_s`` on every receive (a rendezvous) and its mean ``overhead_s`` after every pass;
    ``with_messages``: with the measured costs, each drawn from the run's own (``expected``): the message
    and overhead costs and the spread of all (the module's three mechanisms); ``times``: the median pass
    times (``message_median_s`` beside the mean message); ``step_s``: the median step, first start to last end."""
    config, p = records[0].config, len(records)
    name, m, chunks = config["schedule"], config["micro_batches"], config.get("chunks", 1)
    times, message = pass_times(records, skip), message_time(records, skip)
    overhead = statistics.fmean(pass_overheads(records, skip) or [0.0])
    means = _pass_costs(pass_times(records, skip, statistics.fmean))
    return dict(schedule=name, stages=p, micro_batches=m, measured=measured_bubble(records, skip),
                textbook=textbook(name, p, m, chunks), simulated=predicted(name, p, m, chunks, **_pass_costs(times)),
                with_mean_costs=predicted(name, p, m, chunks, **means, receive=message, overhead=overhead),
                with_messages=expected(name, p, m, chunks, costs=samples(records, skip)), message_s=message,
                message_median_s=message_time(records, skip, statistics.median), overhead_s=overhead, times=times,
                step_s=statistics.median(_span(records, i) for i in _steps(records, skip)))


def _span(records, step: int) -> float:
    """Lesson 15: a step's span over every stage's events, first start to last end."""
    events = [e for r in records for e in r.events if e["step"] == step]
    return max(e["end"] for e in events) - min(e["start"] for e in events)


def plans(schedules_) -> dict[str, dict]:
    """Lesson 15: each schedule to run, by name: ``("1f1b", "zb_h1")`` or ``{"interleaved": {"schedule":
    "interleaved", "chunks": 2}, ...}`` (the settings a schedule adds to the run's)."""
    if isinstance(schedules_, dict):
        return {name: dict(extra) for name, extra in schedules_.items()}
    return {name: {"schedule": name} for name in schedules_}


def check_rounds(world_size: int, *, schedules_=("1f1b", "zb_h1"), rounds: int = 3, skip: int = 2,
                 backend: str = "torchrun", device: str = "cpu", **settings) -> None:
    """Lesson 15: every schedule must be a valid pipeline job, and the rounds enough for the verdict rule."""
    from ..checks import check_int
    from ..processes.arguments import bind_arguments
    from .pipeline import train

    check_int("rounds", rounds)
    check_int("skip", skip, minimum=0)
    if settings.get("steps", 20) <= skip:
        raise ValueError(f"steps={settings.get('steps')} leaves no step after the {skip} skipped")
    for extra in plans(schedules_).values():
        bind_arguments(train, world_size, dict(settings, **extra), backend=backend, device=device)


def rounds(worker, *, schedules_=("1f1b", "zb_h1"), rounds: int = 3, skip: int = 2, **settings) -> list:
    """Lesson 15 (a training function for ``distlab.launch``): each schedule trained once a round, in turn, on
    the same ranks (a busy moment falls on all alike): this rank's ``[{schedule: record}, ...]``, one dict a
    round (``summarise_rounds`` puts the ranks' records together)."""
    from .pipeline import train

    return [{name: train(worker, **dict(settings, **extra)) for name, extra in plans(schedules_).items()}
            for _ in range(rounds)]


rounds.validate_args = check_rounds
rounds.supports = frozenset({"torchrun", "cpu", "cuda"})


def summarise_rounds(ranks: list, skip: int = 2) -> list[dict]:
    """Lesson 15: per round, ``{schedule: compare(its records)}`` from what every rank of ``rounds`` returned."""
    return [{name: compare([r[i][name] for r in ranks], skip) for name in ranks[0][i]} for i in range(len(ranks[0]))]
