"""Per-rank timelines: when each rank computed, talked, and waited for the others.

Introduced in lesson 04 ("Keeping workers in sync").  Every ``StepRecord`` of a
``method="by_hand"`` run carries five ``time.time()`` stamps (start, end of compute, entering
the all-reduce, leaving it, end of the step).  The ranks of one machine share one clock, so
the stamps of different ranks can be laid side by side: one row per rank, one group of bars
per step.

**Waiting**, as this module measures it.  An all-reduce cannot finish before the *last*
rank has entered it, so for each step::

    last_in   = max over ranks of t_comm_start
    wait[r]   = last_in - t_comm_start[r]        (0 for the last rank to arrive)
    transfer  = t_comm_end[r] - last_in          (moving and adding the numbers)

A rank that arrives early spends ``wait`` doing nothing: that is the barrier effect, and
what a slow rank (a *straggler*) costs everybody else.

Asynchronous workers (``method="async"``, lesson 04's parameter server) never meet the
others; their communication bar is their exchange with the server (push a gradient, get
the new parameters back), drawn in its own colour.

The lesson's other pictures live here too: ``convergence_figure`` (loss and accuracy of a
synchronous and an asynchronous run against updates, samples or seconds, as read from the
records by ``curve_sync`` and ``curve_async``) and ``staleness_figure`` (how old the
asynchronous gradients were).

Like every widget in distlab, this module only reads records; it never trains.
"""
from __future__ import annotations

import ipywidgets as W
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .display import METHOD_COLOURS, NARROW, PART_COLOURS, WIDTH, LiveFigure, rank_colour

COLOURS = {"compute": PART_COLOURS["compute"], "waiting": PART_COLOURS["waiting"],
           "all-reduce": PART_COLOURS["communication"], "server exchange": PART_COLOURS["server exchange"]}


# -------------------------------------------------------------------------------------------
# numbers from records
# -------------------------------------------------------------------------------------------
def waits(records) -> np.ndarray:
    """Lesson 04: seconds each rank waited at each step's all-reduce, shape (ranks, steps).

    ``wait[r, s] = max over ranks of t_comm_start[s] - t_comm_start[r, s]``: the time from
    rank r entering the all-reduce until the last rank entered it.  NaN at steps without an
    all-reduce on every rank (DDP overlaps it with backward, local SGD skips steps).
    """
    if not records or any(r.method == "async" for r in records):
        raise ValueError("waits needs the records of a synchronous run (one per rank); "
                         "asynchronous workers never wait for each other")
    n = min(len(r.steps) for r in records)
    starts = np.array([[np.nan if s.t_comm_start is None else s.t_comm_start for s in r.steps[:n]]
                       for r in records], dtype=float)
    complete = ~np.isnan(starts).any(axis=0)          # steps where every rank all-reduced
    out = np.full(starts.shape, np.nan)
    out[:, complete] = starts[:, complete].max(axis=0) - starts[:, complete]
    return out


def mean_wait(records, skip: int = 1) -> list[float]:
    """Lesson 04: each rank's mean wait per all-reduce (seconds), leaving out the first
    ``skip`` steps (the first step also pays for start-up and is not typical)."""
    w = waits(records)[:, skip:]
    if np.isnan(w).all():
        raise ValueError("no step left with an all-reduce on every rank")
    return [float(np.nanmean(row)) for row in w]


def phases(record, wait=None) -> list[dict]:
    """Lesson 04: the bars of one rank's timeline: a list of ``{"step", "phase", "start", "end"}``.

    ``phase`` is "compute", "waiting", "all-reduce" or "server exchange".  ``wait`` is this
    rank's row of ``waits(records)``; without it an all-reduce is drawn as one bar.
    """
    bars = []
    for i, s in enumerate(record.steps):
        bars.append(dict(step=s.step, phase="compute", start=s.t_start, end=s.t_compute_end))
        if s.t_comm_start is None:
            continue
        if record.method == "async":
            bars.append(dict(step=s.step, phase="server exchange", start=s.t_comm_start,
                             end=s.t_comm_end))
            continue
        w = 0.0 if wait is None or i >= len(wait) or np.isnan(wait[i]) else float(wait[i])
        if w > 0:
            bars.append(dict(step=s.step, phase="waiting", start=s.t_comm_start,
                             end=s.t_comm_start + w))
        bars.append(dict(step=s.step, phase="all-reduce", start=min(s.t_comm_start + w, s.t_comm_end),
                         end=s.t_comm_end))
    return bars


# -------------------------------------------------------------------------------------------
# the picture
# -------------------------------------------------------------------------------------------
def timeline_figure(records, steps: tuple[int, int] | None = None, title: str | None = None):
    """Lesson 04: one row per rank, bars for compute / waiting / all-reduce, steps ``first..last``.

    Returns a matplotlib ``Figure`` (not attached to pyplot, so nothing leaks into a cell).
    The x axis is milliseconds since the first shown step started on any rank.  Asynchronous
    workers do not keep step with each other, so for them the picture shows everything that
    happened between the start of step ``first`` and the end of step ``last`` on any worker
    (a fast worker fits many steps into a slow one's few).
    """
    n_steps = min(len(r.steps) for r in records)
    first, last = steps if steps is not None else (0, n_steps - 1)
    if not 0 <= first <= last < n_steps:
        raise ValueError(f"steps must satisfy 0 <= first <= last < {n_steps}, got {steps!r}")
    origin = min(r.steps[first].t_start for r in records)
    end = max(r.steps[last].t_end for r in records)
    fig = Figure(figsize=(WIDTH, 0.7 + 0.55 * len(records)), layout="constrained")
    ax = fig.add_subplot()
    synchronous = all(r.method != "async" for r in records)
    w = waits(records) if synchronous else [None] * len(records)
    used = set()
    for row, record in enumerate(records):
        for bar in phases(record, w[row]):
            if synchronous and not first <= bar["step"] <= last:
                continue
            a, b = max(bar["start"], origin), min(bar["end"], end)   # clip to the window
            if b <= a:
                continue
            used.add(bar["phase"])
            ax.broken_barh([((a - origin) * 1e3, (b - a) * 1e3)], (row - 0.35, 0.7),
                           color=COLOURS[bar["phase"]])
    ax.set_yticks(range(len(records)), [f"{'worker' if r.method == 'async' else 'rank'} {r.rank}"
                                        for r in records])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first shown step started (ms)")
    ax.set_title(title or f"steps {first}-{last}", fontsize=10)
    ax.legend(handles=[Patch(color=c, label=p) for p, c in COLOURS.items() if p in used],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return fig


def timeline_widget(records, steps: tuple[int, int] | None = None, title: str | None = None):
    """Lesson 04: the timeline with a step-range slider (static PNG for viewers without widgets)."""
    n = min(len(r.steps) for r in records)
    slider = W.IntRangeSlider(value=steps or (min(1, n - 1), min(8, n - 1)), min=0, max=n - 1,
                              description="steps", continuous_update=False,
                              layout=W.Layout(width="60%"))
    return LiveFigure([slider], lambda v: timeline_figure(records, tuple(v), title),
                      lambda v: f"<timeline of {len(records)} ranks, steps {v[0]}-{v[1]} of {n}>")


def straggler_widget(run, delays_ms=(0, 5, 10, 20, 40), value_ms: int = 20, steps: tuple[int, int] = (1, 6)):
    """Lesson 04: a slider for how much slower the straggler is; each value is a real run.

    ``run(seconds)`` is handed in by the lesson: it launches a short job whose rank 1 sleeps
    ``seconds`` per step and returns its records (on warm ranks it answers in a fraction of a
    second).  Each delay runs once; moving back to it shows the run already recorded.
    """
    if value_ms not in delays_ms:
        raise ValueError(f"value_ms must be one of {delays_ms}, got {value_ms!r}")
    runs = {}

    def records(delay_ms):
        if delay_ms not in runs:
            runs[delay_ms] = run(delay_ms / 1e3)
        return runs[delay_ms]

    def caption(delay_ms):
        wait = mean_wait(records(delay_ms))
        return (f"straggler {delay_ms} ms slower per step: rank 0 waits {wait[0] * 1e3:.1f} ms per step, "
                f"rank 1 {wait[1] * 1e3:.1f} ms (the last to arrive waits for nobody)")

    slider = W.SelectionSlider(options=list(delays_ms), value=value_ms, description="straggler ms",
                               continuous_update=False, style={"description_width": "initial"})
    return LiveFigure([slider], lambda d: timeline_figure(records(d), steps, f"rank 1 is {d} ms slower per step"),
                      lambda d: f"<straggler slider: real runs with rank 1 {d} ms slower per step>",
                      caption=caption)


# -------------------------------------------------------------------------------------------
# synchronous against asynchronous SGD
# -------------------------------------------------------------------------------------------
X_AXES = {"updates": "updates applied", "samples": "training samples used",
          "seconds": "seconds since training started"}


def curve_async(server, window: int | None = None) -> dict[str, list[float]]:
    """Lesson 04: loss and accuracy per update, against updates, samples seen and seconds.

    ``server`` is the ``ServerRecord`` of ``async_sgd.train``.  Loss and accuracy are the
    workers' mini-batch values, averaged over a sliding ``window`` of updates (default: the
    number of workers, one "round"), so that they compare with a synchronous step, which
    averages that many mini-batches.
    """
    window = window or server.config["workers"]
    b = server.config["batch_size"]
    ups = server.updates

    def smooth(values):
        return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
                for i in range(len(values))]

    return dict(updates=[u.version for u in ups], samples=[u.version * b for u in ups],
                seconds=[u.time - server.t_first for u in ups],
                loss=smooth([u.loss for u in ups]), accuracy=smooth([u.accuracy for u in ups]))


def curve_sync(records) -> dict[str, list[float]]:
    """Lesson 04: the same curves for a synchronous run: one update per step of all ranks.

    The loss of a step is the mean of the ranks' mini-batch losses (the loss of the global
    batch); seconds count from the first rank's first step.
    """
    n = min(len(r.steps) for r in records)
    t0 = min(r.steps[0].t_start for r in records)
    per_step = sum(r.config["batch_size"] for r in records)
    return dict(updates=[s + 1 for s in range(n)], samples=[(s + 1) * per_step for s in range(n)],
                seconds=[max(r.steps[s].t_end for r in records) - t0 for s in range(n)],
                loss=[sum(r.steps[s].loss for r in records) / len(records) for s in range(n)],
                accuracy=[sum(r.steps[s].accuracy for r in records) / len(records) for s in range(n)])


def convergence_figure(sync_records, server, x: str = "samples"):
    """Lesson 04: mini-batch loss and accuracy of a synchronous and an asynchronous run.

    ``x`` is "updates", "samples" or "seconds".  Curves come from ``curve_sync`` and
    ``curve_async`` (read the records, nothing else).
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    runs = [(f"synchronous: {len(sync_records)} ranks, all-reduce "
             f"(one run: test accuracy {sync_records[0].test_accuracy:.2f})", curve_sync(sync_records),
             METHOD_COLOURS.get(sync_records[0].method, METHOD_COLOURS["by_hand"])),
            (f"asynchronous: {server.config['workers']} workers + server "
             f"(one run: test accuracy {server.test_accuracy:.2f})", curve_async(server), METHOD_COLOURS["async"])]
    fig = Figure(figsize=(WIDTH, 3.2), layout="constrained")
    for i, metric in enumerate(("loss", "accuracy")):
        ax = fig.add_subplot(1, 2, i + 1)
        for label, curve, colour in runs:
            ax.plot(curve[x], curve[metric], color=colour, label=label)
        ax.set_xlabel(X_AXES[x])
        ax.set_ylabel(f"mini-batch {metric}")
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="outside lower center", fontsize=8)
    return fig


def convergence_widget(sync_records, server, x: str = "samples"):
    """Lesson 04: ``convergence_figure`` with buttons to switch the x axis."""
    buttons = W.ToggleButtons(options=list(X_AXES), value=x, description="x axis")
    return LiveFigure([buttons], lambda v: convergence_figure(sync_records, server, v),
                      lambda v: f"<loss and accuracy against {v}: synchronous vs asynchronous>")


def staleness_figure(server):
    """Lesson 04: how stale the applied gradients were, one group of bars per worker."""
    workers = sorted({u.worker for u in server.updates})
    top = max(server.staleness)
    fig = Figure(figsize=(NARROW, 2.8), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(workers)
    for i, w in enumerate(workers):
        mine = [u.staleness for u in server.updates if u.worker == w]
        counts = [mine.count(s) for s in range(top + 1)]
        ax.bar(np.arange(top + 1) + (i - (len(workers) - 1) / 2) * width, counts, width,
               color=rank_colour(w), label=f"worker {w} (mean {np.mean(mine):.1f})")
    ax.set_xlabel("staleness (updates applied between pull and push)")
    ax.set_ylabel("gradients")
    ax.legend(fontsize=9, frameon=False)
    return fig
