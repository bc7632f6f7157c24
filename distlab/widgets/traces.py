"""One traced step, rank by rank: what the profiler saw each rank compute and communicate.

Introduced in lesson 15 (Where the time goes).  ``measure.traces`` has every rank profile one step
with ``torch.profiler`` and reads the trace files back as plain intervals (``timeline``: dicts of
``rank``, ``kind``, ``name``, ``thread``, ``start``, ``end``, seconds since the first rank started the
step).  This module only draws them: one row per rank, its computation in the upper half of the row
(the main thread's operators, or a GPU's kernels), its communication in the lower half (the collective
on gloo's own threads, its launch on the main thread), so that a collective drawn under a gap in the
computation is *exposed* (the rank waits for it) and one under computation is hidden.  The whole
trace, operator by operator, opens in https://ui.perfetto.dev.

Like every widget in distlab, this module only reads data; it never trains.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .display import PART_COLOURS, WIDTH

COLOURS = {"compute": PART_COLOURS["compute"], "communication": PART_COLOURS["communication"]}
HALF = {"compute": (-0.4, 0.38), "communication": (0.02, 0.38)}    # each kind's (offset, height) in a row


def trace_figure(timeline: list[dict], exposed: dict[int, float] | None = None, title: str | None = None):
    """Lesson 15: the traced step on every rank (``measure.traces.timeline``); x in milliseconds.

    ``exposed`` (``measure.traces.exposed_by_rank``): each rank's exposed communication in seconds,
    written at the end of its row.  Returns a matplotlib ``Figure`` (not attached to pyplot)."""
    if not timeline:
        raise ValueError("no intervals to draw: pass measure.traces.timeline(...) of the ranks' traces")
    unknown = {i["kind"] for i in timeline} - set(COLOURS)
    if unknown:
        raise ValueError(f"intervals of unknown kind {sorted(unknown)}: the kinds are {', '.join(COLOURS)}")
    ranks = sorted({i["rank"] for i in timeline})
    fig = Figure(figsize=(WIDTH, 0.9 + 0.75 * len(ranks)), layout="constrained")
    ax = fig.add_subplot()
    end = max(i["end"] for i in timeline) * 1e3
    for row, rank in enumerate(ranks):
        for kind, (offset, height) in HALF.items():
            bars = [(i["start"] * 1e3, max(i["end"] - i["start"], 0.0) * 1e3)
                    for i in timeline if i["rank"] == rank and i["kind"] == kind]
            ax.broken_barh(bars, (row + offset, height), color=COLOURS[kind])
        if exposed is not None and rank in exposed:
            ax.text(end * 1.01, row, f"exposed\n{exposed[rank] * 1e3:.2f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set_xlim(0, end * (1.12 if exposed else 1.02))
    ax.set_xlabel("time since the first rank started the traced step (ms)")
    ax.set_title(title or "one traced step: computation (upper half of a row), communication (lower half)",
                 fontsize=10)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return fig

