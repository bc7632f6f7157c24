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
synchronous and an asynchronous run against updates, samples or seconds) and
``staleness_figure`` (how old the asynchronous gradients were).

Like every widget in distlab, this module only reads records; it never trains.
"""
from __future__ import annotations

import base64
import io

import numpy as np

# Okabe-Ito colours: distinguishable with the common forms of colour blindness.
COLOURS = {"compute": "#0072B2", "waiting": "#D55E00", "all-reduce": "#009E73",
           "server exchange": "#CC79A7"}


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
    """The bars of one rank's timeline: a list of ``{"step", "phase", "start", "end"}``.

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
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    n_steps = min(len(r.steps) for r in records)
    first, last = steps if steps is not None else (0, n_steps - 1)
    if not 0 <= first <= last < n_steps:
        raise ValueError(f"steps must satisfy 0 <= first <= last < {n_steps}, got {steps!r}")
    origin = min(r.steps[first].t_start for r in records)
    end = max(r.steps[last].t_end for r in records)
    fig = Figure(figsize=(9, 0.7 + 0.55 * len(records)), layout="constrained")
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


def figure_png(fig) -> bytes:
    """A figure as PNG bytes (drawn off-screen with Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def as_image(fig):
    """A figure as an IPython ``Image``: shows the picture in a cell, plain text elsewhere."""
    from IPython.display import Image

    return Image(figure_png(fig))


class PictureView:
    """A control (slider, buttons) above a picture that is redrawn whenever it moves.

    Displayed in a notebook it offers the live widget *and* a PNG of the current picture,
    so that viewers without a widget manager (GitHub, nbviewer, a test) still see it.
    ``draw(value)`` returns a figure; ``describe(value)`` the text shown as plain output.
    """

    def __init__(self, control, draw, describe):
        import ipywidgets as W

        self.control, self.draw, self.describe = control, draw, describe
        self.image = W.Image(format="png", value=figure_png(draw(control.value)))
        control.observe(self._redraw, names="value")
        self.box = W.VBox([control, self.image])

    def _redraw(self, change) -> None:
        self.image.value = figure_png(self.draw(change["new"]))

    def __repr__(self) -> str:
        return self.describe(self.control.value)

    def _repr_mimebundle_(self, **kwargs):
        data = self.box._repr_mimebundle_(**kwargs)
        data["text/plain"] = repr(self)
        data["image/png"] = base64.b64encode(self.image.value).decode()
        return data


def timeline_widget(records, steps: tuple[int, int] | None = None, title: str | None = None):
    """Lesson 04: the timeline with a step-range slider (static PNG for viewers without widgets)."""
    import ipywidgets as W

    n = min(len(r.steps) for r in records)
    slider = W.IntRangeSlider(value=steps or (min(1, n - 1), min(8, n - 1)), min=0, max=n - 1,
                              description="steps", continuous_update=False,
                              layout=W.Layout(width="60%"))
    return PictureView(slider, lambda v: timeline_figure(records, tuple(v), title),
                       lambda v: f"<timeline of {len(records)} ranks, steps {v[0]}-{v[1]} of {n}>")


# -------------------------------------------------------------------------------------------
# synchronous against asynchronous SGD
# -------------------------------------------------------------------------------------------
X_AXES = {"updates": "updates applied", "samples": "training samples used",
          "seconds": "seconds since training started"}


def convergence_figure(sync_records, server, x: str = "samples"):
    """Lesson 04: mini-batch loss and accuracy of a synchronous and an asynchronous run.

    ``x`` is "updates", "samples" or "seconds".  Curves come from
    ``async_sgd.curve_sync`` and ``async_sgd.curve_async`` (read the records, nothing else).
    """
    from matplotlib.figure import Figure

    from ..parallel.async_sgd import curve_async, curve_sync

    if x not in X_AXES:
        raise ValueError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    runs = [(f"synchronous: {len(sync_records)} ranks, all-reduce "
             f"(test accuracy {sync_records[0].test_accuracy:.2f})", curve_sync(sync_records), "#0072B2"),
            (f"asynchronous: {server.config['workers']} workers + server "
             f"(test accuracy {server.test_accuracy:.2f})", curve_async(server), "#D55E00")]
    fig = Figure(figsize=(9, 3.2), layout="constrained")
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
    import ipywidgets as W

    buttons = W.ToggleButtons(options=list(X_AXES), value=x, description="x axis")
    return PictureView(buttons, lambda v: convergence_figure(sync_records, server, v),
                       lambda v: f"<loss and accuracy against {v}: synchronous vs asynchronous>")


def staleness_figure(server):
    """Lesson 04: how stale the applied gradients were, one group of bars per worker."""
    from matplotlib.figure import Figure

    workers = sorted({u.worker for u in server.updates})
    top = max(server.staleness)
    fig = Figure(figsize=(7, 2.8), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(workers)
    palette = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"]
    for i, w in enumerate(workers):
        mine = [u.staleness for u in server.updates if u.worker == w]
        counts = [mine.count(s) for s in range(top + 1)]
        ax.bar(np.arange(top + 1) + (i - (len(workers) - 1) / 2) * width, counts, width,
               color=palette[i % len(palette)], label=f"worker {w} (mean {np.mean(mine):.1f})")
    ax.set_xlabel("staleness (updates applied between pull and push)")
    ax.set_ylabel("gradients")
    ax.legend(fontsize=9, frameon=False)
    return fig
