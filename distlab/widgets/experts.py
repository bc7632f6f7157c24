"""Lesson 13's pictures: where every token went, drawn from what the experts' ranks recorded.

Introduced in lesson 13 (experts: a bigger model for the same compute).  Four pictures, each read
from the records of a run (``parallelize.trainer``; the numbers under them from ``experts.measure``):

- ``load_explorer``: tokens asked of each expert, step by step, as a heatmap, with the requests
  dropped for want of capacity under it; two runs side by side (with and without the balancing loss);
- ``matrix_player``: the all-to-all of one step as a rank-to-rank matrix of tokens (the diagonal
  never leaves its rank), replayed over training with a slider;
- ``router_explorer``: a few test lines with each 2x2 patch coloured by the expert its router chose;
- ``timeline_player``: one MoE layer's forward on every rank, part by part: the ranks that sent
  requests to the rank whose experts finish last wait for it in the combine; that rank itself may
  end first.
"""
from __future__ import annotations

import ipywidgets as W
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..experts import measure
from .display import GREY, OKABE_ITO, PART_COLOURS, WIDTH, LiveFigure

EXPERT_COLOURS = OKABE_ITO[:7]
PART = {"route": GREY, "counts": PART_COLOURS["waiting"], "dispatch": PART_COLOURS["communication"],
        "experts": PART_COLOURS["compute"], "combine": OKABE_ITO[0]}


def _blocks(records) -> list[int]:
    return list(range(len(records[0].routing[0])))


def _block_buttons(records) -> W.ToggleButtons:
    return W.ToggleButtons(options=[(f"block {b}", b) for b in _blocks(records)], value=0, description="layer")


# ---- tokens per expert, step by step ---------------------------------------------------------------
def load_figure(runs: dict, block: int) -> Figure:
    """Lesson 13: ``runs`` maps a name to its records; for each, a heatmap of the requests each expert got
    in every step at ``block`` (all ranks together) and, under it, the requests dropped in that step."""
    fig = Figure(figsize=(WIDTH, 3.6), layout="constrained")
    grid = fig.add_gridspec(2, len(runs), height_ratios=[3, 1])
    top = max(max(measure.asked(r, s, block)) for r in runs.values() for s in range(len(r[0].routing)))
    for i, (name, records) in enumerate(runs.items()):
        steps = len(records[0].routing)
        load = np.array([measure.asked(records, s, block) for s in range(steps)]).T
        ax = fig.add_subplot(grid[0, i])
        image = ax.imshow(load, aspect="auto", cmap="viridis", vmin=0, vmax=top, interpolation="nearest")
        ax.set_yticks(range(load.shape[0]), [f"expert {e}" for e in range(load.shape[0])])
        ax.set_xticks([])
        ratio = measure.settled(measure.imbalance(records, block))["mean"]
        ax.set_title(f"{name}, block {block}: busiest / mean over the last 10 steps = {ratio:.2f}", fontsize=9,
                     loc="left")
        low = fig.add_subplot(grid[1, i], sharex=ax)
        low.bar(range(steps), [sum(r.routing[s][block]["dropped"] for r in records) for s in range(steps)],
                color=PART_COLOURS["waiting"], width=0.9)
        low.set_xlabel("training step")
        low.set_ylabel("dropped")
    fig.colorbar(image, ax=fig.axes[0::2], label="requests (tokens x k)", shrink=0.8)
    return fig


def describe_load(runs: dict, block: int) -> str:
    return "; ".join(f"{name}: requests per expert at the last step {measure.asked(r, -1, block)}"
                     for name, r in runs.items())


def load_explorer(runs: dict) -> LiveFigure:
    """Lesson 13: the heatmaps of ``load_figure``, one layer at a time."""
    first = next(iter(runs.values()))
    return LiveFigure([_block_buttons(first)], lambda b: load_figure(runs, b), lambda b: describe_load(runs, b))


# ---- the all-to-all, rank to rank ------------------------------------------------------------------
def matrix_figure(records, step: int, block: int) -> Figure:
    """Lesson 13: tokens sent from each rank (row) to each rank (column) in ``step`` at ``block``, and
    the requests each expert got then against the capacity line."""
    m = np.array(measure.matrix(records, step, block))
    n = len(m)
    fig = Figure(figsize=(WIDTH, 3.0), layout="constrained")
    ax, bars = fig.subplots(1, 2, width_ratios=[1, 1.4])
    ax.imshow(m, cmap="Blues", vmin=0, vmax=max(int(m.max()), 1))
    for i in range(n):
        for j in range(n):
            ax.text(j, i, str(m[i, j]), ha="center", va="center", fontsize=9,
                    color="white" if m[i, j] > 0.6 * m.max() else "black")
    ax.set_xticks(range(n), [f"to {j}" for j in range(n)])
    ax.set_yticks(range(n), [f"from {i}" for i in range(n)])
    crossed = int(m.sum() - np.trace(m))
    ax.set_title(f"step {step}: {crossed} of {int(m.sum())} requests cross ranks", fontsize=9, loc="left")
    asked = measure.asked(records, step, block)
    bars.bar(range(len(asked)), asked, color=EXPERT_COLOURS[:len(asked)])
    per_rank = len(asked) // n
    bars.set_xticks(range(len(asked)), [f"expert {e}\n(rank {e // per_rank})" for e in range(len(asked))])
    bars.set_ylabel("requests")
    bars.set_ylim(0, max(max(asked), 1) * 1.15)
    dropped = sum(r.routing[step][block]["dropped"] for r in records)
    bars.set_title(f"requests per expert (all ranks' tokens); dropped: {dropped}", fontsize=9, loc="left")
    return fig


def matrix_player(records) -> LiveFigure:
    """Lesson 13: the all-to-all matrix over training (a slider, a play button, the layer)."""
    last = len(records[0].routing) - 1
    slider = W.IntSlider(value=0, min=0, max=last, description="step")
    play = W.Play(value=0, min=0, max=last, interval=700, description="play")
    W.jslink((play, "value"), (slider, "value"))
    return LiveFigure([slider, _block_buttons(records)], lambda s, b: matrix_figure(records, s, b),
                      lambda s, b: (f"step {s}, block {b}: requests from rank i to rank j "
                                    f"{measure.matrix(records, s, b)}"),
                      extra=[play], cache=True)


# ---- which expert reads which stroke -------------------------------------------------------------
def router_figure(router: dict, block: int, patch: int = 2) -> Figure:
    """Lesson 13: the record's example test lines, each patch tinted with the expert its router chose."""
    tokens, digits, choice = router["tokens"], router["digits"], router["choice"][block]
    lines, side, per_row = len(tokens), 8, 8 // patch
    k = tokens.shape[1] // per_row ** 2
    experts = router["experts"]
    fig = Figure(figsize=(WIDTH, 1.3 * ((lines + 1) // 2) + 0.6), layout="constrained")
    for i, ax in enumerate(fig.subplots((lines + 1) // 2, 2, squeeze=False).reshape(-1)[:lines]):
        image = tokens[i].reshape(k, per_row, per_row, patch, patch).permute(1, 3, 0, 2, 4).reshape(side, k * side)
        tint = choice[i].reshape(k, per_row, per_row).permute(1, 0, 2).reshape(per_row, k * per_row)
        tint = np.kron(tint.numpy(), np.ones((patch, patch)))
        ax.imshow(tint, cmap=ListedColormap(EXPERT_COLOURS[:experts]), vmin=-0.5, vmax=experts - 0.5,
                  interpolation="nearest", alpha=0.55)
        ax.imshow(np.ma.masked_less(image.numpy(), 0.05), cmap="Greys", interpolation="nearest", alpha=0.85)
        ax.set_xticks([d * side + side / 2 - 0.5 for d in range(k)], [str(int(d)) for d in digits[i][:k]])
        ax.set_yticks([])
    fig.legend(handles=[Patch(color=EXPERT_COLOURS[e], alpha=0.55, label=f"expert {e}") for e in range(experts)],
               loc="outside lower center", ncols=experts, fontsize=9)
    fig.suptitle(f"block {block}: each 2x2 patch tinted by the expert the router sends it to first", fontsize=9)
    return fig


def router_explorer(router: dict) -> LiveFigure:
    """Lesson 13: ``router_figure``, one layer at a time."""
    buttons = W.ToggleButtons(options=[(f"block {b}", b) for b in range(len(router["choice"]))], value=0,
                              description="layer")
    return LiveFigure([buttons], lambda b: router_figure(router, b),
                      lambda b: f"block {b}: tokens per expert in the example lines "
                                f"{np.bincount(router['choice'][b].reshape(-1).numpy()).tolist()}")


# ---- who waited for the busiest expert -----------------------------------------------------------
def timeline_figure(records, step: int, block: int) -> Figure:
    """Lesson 13: each rank's forward through the MoE layer ``block`` in ``step``, part by part."""
    rows = measure.timeline(records, step, block)
    served = [sum(r.routing[step][block]["matrix"][j] for r in records) for j in range(len(records))]
    fig = Figure(figsize=(WIDTH, 0.5 * len(rows) + 1.3), layout="constrained")
    ax = fig.add_subplot()
    for rank, parts in enumerate(rows):
        for part, (a, b) in parts.items():
            ax.barh(rank, (b - a) * 1e3, left=a * 1e3, color=PART[part], height=0.6)
    ax.set_yticks(range(len(rows)), [f"rank {j}: {served[j]} requests" for j in range(len(rows))])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the first rank began routing")
    most, least = int(np.argmax(served)), int(np.argmin(served))
    ax.set_title(f"step {step}, block {block}: rank {most}'s experts served the most requests, rank {least}'s "
                 f"the fewest; in an exchange a rank waits until the ranks it trades with get there", fontsize=9,
                 loc="left")
    ax.legend(handles=[Patch(color=c, label=p) for p, c in PART.items()], ncols=5, fontsize=8, loc="lower right")
    return fig


def timeline_player(records) -> LiveFigure:
    """Lesson 13: ``timeline_figure`` for any step and layer."""
    slider = W.IntSlider(value=len(records[0].routing) - 1, min=0, max=len(records[0].routing) - 1,
                         description="step")
    return LiveFigure([slider, _block_buttons(records)], lambda s, b: timeline_figure(records, s, b),
                      lambda s, b: f"step {s}, block {b}: each rank's forward through the experts' layer")
