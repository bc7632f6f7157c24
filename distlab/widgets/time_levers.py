"""Lesson 15's pictures: buckets of gradients against the backward pass, and what each way left exposed.

Introduced in lesson 15 (where the time goes).  ``measure.exposed`` hands over plain numbers read from
the ranks' own records: per way, per rank, the end of backward, the wait after it, and every bucket's
launch and the moment its wait returned.  A bucket drawn inside the compute bar travelled while backward
ran (hidden); the wait after backward is the part that was not (exposed).  Like every widget in distlab,
this module only reads records; it never trains.
"""
from __future__ import annotations

import statistics

import ipywidgets as W
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .display import NARROW, PART_COLOURS, WIDTH, LiveFigure

COLOURS = {"backward (and forward)": PART_COLOURS["compute"], "bucket in flight": PART_COLOURS["communication"],
           "wait after backward": PART_COLOURS["waiting"]}


def timeline_figure(timeline: list[dict], title: str = "") -> Figure:
    """Lesson 15: one row per rank: compute, the wait after it, and under them each bucket from launch to the
    return of its wait (``measure.exposed.bucket_timeline``), in milliseconds from the step's start."""
    fig = Figure(figsize=(WIDTH, 1.0 + 0.9 * len(timeline)), layout="constrained")
    ax = fig.add_subplot()
    for row, r in enumerate(timeline):
        y = len(timeline) - 1 - row
        ax.broken_barh([(r["compute"][0], r["compute"][1] - r["compute"][0])], (y + 0.45, 0.4),
                       color=COLOURS["backward (and forward)"])
        if r["wait"]:
            ax.broken_barh([(r["wait"][0], r["wait"][1] - r["wait"][0])], (y + 0.45, 0.4),
                           color=COLOURS["wait after backward"])
        n = max(len(r["buckets"]), 1)
        for i, (_, launched, done, _) in enumerate(r["buckets"]):
            ax.broken_barh([(launched, max(done - launched, 0.05))], (y + 0.4 * i / n, 0.4 / n * 0.8),
                           color=COLOURS["bucket in flight"])
    ax.set_yticks([len(timeline) - 1 - i + 0.5 for i in range(len(timeline))],
                  [f"rank {r['rank']}" for r in timeline])
    ax.set_xlabel("milliseconds from the start of the step")
    ax.set_title(title or "each bucket from its launch to the end of its wait, against backward")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def describe_timeline(timeline: list[dict]) -> str:
    """The same, in words (what a viewer without widgets reads)."""
    lines = []
    for r in timeline:
        wait = r["wait"][1] - r["wait"][0] if r["wait"] else float("nan")
        lines.append(f"rank {r['rank']}: backward ended at {r['compute'][1]:.1f} ms, then waited {wait:.1f} ms; "
                     f"{len(r['buckets'])} buckets, the first launched at "
                     + (f"{r['buckets'][0][1]:.1f} ms" if r["buckets"] else "none"))
    return "\n".join(lines)


def timeline_explorer(timelines: dict[str, list[dict]]) -> LiveFigure:
    """Lesson 15: a menu of the ways (``{way: timeline}``), each drawn as ``timeline_figure``."""
    menu = W.Dropdown(options=list(timelines), description="way")
    return LiveFigure([menu], lambda way: timeline_figure(timelines[way], way),
                      lambda way: describe_timeline(timelines[way]), cache=True)


def sweep_figure(summary: dict[str, dict], title: str = "") -> Figure:
    """Lesson 15: per way, every round's exposed communication (dots) and their mean (bar), in milliseconds,
    with each way's step time alongside (``measure.exposed.summarise``); DDP has a step time only."""
    names = list(summary)
    fig = Figure(figsize=(NARROW + 3, 3.2), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    for ax, key, label in ((left, "exposed", "exposed communication (ms)"), (right, "step", "step (ms)")):
        for i, name in enumerate(names):
            values = summary[name][key]
            if not values:
                continue
            ms = [v * 1e3 for v in values]
            ax.barh(i, statistics.fmean(ms), color=PART_COLOURS["waiting" if key == "exposed" else "compute"],
                    alpha=0.6)
            ax.plot(ms, [i] * len(ms), "k.", markersize=5)
        ax.set_xlabel(label)
    left.set_yticks(range(len(names)), names)
    left.invert_yaxis()
    fig.suptitle(title or "each dot one round; bars: their mean")
    return fig


def roofline_figure(peak: float, bandwidth: float, points: dict[str, dict], title: str = "") -> Figure:
    """Lesson 15: the roofline of this machine (``min(peak, intensity x bandwidth)``, both axes logarithmic) and
    each run's step on it (``measure.roofline.place_on_roofline``: intensity estimated, FLOP/s measured)."""
    import numpy as np

    fig = Figure(figsize=(NARROW + 2, 3.6), layout="constrained")
    ax = fig.add_subplot()
    lowest = min([p["intensity"] for p in points.values()] + [peak / bandwidth]) / 4
    highest = max([p["intensity"] for p in points.values()] + [peak / bandwidth]) * 4
    x = np.geomspace(lowest, highest, 200)
    ax.loglog(x, np.minimum(peak, x * bandwidth) / 1e9, color=PART_COLOURS["compute"], label="the roof (measured)")
    ax.axvline(peak / bandwidth, color="0.6", linestyle=":", label=f"ridge: {peak / bandwidth:.1f} FLOPs a byte")
    for name, p in points.items():
        ax.loglog(p["intensity"], p["achieved"] / 1e9, "o", color=PART_COLOURS["waiting"])
        ax.annotate(f"{name}\nMFU {p['mfu']:.3f}", (p["intensity"], p["achieved"] / 1e9), textcoords="offset points",
                    xytext=(6, -4), fontsize=9)
    ax.set_xlabel("arithmetic intensity: FLOPs counted / bytes moved (an estimate)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or "this machine's roofline, and each run's step on it")
    ax.legend(loc="lower right", frameon=False)
    return fig
