"""Pictures for lesson 02 (Horovod): the same training on two backends, side by side.

Introduced in ``notebooks/02_horovod.ipynb``.  Every ``StepRecord`` carries the time a step
started, the time its backward pass ended and the time its update ended, so each step
splits in two parts:

* **forward + backward**: with DistributedDataParallel and with Horovod's
  ``DistributedOptimizer`` the all-reduces *start* in here (a hook fires as each gradient
  is ready), so part of the communication hides inside this bar;
* **after backward**: by hand, the all-reduces themselves and the update; with Horovod's
  ``DistributedOptimizer``, waiting for the all-reduces it started, then the update; with
  DDP, the update only.

For each run we take, at every step, the slowest rank (the others wait for it at the next
all-reduce), then the mean over the chosen steps: means add up (the two parts make the
step) and turn into samples per second.  Leave out the first steps to see the steady state
(warm-up steps are slower: processes meet, Horovod negotiates each tensor before its
response cache remembers it).
Like every widget in distlab, this module only reads records; it never trains.
"""
from __future__ import annotations

import statistics

import ipywidgets as W
from matplotlib.figure import Figure

from .display import BACKEND_COLOURS, BLACK, PART_COLOURS, WIDTH, LiveFigure

# a step split in two, in the colours of what mostly happens in each part
SPLIT_COLOURS = {"forward + backward": PART_COLOURS["compute"], "after backward": PART_COLOURS["communication"]}
METHOD_STYLES = {"by_hand": "--", "ddp": "-"}


def step_split(records, steps: tuple[int, int] | None = None) -> dict[str, float]:
    """Lesson 02: mean milliseconds per step, split in two parts (slowest rank per step)."""
    first, last = steps or (0, len(records[0].steps) - 1)
    parts = {"forward + backward": [], "after backward": [], "step": []}
    for i in range(first, last + 1):
        rank_steps = [r.steps[i] for r in records]
        slowest = max(rank_steps, key=lambda s: s.t_end - s.t_start)
        parts["forward + backward"].append(slowest.t_compute_end - slowest.t_start)
        parts["after backward"].append(slowest.t_end - slowest.t_compute_end)
        parts["step"].append(slowest.t_end - slowest.t_start)
    return {k: 1e3 * statistics.fmean(v) for k, v in parts.items()}


def label(records) -> str:
    """Lesson 02: how a run is named in the table and the legends ("torchrun · DDP")."""
    r = records[0]
    wrapper = {"torchrun": "DDP", "horovod": "DistributedOptimizer"}.get(r.backend, r.method)
    return f"{r.backend} · {'by hand' if r.method == 'by_hand' else wrapper}"


def comparison_table(runs: list, steps: tuple[int, int] | None = None) -> str:
    """Lesson 02: one line per run: mean step time, its two parts, and samples per second."""
    lines = []
    for records in runs:
        split = step_split(records, steps)
        batch = sum(r.config["batch_size"] for r in records)
        lines.append(f"{label(records):32s} step {split['step']:6.2f} ms = forward+backward "
                     f"{split['forward + backward']:6.2f} + after backward {split['after backward']:6.2f}"
                     f"   -> {1e3 * batch / split['step']:8.0f} samples/s")
    return "\n".join(lines)


def comparison_figure(runs: list, steps: tuple[int, int] | None = None) -> Figure:
    """Lesson 02: left, the mean step of each run split in two; right, every step's duration."""
    first, last = steps or (0, len(runs[0][0].steps) - 1)
    fig = Figure(figsize=(WIDTH, 0.55 * len(runs) + 2.6))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    names = [label(records) for records in runs]
    for y, records in enumerate(runs):
        split, start = step_split(records, (first, last)), 0.0
        for part, colour in SPLIT_COLOURS.items():
            left.barh(y, split[part], left=start, color=colour, label=part if y == 0 else None)
            start += split[part]
        left.text(start, y, f" {start:.1f} ms", va="center", fontsize=9)
    left.set_yticks(range(len(runs)), names, fontsize=9)
    left.invert_yaxis()
    left.set_xlabel("mean time per step (ms), slowest rank")
    left.set_xlim(0, 1.3 * max(step_split(r, (first, last))["step"] for r in runs))
    left.legend(fontsize=8, frameon=False, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    for records in runs:
        durations = [1e3 * max(r.steps[i].t_end - r.steps[i].t_start for r in records)
                     for i in range(first, last + 1)]
        right.plot(range(first, last + 1), durations, METHOD_STYLES.get(records[0].method, "-"),
                   color=BACKEND_COLOURS.get(records[0].backend, BLACK), lw=1.2, label=label(records))
    right.set_yscale("log")
    right.set_xlabel("step")
    right.set_ylabel("time per step (ms, log scale)")
    right.legend(fontsize=8, frameon=False, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    fig.suptitle(f"the same training on two backends, steps {first} to {last}", fontsize=11)
    fig.tight_layout()
    return fig


def comparison_widget(runs: list, steps: tuple[int, int] | None = None) -> LiveFigure:
    """Lesson 02: the comparison, with a slider for the steps it looks at (warm-up in or out)."""
    n = len(runs[0][0].steps)
    first, last = steps or (min(10, n - 1), n - 1)
    slider = W.IntRangeSlider(value=(first, last), min=0, max=n - 1, description="steps",
                              continuous_update=False, layout=W.Layout(width="60%"))

    def table(steps):
        return comparison_table(runs, tuple(steps))

    return LiveFigure([slider], lambda steps: comparison_figure(runs, tuple(steps)), table, caption=table)
