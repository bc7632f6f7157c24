"""Lesson 10's monitor: a running job's loss curves, each rank's progress, and who is behind.

Introduced in ``notebooks/10_failure_is_normal_at_scale.ipynb`` (failure is normal at scale).  The widget
reads what the ranks write down, ``metrics_<rank>.jsonl`` in the run's folder, through
``distlab.long_runs.monitor.RunMonitor``, and nothing else: the same files ``distlab monitor RUN_DIR``
reads in a terminal and that a cluster's job would leave on a shared disk.  So it can watch a job
started anywhere (a terminal, a scheduler, another notebook), and watching never touches the job.

``monitor(run_dir)`` shows, above a table with one row per rank:

- the loss of every rank against its step, with a dotted line where a restart went back to a
  checkpoint (the steps after it were lost, and are trained again);
- each rank's steps done out of its total, the rank that is behind marked, and a straggler
  (a rank that computes much longer a step than the others, which wait for it in every
  all-reduce), for a slow or hung rank is what holds a synchronous job up.

``follow=True`` redraws from a background thread until the job finishes or fails (or
``timeout``); the cell is free meanwhile.  ``wait_until(condition)`` blocks until the job
reaches a point (``lambda s: s.min_step >= 300``), e.g. to kill a worker there on purpose.
``.status`` is the latest ``JobStatus``, for a cell to check.
"""
from __future__ import annotations

import html
import threading
import time

import ipywidgets as W
from matplotlib.figure import Figure

from ..long_runs.monitor import STALL_SECONDS, JobStatus, RunMonitor, job_line
from .display import GREY, VERMILLION, WIDTH, LiveFigure, rank_colour


def monitor_figure(status: JobStatus) -> Figure | None:
    """Lesson 10: each rank's loss against its step, and its steps done (None: nothing read yet)."""
    if not status.ranks:
        return None
    fig = Figure(figsize=(WIDTH, 3.0), layout="constrained")
    loss_ax, step_ax = fig.subplots(1, 2, width_ratios=[2.2, 1])
    for r in status.ranks:
        if r.losses:
            steps, losses = zip(*r.losses)
            loss_ax.plot(steps, losses, color=rank_colour(r.rank), label=f"rank {r.rank}")
    for restart, step in sorted({p for r in status.ranks for p in r.restart_points}):
        loss_ax.axvline(step, color=GREY, linestyle=":")
        loss_ax.annotate(f"restart {restart}", (step, 1), xycoords=("data", "axes fraction"),
                         xytext=(3, -12), textcoords="offset points", fontsize=8, color=GREY)
    if any(r.losses for r in status.ranks):
        loss_ax.legend(fontsize=8, frameon=False)
    else:
        loss_ax.text(0.5, 0.5, "no loss written yet", ha="center", transform=loss_ax.transAxes, color=GREY)
    loss_ax.xaxis.get_major_locator().set_params(integer=True)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("mini-batch loss")
    loss_ax.set_title("loss of each rank (from its metrics file)", fontsize=10)

    ranks = [r.rank for r in status.ranks]
    totals = [r.total or r.step for r in status.ranks]
    step_ax.barh(ranks, totals, color="white", edgecolor=GREY)
    step_ax.barh(ranks, [r.step for r in status.ranks], color=[rank_colour(r) for r in ranks])
    for r in status.ranks:
        behind, slow = r.rank == status.behind, r.rank == status.slowest
        text = f" {r.step}" + (f"  behind by {status.lag}" if behind else "") + ("  straggler" if slow else "")
        step_ax.text(r.step, r.rank, text, va="center", fontsize=9, color=VERMILLION if behind or slow else "black",
                     fontweight="bold" if behind or slow else "normal")
    step_ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    step_ax.invert_yaxis()
    step_ax.set_xlim(0, 1.3 * max(totals + [1]))
    step_ax.set_xlabel("steps done")
    step_ax.set_title(f"job {status.state}", fontsize=10)
    return fig


def status_table(status: JobStatus) -> str:
    """Lesson 10: one HTML row per rank: state, step, loss, speed, age of its last line, restarts."""
    head = ["rank", "state", "step", "loss", "samples/s", "last line", "restarts", "checkpoint"]
    rows = []
    for r in status.ranks:
        cells = [r.rank, r.state, f"{r.step}/{r.total if r.total is not None else '?'}",
                 "—" if r.loss is None else f"{r.loss:.4f}",
                 "—" if r.samples_per_second is None else f"{r.samples_per_second:.0f}",
                 "—" if r.state in ("finished", "stopped") or r.age is None else f"{r.age:.1f} s ago",
                 r.restarts if not r.restarts else f"{r.restarts} (from step {r.resumed_from or 0})",
                 "—" if r.checkpoint is None else f"step {r.checkpoint}"]
        marked = r.rank in (status.behind, status.slowest, *status.stalled, *status.silent)
        style = f' style="color:{VERMILLION};font-weight:bold"' if marked else ""
        rows.append(f"<tr{style}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    rows += [f"<tr><td>{r}</td><td>no metrics here yet</td></tr>" for r in status.missing]
    header = "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def headline(status: JobStatus, note: str = "") -> str:
    """Lesson 10: the job's state and who holds it up, highlighted when something is wrong."""
    bad = status.state in ("failed", "restarting", "stalled") or status.behind is not None or status.slowest is not None
    colour = VERMILLION if bad else "black"
    return f'<b style="color:{colour}">{html.escape(job_line(status) + note)}</b>'


class MonitorWidget(LiveFigure):
    """Lesson 10: the picture, a headline and a table, redrawn while the job runs (see the module)."""

    def __init__(self, run_dir: str, *, follow: bool = True, interval: float = 0.5,
                 stall_seconds: float = STALL_SECONDS, timeout: float = 3600.0):
        self.monitor = RunMonitor(run_dir, stall_seconds=stall_seconds)
        self.monitor.poll()
        self.status = self.monitor.status()
        self.head, self.table = W.HTML(), W.HTML()
        super().__init__([], lambda: monitor_figure(self.status),
                         lambda: f"run monitor of {run_dir}: {job_line(self.status)}",
                         extra=[self.head, self.table])
        self._show_text()
        self._stop = threading.Event()
        self.thread = None
        if follow and not self.status.over:
            self.thread = threading.Thread(target=self._follow, args=(interval, timeout), daemon=True)
            self.thread.start()

    def _show_text(self, note: str = "") -> None:
        self.head.value = headline(self.status, note)
        self.table.value = status_table(self.status)

    def _follow(self, interval: float, timeout: float) -> None:
        """The background thread: read, redraw when a line came, until the job is over."""
        deadline = time.time() + timeout
        while not self._stop.wait(interval):
            moved = self.monitor.poll()
            self.status = self.monitor.status()
            if moved:
                self.redraw()
            if self.status.over:
                break
            if time.time() > deadline:
                self._show_text(f" (stopped following after {timeout:g} s)")
                return
            self._show_text()
        self._show_text()

    def wait_until(self, condition, timeout: float = 60.0, interval: float = 0.2) -> JobStatus:
        """Lesson 10: block until ``condition(status)`` holds (``RunMonitor.wait_until``); return it."""
        status = self.monitor.wait_until(condition, timeout=timeout, interval=interval)
        if self.thread is None:                 # nobody else redraws
            self.status = status
            self.redraw()
            self._show_text()
        return status

    def join(self, timeout: float | None = None) -> JobStatus:
        """Wait for the following thread to end (the job is over, or it timed out); the last status."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.status

    def stop(self) -> None:
        """Stop following (the picture stays as it is)."""
        self._stop.set()
        if self.thread is not None:
            self.thread.join()


def monitor(run_dir: str, follow: bool = True, interval: float = 0.5, stall_seconds: float = STALL_SECONDS,
            timeout: float = 3600.0) -> MonitorWidget:
    """Lesson 10: watch the run in ``run_dir`` from its metrics files (see the module's docstring).

    ``follow=False`` draws once, from what is there now.  The widget's ``.status`` is the
    latest ``distlab.long_runs.monitor.JobStatus``; ``.join()`` waits until following ends and returns it.
    """
    return MonitorWidget(run_dir, follow=follow, interval=interval, stall_seconds=stall_seconds,
                         timeout=timeout)
