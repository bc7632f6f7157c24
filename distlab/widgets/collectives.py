"""Pictures for lesson 03 (combining gradients), drawn from the message logs of real runs.

Introduced in ``notebooks/03_combining_gradients.ipynb``.

- ``animation(trace)``: step through an all-reduce.  One row per rank, one cell per number
  of its tensor; a cell's colours are the ranks whose numbers are already added into it
  (worked out by replaying the real message log), its text is the number the rank really
  held (recorded on the rank).  Arrows are that step's messages, labelled with the chunk
  and the bytes.  The ring shows its chunks filling in; the parameter server its fan-in
  and fan-out.
- ``traffic_figure(traces)``: the bytes each rank really sent, per algorithm.
  (The cost model's pictures are in ``widgets/costs.py``.)

Each view is a live widget *and*, for viewers without a widget manager (nbval, GitHub,
nbviewer), a PNG plus a plain-text account.  Like every widget in distlab, this module only
reads records; it never runs a collective.
"""
from __future__ import annotations

import math

import ipywidgets as W
from matplotlib.figure import Figure
from matplotlib.patheffects import withStroke
from matplotlib.collections import PatchCollection
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..comm.cost_model import BASELINE, PHASE_ORDER, bytes_sent
from ..predict import alpha_beta as M
from ..predict.alpha_beta import ALGORITHMS
from .display import ALGORITHM_COLOURS, NARROW, WIDTH, LiveFigure, figure_png, rank_colour

# each algorithm's colour, marker and line style, the same in every picture
ALGORITHM_STYLE = {name: (ALGORITHM_COLOURS[name], marker, line) for name, marker, line in
                   [("naive", "s", ":"), ("parameter_server", "^", "--"), ("ring", "o", "-"),
                    ("tree", "D", "-."), (BASELINE, "x", "")]}
EXPLAIN = {"reduce": "partial sums travel towards rank 0 and are added",
           "push": "every worker pushes its whole tensor to the server (rank 0), which adds them",
           "reduce-scatter": "each rank adds the chunk it receives into its own",
           "all-gather": "finished chunks travel on and are stored",
           "pull": "the server sends the sum back to every worker",
           "broadcast": "the sum travels out and is stored"}


# ---------------------------------------------------------------------------------------------
# replaying a trace
# ---------------------------------------------------------------------------------------------
def _chunk_starts(trace: dict) -> list[int]:
    """Where each of the N chunks of ``tensor_split`` begins (and, last, where the tensor ends)."""
    starts = [0]
    for size in M.chunk_sizes(len(trace["inputs"][0]), trace["world_size"]):
        starts.append(starts[-1] + size)
    return starts


def _cells(message: dict, starts: list[int]) -> range:
    """The positions a message carried: its chunk, or the whole tensor."""
    c = message["chunk"]
    return range(starts[-1]) if c is None else range(starts[c], starts[c + 1])


def frames(trace: dict) -> list[dict]:
    """Lesson 03: the state of every rank before the first step and after each step of a merged trace.

    ``values[r][i]`` is the number rank r held (the recorded ``after`` of the last message
    it received, else its input); ``who[r][i]`` the ranks whose input is added into it.
    """
    n_ranks, numel, starts = trace["world_size"], len(trace["inputs"][0]), _chunk_starts(trace)
    values = [list(v) for v in trace["inputs"]]
    who = [[{r} for _ in range(numel)] for r in range(n_ranks)]
    out = [{"phase": "start", "step": None, "messages": [], "values": [list(v) for v in values],
            "who": [[set(s) for s in row] for row in who]}]
    steps = sorted({(PHASE_ORDER.index(m["phase"]), m["step"]) for m in trace["messages"]})
    for phase_index, step in steps:
        phase = PHASE_ORDER[phase_index]
        messages = [m for m in trace["messages"] if m["phase"] == phase and m["step"] == step]
        before = [[set(s) for s in row] for row in who]
        for m in messages:
            for i, value in zip(_cells(m, starts), m["after"]):
                values[m["dst"]][i] = value
                who[m["dst"]][i] = (who[m["dst"]][i] | before[m["src"]][i] if phase in M.REDUCING
                                    else set(before[m["src"]][i]))
        out.append({"phase": phase, "step": step, "messages": messages,
                    "values": [list(v) for v in values], "who": [[set(s) for s in row] for row in who]})
    return out


def frame_title(trace: dict, frame: dict) -> str:
    """Lesson 03: what a frame shows, in words (its title)."""
    name = trace["algorithm"].replace("_", " ")
    if frame["phase"] == "start":
        return f"{name}, {trace['world_size']} ranks: every rank starts with its own numbers"
    total = 1 + max(m["step"] for m in trace["messages"] if m["phase"] == frame["phase"])
    return f"{frame['phase']} step {frame['step'] + 1} of {total}: {EXPLAIN[frame['phase']]}"


def _number(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.3g}"


def describe(trace: dict) -> str:
    """Lesson 03: the whole animation as text: what each rank holds after each step."""
    n_ranks = trace["world_size"]
    sent = bytes_sent(trace["messages"], n_ranks)
    lines = [f"{trace['algorithm']} all-reduce on {n_ranks} ranks: {len(trace['messages'])} messages, "
             f"bytes sent per rank {sent}"]
    edges = _chunk_starts(trace) if trace["algorithm"] == "ring" else [0, len(trace["inputs"][0])]
    for f in frames(trace):
        lines.append(frame_title(trace, f))
        for r in range(n_ranks):
            chunks = [" ".join(_number(v) for v in f["values"][r][a:b]) for a, b in zip(edges, edges[1:])]
            lines.append(f"  rank {r}: " + " | ".join(chunks))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# drawing one frame, and all of them
# ---------------------------------------------------------------------------------------------
def draw_frame(ax, trace: dict, frame: dict, changed: set | None = None) -> None:
    """Lesson 03: one state: rows of cells (colours = contributing ranks, text = the number), arrows = messages."""
    n_ranks, numel = trace["world_size"], len(trace["inputs"][0])
    edges = _chunk_starts(trace)                           # chunk c spans edges[c]..edges[c+1]
    bars, colours, cells, widths = [], [], [], []          # drawn as two collections: fast
    for r in range(n_ranks):
        y = n_ranks - 1 - r
        ax.text(-0.25, y + 0.5, f"rank {r}", ha="right", va="center", fontsize=9, fontweight="bold")
        bars.append(Rectangle((-0.22, y + 0.1), 0.12, 0.8))
        colours.append(rank_colour(r))
        for i in range(numel):
            ranks = sorted(frame["who"][r][i])
            for k, source in enumerate(ranks):     # the bottom of the cell: one colour per contributor
                bars.append(Rectangle((i + k / len(ranks), y + 0.05), 1 / len(ranks), 0.38))
                colours.append(rank_colour(source))
            cells.append(Rectangle((i, y + 0.05), 1, 0.9))
            widths.append(2.4 if (r, i) in (changed or ()) else 0.6)
            ax.text(i + 0.5, y + 0.68, _number(frame["values"][r][i]), ha="center", va="center", fontsize=8)
        if trace["algorithm"] == "ring":
            for b in edges[1:-1]:
                ax.plot([b, b], [y, y + 1], color="black", lw=2.5)
    ax.add_collection(PatchCollection(bars, facecolors=colours, linewidths=0))
    ax.add_collection(PatchCollection(cells, facecolors="none", edgecolors="black", linewidths=widths))
    for m in frame["messages"]:                           # arrows on the right, one per message
        y_src, y_dst = n_ranks - 0.5 - m["src"], n_ranks - 0.5 - m["dst"]
        bend = 0.35 + 0.12 * abs(m["src"] - m["dst"])
        ax.add_patch(FancyArrowPatch((numel + 0.15, y_src), (numel + 0.15, y_dst),
                                     connectionstyle=f"arc3,rad={-bend if y_dst < y_src else bend}",
                                     arrowstyle="-|>", mutation_scale=12, lw=1.4,
                                     color=rank_colour(m["src"]),
                                     path_effects=[withStroke(linewidth=2.6, foreground="black")]))
    if trace["algorithm"] == "ring":
        for c in range(n_ranks):
            ax.text((edges[c] + edges[c + 1]) / 2, n_ranks + 0.1, f"chunk {c}", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xlim(-1.3, numel + 1.6)
    ax.set_ylim(-0.1, n_ranks + 0.5)
    ax.set_axis_off()


def _changed_cells(trace, frame) -> set:
    starts = _chunk_starts(trace)
    return {(m["dst"], i) for m in frame["messages"] for i in _cells(m, starts)}


def _message_text(frame) -> str:
    parts = [f"{m['src']}\u2192{m['dst']}" + ("" if m["chunk"] is None else f" chunk {m['chunk']}")
             + f" ({m['bytes']} B)" for m in frame["messages"]]
    return "messages: " + ", ".join(parts) if parts else "no messages yet"


def frame_figure(trace: dict, index: int) -> Figure:
    """Lesson 03: frame ``index`` of the animation as a figure."""
    frame = frames(trace)[index]
    n_ranks, numel = trace["world_size"], len(trace["inputs"][0])
    fig = Figure(figsize=(min(WIDTH, 2.6 + 0.75 * numel), 0.9 + 0.55 * n_ranks), layout="constrained")
    ax = fig.add_subplot()
    draw_frame(ax, trace, frame, _changed_cells(trace, frame))
    ax.set_title(frame_title(trace, frame) + "\n" + _message_text(frame), fontsize=9, loc="left")
    return fig


def storyboard_figure(trace: dict, columns: int = 2) -> Figure:
    """Lesson 03: every frame of the animation at once (the static picture)."""
    all_frames = frames(trace)
    n_ranks = trace["world_size"]
    rows = math.ceil(len(all_frames) / columns)
    fig = Figure(figsize=(WIDTH, rows * (0.75 + 0.42 * n_ranks)), layout="constrained")
    for k, frame in enumerate(all_frames):
        ax = fig.add_subplot(rows, columns, k + 1)
        draw_frame(ax, trace, frame, _changed_cells(trace, frame))
        ax.set_title(f"{k}. " + frame_title(trace, frame).split(":")[0], fontsize=8, loc="left")
    fig.suptitle(f"{trace['algorithm'].replace('_', ' ')} all-reduce on {n_ranks} ranks, step by step "
                 "(cell colours: the ranks whose numbers are in it)", fontsize=10)
    return fig


def animation(trace: dict) -> LiveFigure:
    """Lesson 03: step through one algorithm's merged trace (``distlab.collective_runs.merge_traces``).

    A step slider above the picture, a play button below it; frames are drawn once and kept.
    Without a widget manager the cell shows every frame at once and the whole run as text.
    """
    if not trace["messages"] and trace["world_size"] > 1:
        raise ValueError("this trace has no messages: was it recorded with trace_values=True?")
    if any("after" not in m for m in trace["messages"]):
        raise ValueError("the messages carry no values: record them with collective_runs.trace")
    last = len(frames(trace)) - 1
    slider = W.IntSlider(value=0, min=0, max=last, description="step")
    play = W.Play(value=0, min=0, max=last, interval=1400, description="play")
    W.jslink((play, "value"), (slider, "value"))
    return LiveFigure([slider], lambda step: frame_figure(trace, step), lambda _: describe(trace),
                      extra=[play], cache=True,
                      static=lambda: figure_png(storyboard_figure(trace), dpi=64))


# ---------------------------------------------------------------------------------------------
# what it costs: bytes and time, model and measurement
# ---------------------------------------------------------------------------------------------
def traffic_figure(traces: dict) -> Figure:
    """Lesson 03: the bytes each rank sent in real runs, in units of the tensor's size."""
    fig = Figure(figsize=(NARROW, 2.8), layout="constrained")
    ax = fig.add_subplot()
    names = [a for a in ALGORITHMS if a in traces]
    n_ranks = traces[names[0]]["world_size"]
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        t = traces[name]
        tensor_bytes = 8 * len(t["inputs"][0])
        sent = [b / tensor_bytes for b in bytes_sent(t["messages"], n_ranks)]
        colour, marker, _ = ALGORITHM_STYLE[name]
        xs = [r + (k - (len(names) - 1) / 2) * width for r in range(n_ranks)]
        ax.bar(xs, sent, width, color=colour, label=name.replace("_", " "),
               hatch=["", "//", "..", "xx"][k % 4], edgecolor="white")
    ax.set_xticks(range(n_ranks), [f"rank {r}" for r in range(n_ranks)])
    ax.set_ylabel("bytes sent / tensor size")
    ax.set_title(f"what each rank sent in the real runs ({n_ranks} ranks)", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    return fig
