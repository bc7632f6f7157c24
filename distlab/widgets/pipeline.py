"""Pipeline pictures: who computes what when, and the bubble where nobody does.

Introduced in lesson 06 ("Splitting the model").  A timeline is a list per stage of passes
``{"op", "start", "end"}``: ``schedules.simulate`` predicts one from the schedule alone,
``schedules.timeline`` reads one from the events the real ranks recorded.  Both are drawn the
same way, one row per stage, a bar per pass (forward light, backward dark, the micro-batch's
number on it), the idle time shaded: the bubble.  ``pipeline_explorer`` puts a measured run
above the prediction for the same schedule, with a slider for the number of micro-batches.

Like every widget in distlab, this module only reads records; it never trains.
"""
from __future__ import annotations

import statistics

import ipywidgets as W
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..pipeline import schedules
from ..predict import bubbles
from .display import BLUE, GREY, NARROW, SKY_BLUE, VERMILLION, WIDTH, LiveFigure

PASS_COLOURS = {"F": SKY_BLUE, "B": BLUE}
BUBBLE = VERMILLION


def draw_timeline(ax, timeline: list[list[dict]], *, unit: float = 1e3, label: str = "ms") -> float:
    """Lesson 06: one row per stage on ``ax``; returns the timeline's bubble fraction.

    ``unit`` scales the times (1e3: seconds to milliseconds; 1: the simulator's units).
    """
    origin = min(t["start"] for row in timeline for t in row)
    end = max(t["end"] for row in timeline for t in row)
    span = (end - origin) * unit
    for s, row in enumerate(timeline):
        ax.broken_barh([(0, span)], (s - 0.4, 0.8), color=BUBBLE, alpha=0.18)     # idle unless covered
        for t in row:
            a, width = (t["start"] - origin) * unit, (t["end"] - t["start"]) * unit
            ax.broken_barh([(a, width)], (s - 0.4, 0.8), color=PASS_COLOURS[t["op"].kind],
                           edgecolor="white", linewidth=0.5)
            if width > span / 60:
                ax.text(a + width / 2, s, str(t["op"]).lstrip("FB"), ha="center", va="center", fontsize=7,
                        color="white" if t["op"].kind == "B" else "black")
    ax.set_yticks(range(len(timeline)), [f"stage {s}" for s in range(len(timeline))])
    ax.set_ylim(len(timeline) - 0.5, -0.5)
    ax.set_xlim(0, span)
    ax.set_xlabel(label)
    return schedules.bubble(timeline)


def timeline_figure(measured: list[list[dict]] | None, schedule: str, micro_batches: int,
                    chunks: int = 1) -> Figure:
    """Lesson 06: the measured timeline (if any) above the predicted one for the same schedule."""
    p = len(measured) if measured else 2
    predicted = schedules.simulate(schedules.schedule(schedule, p, micro_batches, chunks), 1 / chunks,
                                   2 / chunks)
    rows = [("measured on the ranks", measured, 1e3, "milliseconds since the step began")] if measured else []
    rows.append(("predicted (a forward 1 unit, a backward 2, messages free)", predicted, 1,
                 "time in units of one forward pass"))
    fig = Figure(figsize=(WIDTH, 0.6 + (0.45 * p + 0.7) * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), 1, squeeze=False)[:, 0]
    for ax, (what, timeline, unit, label) in zip(axes, rows):
        bubble = draw_timeline(ax, timeline, unit=unit, label=label)
        ax.set_title(f"{schedule}, {micro_batches} micro-batch{'es' * (micro_batches > 1)}: {what}; "
                     f"bubble {bubble:.0%}", fontsize=10, loc="left")
    axes[0].legend(handles=[Patch(color=SKY_BLUE, label="forward"), Patch(color=BLUE, label="backward"),
                            Patch(color=BUBBLE, alpha=0.18, label="idle (bubble)")],
                   loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return fig


def bubble_rows(runs: dict, skip: int = 2) -> list[dict]:
    """Lesson 06: ``{"schedule", "m", "measured", "predicted", "held"}`` per run of
    ``runs = {(schedule, m): records}``: the median bubble of the steps after the first ``skip``
    (the first steps also pay for first-time set-up), and the most micro-batches whose
    activations each stage held (counted on the ranks)."""
    out = []
    for (schedule, m), records in sorted(runs.items()):
        held = [max(e["held"] for e in r.events) for r in records]
        out.append(dict(schedule=schedule, m=m, measured=run_bubble(records, skip),
                        predicted=bubbles.bubble_fraction(len(records), m), held=held))
    return out


def bubble_figure(rows: list[dict]) -> Figure:
    """Lesson 06: measured bubble against ``(p - 1) / (m + p - 1)`` as m grows, per schedule."""
    fig = Figure(figsize=(NARROW, 3.2), layout="constrained")
    ax = fig.add_subplot()
    for schedule, marker in (("gpipe", "o"), ("1f1b", "s")):
        mine = [r for r in rows if r["schedule"] == schedule]
        if mine:
            ax.plot([r["m"] for r in mine], [r["measured"] for r in mine], marker=marker, label=f"{schedule}, measured")
    ms = sorted({r["m"] for r in rows})
    p = len(rows[0]["held"])
    ax.plot(ms, [bubbles.bubble_fraction(p, m) for m in ms], color=GREY, linestyle="--",
            label=f"(p-1)/(m+p-1), p = {p}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble (idle fraction)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=9, frameon=False)
    return fig


def pipeline_explorer(runs: dict, step: int = -1) -> LiveFigure:
    """Lesson 06: choose a schedule and a number of micro-batches; see the run and the prediction.

    ``runs = {(schedule, m): records}`` from real launches (one per choice).
    """
    names = sorted({s for s, _ in runs})
    ms = sorted({m for _, m in runs})
    schedule = W.Dropdown(options=names, value=names[0], description="schedule")
    micro = W.SelectionSlider(options=ms, value=ms[len(ms) // 2], description="micro-batches",
                              style={"description_width": "initial"})

    def measured(name, m):
        records = runs.get((name, m))
        return schedules.timeline(records, step % len(records[0].steps)) if records else None

    def draw(name, m):
        return timeline_figure(measured(name, m), name, m)

    def describe(name, m):
        got = measured(name, m)
        p = len(got) if got else 2
        text = f"{name}, m = {m}: predicted bubble {bubbles.bubble_fraction(p, m):.0%}"
        return text + (f", measured {schedules.bubble(got):.0%}" if got else " (not run)")

    return LiveFigure([schedule, micro], draw, describe)


# -------------------------------------------------------------------------------------------
# one number per run (repeats are compared by distlab.verdict), and where the idle time went
# -------------------------------------------------------------------------------------------
def run_bubble(records, skip: int = 2) -> float:
    """Lesson 06: one run's bubble, one number: the median over its steps after the first ``skip``
    (the first steps also pay for first-time set-up).  The steps of one run share their start-up,
    their neighbours on the machine and their moment, so they are not independent samples: two
    schedules are compared over *repeated runs*, one ``run_bubble`` each, by the course's one rule
    (``distlab.verdict``)."""
    steps = range(min(skip, len(records[0].steps) - 1), len(records[0].steps))
    return statistics.median(schedules.bubble(schedules.timeline(records, s)) for s in steps)


def idle_breakdown(records, skip: int = 2) -> list[dict]:
    """Lesson 06: where each stage's time went in a step, median over the steps after ``skip``.

    Per stage, as fractions of the step's span (first pass start to last pass end, as in
    ``schedules.bubble``): ``compute`` (its forwards and backwards), ``recv`` (inside a receive:
    waiting for the other stage's message and copying it) and ``other`` (the rest: mostly the
    wait after the stage's last pass of the step, the drain, where it waits for its sends to be
    received; also posting sends and the Python between passes); plus ``busy_s``, the stage's compute seconds, so that
    unequal stages show.  The textbook bubble counts none of ``recv``'s or ``other``'s causes.
    """
    n = len(records[0].steps)
    rows = [dict(compute=[], recv=[], other=[], busy_s=[]) for _ in records]
    order = sorted(range(len(records)), key=lambda i: records[i].config.get("stage", records[i].rank))
    for step in range(min(skip, n - 1), n):
        line = schedules.timeline(records, step)
        t0 = min(t["start"] for row in line for t in row)
        t1 = max(t["end"] for row in line for t in row)
        for s, i in enumerate(order):
            busy = sum(t["end"] - t["start"] for t in line[s])
            recv = sum(max(0.0, min(e["end"], t1) - max(e["start"], t0))
                       for e in records[i].events if e["step"] == step and e["kind"] == "recv")
            rows[s]["compute"].append(busy / (t1 - t0))
            rows[s]["recv"].append(recv / (t1 - t0))
            rows[s]["other"].append(1 - (busy + recv) / (t1 - t0))
            rows[s]["busy_s"].append(busy)
    return [{k: statistics.median(v) for k, v in row.items()} for row in rows]
