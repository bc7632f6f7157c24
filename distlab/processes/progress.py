"""Live per-rank progress while a job runs: a bar per rank in a notebook, plain lines in a terminal.

Introduced in lesson 01.  Workers never print into the notebook (under some front-ends
their output is lost); they append JSON lines to ``progress_<rank>.jsonl`` in the run
folder (``Worker.progress``) and the launcher, in the notebook's own process, reads those
files and redraws.
"""
from __future__ import annotations

import os
import sys
import time

from ..long_runs.metrics import JsonLines


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets can be shown)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class ProgressReader:
    """Lesson 01: the latest progress line of each rank of a job."""

    def __init__(self, run_dir: str, world_size: int):
        self.files = [JsonLines(os.path.join(run_dir, f"progress_{r}.jsonl")) for r in range(world_size)]
        self.latest: list[dict | None] = [None] * world_size

    def poll(self) -> bool:
        """Read what is new; return True when any rank moved."""
        moved = False
        for r, lines in enumerate(f.read() for f in self.files):
            if lines:
                self.latest[r], moved = lines[-1], True
        return moved


def describe(p: dict | None) -> str:
    if p is None:
        return "starting..."
    extra = " ".join(f"{k} {v:.3g}" for k, v in p.items() if k not in ("rank", "step", "total", "time"))
    return f"step {p['step']}/{p['total']} {extra}".strip()


class WidgetProgress:
    """One ipywidgets bar per rank."""

    def __init__(self, world_size: int, title: str):
        import ipywidgets as W
        from IPython.display import display

        self.bars = [W.IntProgress(value=0, min=0, max=1, description=f"rank {r}",
                                   layout=W.Layout(width="45%")) for r in range(world_size)]
        self.labels = [W.Label("starting...") for _ in range(world_size)]
        rows = [W.HBox([b, lab]) for b, lab in zip(self.bars, self.labels)]
        self.box = W.VBox([W.HTML(f"<b>{title}</b>")] + rows)
        display(self.box)

    def update(self, latest: list[dict | None]) -> None:
        for bar, label, p in zip(self.bars, self.labels, latest):
            if p is not None:
                bar.max = max(int(p["total"]), 1)
                bar.value = int(p["step"])
            label.value = describe(p)

    def close(self, status: str) -> None:
        self.box.children[0].value += f" &mdash; {status}"
        for bar in self.bars:
            bar.bar_style = "success" if status == "done" else "danger"


class TextProgress:
    """Plain lines, at most one a second, for terminals and logs."""

    def __init__(self, world_size: int, title: str, stream=None):
        self.stream = stream or sys.stdout
        self.last = 0.0
        print(title, file=self.stream, flush=True)

    def update(self, latest: list[dict | None]) -> None:
        now = time.time()
        if now - self.last < 1.0:
            return
        self.last = now
        print("  " + " | ".join(f"rank {r}: {describe(p)}" for r, p in enumerate(latest)),
              file=self.stream, flush=True)

    def close(self, status: str) -> None:
        print(f"  {status}", file=self.stream, flush=True)


class NoProgress:
    def update(self, latest) -> None:
        pass

    def close(self, status: str) -> None:
        pass


def make_progress(mode: str, world_size: int, title: str):
    """``mode``: "auto" (widget in a notebook, text elsewhere), "widget", "text" or "none"."""
    if mode == "auto":
        mode = "widget" if in_notebook() else "text"
    if mode == "widget":
        return WidgetProgress(world_size, title)
    if mode == "text":
        return TextProgress(world_size, title)
    if mode in ("none", None, False):
        return NoProgress()
    raise ValueError(f"progress must be 'auto', 'widget', 'text' or 'none', got {mode!r}")
