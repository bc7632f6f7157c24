"""Lesson 10: Horovod's own timeline, drawn: what its background thread did with every tensor.

Introduced in ``notebooks/10_failure_is_normal_at_scale.ipynb``.  ``distlab.long_runs.horovod_timeline``
reads the Chrome trace rank 0 writes (``logging.horovod_timeline: true``); this module draws it,
so that a learner sees in the notebook what ``chrome://tracing`` would show: one row per tensor,
one panel per round (the broadcast of the parameters, then one all-reduce per step), each phase
in its colour, and a tick where each rank said the tensor was ready.  A negotiation lasts until
the *last* rank is ready: the distance from the first tick to the last is waiting.

Like every widget here it only reads records (the trace file); it never trains.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..long_runs.horovod_timeline import read_ready, read_timeline, rounds
from .display import BLUE, GREEN, GREY, VERMILLION, WIDTH, rank_colour

# the outer phases fill a row; the inner ones (inside ALLREDUCE / BROADCAST) a thinner bar on top
OUTER = {"NEGOTIATE": VERMILLION, "ALLREDUCE": GREY, "BROADCAST": GREY}
INNER = {"GLOO": GREEN, "MEMCPY": BLUE, "INIT": GREY}
LEGEND = [("negotiate: until every rank is ready", VERMILLION), ("all-reduce / broadcast", GREY),
          ("the transfer (GLOO_...)", GREEN), ("copy in/out of the fusion buffer", BLUE)]


def _colour(phase: str) -> tuple[str, bool]:
    """The phase's colour and whether it is an inner phase."""
    head = phase.split("_")[0]
    if head in INNER:
        return INNER[head], True
    return OUTER.get(head, GREY), False


def timeline_figure(path: str, ranks: int = 2) -> Figure:
    """Lesson 10: the trace at ``path`` as one panel per round, one row per tensor, time in ms."""
    groups = rounds(read_timeline(path), read_ready(path))
    if not groups:
        raise ValueError(f"{path} holds no Horovod phases")
    tensors = sorted({s["tensor"].split(".", 1)[-1] for g in groups for s in g})
    row = {t: i for i, t in enumerate(tensors)}
    fig = Figure(figsize=(WIDTH, 1.2 + 0.32 * len(tensors)), layout="constrained")
    axes = fig.subplots(1, len(groups), sharey=True, squeeze=False)[0]
    for k, (ax, group) in enumerate(zip(axes, groups)):
        t0 = min(s["start_us"] for s in group)
        for s in group:
            y, x = row[s["tensor"].split(".", 1)[-1]], (s["start_us"] - t0) / 1000
            if s["phase"] == "ready":
                ax.plot([x], [y], marker="D", markersize=6, markeredgecolor="black", zorder=3,
                        color=rank_colour(s["rank"]))
                continue
            colour, inner = _colour(s["phase"])
            ax.barh(y, max(s["microseconds"] / 1000, 1e-3), left=x, height=0.3 if inner else 0.7,
                    color=colour, edgecolor="none")
        broadcast = group[0]["tensor"].startswith("broadcast")
        steps_before = sum(not g[0]["tensor"].startswith("broadcast") for g in groups[:k])
        title = "broadcast of the parameters" if broadcast else f"all-reduce, step {steps_before + 1}"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("ms from the round's start")
    axes[0].set_yticks(range(len(tensors)), tensors, fontsize=8)
    axes[0].invert_yaxis()
    handles = [Patch(color=c, label=label) for label, c in LEGEND]
    handles += [Line2D([], [], marker="D", linestyle="", markersize=6, markeredgecolor="black", color=rank_colour(r),
                       label=f"rank {r} ready") for r in range(ranks)]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return fig
