"""One run, launched three ways: from the notebook, from a terminal, on two nodes (lesson 09).

Introduced in lesson 09 ("From laptop to cluster").  The lesson runs one config three times:
``distlab.launch(path)`` in the notebook, ``distlab run`` in a terminal (torchrun), and torchrun on
two "nodes" (network namespaces).  The parameters come out equal every time; what differs is how
long each launch takes around the same training steps, and where the all-reduce's bytes travel.
This module reads the three runs' records (and the wall time the lesson measured around each
launch) and draws them side by side.

**The all-reduce alone.**  A rank's ``t_comm_end - t_comm_start`` counts the time it waited for
the other rank to arrive too, so bytes over that span is no bandwidth.  The ranks of one machine
share one clock (the two "nodes" are namespaces of one machine), so for each step::

    alone = min over ranks of t_comm_end - max over ranks of t_comm_start

the time from the last rank's arrival to the first rank's departure: the part nobody spent
waiting (lesson 04's ``waits`` splits each rank's span the same way).  On a real cluster the
nodes' clocks differ by more than a step, and this subtraction would need a barrier before each
timed transfer instead.

Like every widget in distlab, this module only reads records; it never trains.
"""
from __future__ import annotations

import statistics

import numpy as np
from matplotlib.figure import Figure

from .display import GREY, OKABE_ITO, PART_COLOURS, WIDTH


def steps_seconds(records) -> float:
    """Lesson 09: seconds from the first step's start on any rank to the last step's end on any rank."""
    return max(r.steps[-1].t_end for r in records) - min(r.steps[0].t_start for r in records)


def all_reduce_seconds(records, skip: int = 2) -> dict:
    """Lesson 09: per all-reduce, the median span a rank saw (waiting included) and the all-reduce alone.

    ``skip`` leaves out the first steps (start-up: connections opened, memory first touched).
    Returns ``{"span": median over steps and ranks, "alone": list over steps, "bytes": gradient bytes}``.
    """
    n = min(len(r.steps) for r in records)
    if n <= skip:
        raise ValueError(f"the run has {n} steps: nothing left after skipping {skip}")
    if any(s.t_comm_start is None for r in records for s in r.steps[skip:n]):
        raise ValueError("these records have no separate all-reduce times (method ddp overlaps it with "
                         "backward): use method by_hand or fused")
    span = statistics.median(s.t_comm_end - s.t_comm_start for r in records for s in r.steps[skip:n])
    alone = [min(r.steps[i].t_comm_end for r in records) - max(r.steps[i].t_comm_start for r in records)
             for i in range(skip, n)]
    size = sum(t.numel() * t.element_size() for t in records[0].params.values())
    return {"span": span, "alone": alone, "bytes": size}


def launches_figure(runs: dict):
    """Lesson 09: ``{name: (records, wall_seconds)}`` side by side: losses, and where each launch's time went.

    Left: rank 0's loss at every step of each launch (equal runs draw one line).  Right: each
    launch's wall time split into the training steps (from the records) and everything around
    them (starting processes, importing PyTorch, the rendezvous, saving the records).
    """
    fig = Figure(figsize=(WIDTH, 3.0), layout="constrained")
    loss_ax, time_ax = fig.subplots(1, 2, width_ratios=[1, 1.3])
    names = list(runs)
    markers = ["o", "s", "^", "D"]
    for i, name in enumerate(names):
        records, _ = runs[name]
        r0 = records[0]
        loss_ax.plot([s.step for s in r0.steps], [s.loss for s in r0.steps], marker=markers[i % len(markers)],
                     markersize=9 - 2.5 * i, linestyle="-" if i == 0 else "none", color=OKABE_ITO[i],
                     label=f"{name} ({len(records)} ranks)")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("rank 0's loss")
    loss_ax.set_title("the same losses, step for step", fontsize=10)
    loss_ax.legend(fontsize=9, frameon=False)
    rows = np.arange(len(names))
    steps = np.array([steps_seconds(runs[n][0]) for n in names])
    walls = np.array([runs[n][1] for n in names])
    time_ax.barh(rows, steps, color=PART_COLOURS["compute"], label="training steps")
    time_ax.barh(rows, np.maximum(walls - steps, 0), left=steps, color=GREY, label="everything around them")
    for row, (s, w) in enumerate(zip(steps, walls)):
        time_ax.text(w, row, f" {w:.1f} s ({s:.2f} s of steps)", va="center", fontsize=9)
    time_ax.set_yticks(rows, names)
    time_ax.invert_yaxis()
    time_ax.set_xlim(0, walls.max() * 1.45)
    time_ax.set_xlabel("wall time of the launch (s)")
    time_ax.set_title("where each launch's time went", fontsize=10)
    time_ax.legend(fontsize=9, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncols=2)
    return fig
