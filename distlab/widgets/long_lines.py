"""Lesson 12's pictures: the line split across ranks, drawn from what the ranks recorded.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  A line as the model reads it
(``line_figure``), then four pictures:

- ``ring_animation``: the K/V blocks travelling round the ring, hop by hop, replayed from the
  messages each rank logged (``record.ring["log"]``), as lesson 03 replays its ring all-reduce;
- ``mask_figure``: the causal attention mask in blocks of chunks, each block coloured by the rank
  that computed it (``record.ring["computed"]``), contiguous beside zig-zag, with each rank's
  measured attention time under it;
- ``memory_figure``: the activations a rank keeps against the length of the line, predicted by
  ``sequence.memory`` (lines) and counted on the ranks (points), for each way of splitting;
- ``holdings_table``: the shape of what each rank holds at each point of a block (``record.shapes``),
  for TP beside TP+SP: where the line is whole, where it is in pieces, where the width is.
"""
from __future__ import annotations

import math

import ipywidgets as W
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from .display import GREY, NARROW, WIDTH, LiveFigure, figure_png, rank_colour


# ---- the ring ----------------------------------------------------------------------------------
def ring_frames(records) -> list[dict]:
    """Lesson 12: hop by hop, which chunks of K and V each rank holds and where it sends them next.

    From the forward messages of the first block (each rank logs one per hop): at hop ``h`` a rank
    holds what it sends then; at the last hop it holds what its left neighbour sent it before."""
    n = len(records)
    forward = [[m for m in r.ring["log"] if m["phase"] == "forward"][:n - 1] for r in records]
    frames = []
    for hop in range(n):
        holding, sends = [], []
        for r in range(n):
            if hop < n - 1:
                holding.append(forward[r][hop]["chunks"])
                sends.append((r, forward[r][hop]["to"], forward[r][hop]["bytes"]))
            else:
                holding.append(forward[(r - 1) % n][hop - 1]["chunks"] if n > 1 else [r])
        frames.append({"hop": hop, "holding": holding, "sends": sends})
    return frames


def ring_figure(records, hop: int) -> Figure:
    """Lesson 12: the ranks in a circle at ``hop``: each one's own query chunks, the K/V chunks it holds."""
    n, frames = len(records), ring_frames(records)
    frame, mine = frames[hop], frames[0]["holding"]         # at hop 0 each rank holds its own chunks' K, V
    # wide and low: a notebook stretches a widget's picture to its width, and the slider, the picture
    # and the play button must fit on one laptop screen together
    fig = Figure(figsize=(WIDTH, 3.3), layout="constrained")
    ax = fig.add_subplot()
    where = [(1.9 * math.cos(math.pi / 2 - 2 * math.pi * r / n), math.sin(math.pi / 2 - 2 * math.pi * r / n))
             for r in range(n)]                   # an ellipse: the ring, laid out wide
    for r, (x, y) in enumerate(where):
        ax.add_patch(Rectangle((x - 0.45, y - 0.2), 0.9, 0.4, color=rank_colour(r), alpha=0.25))
        ax.text(x, y + 0.08, f"rank {r}: queries {mine[r]}", ha="center", fontsize=9)
        ax.text(x, y - 0.1, f"holds K, V {frame['holding'][r]}", ha="center", fontsize=9, weight="bold")
    for src, dst, nbytes in frame["sends"]:
        (x0, y0), (x1, y1) = where[src], where[dst]
        ax.add_patch(FancyArrowPatch((x0 * 0.7, y0 * 0.7), (x1 * 0.7, y1 * 0.7), arrowstyle="-|>",
                                     mutation_scale=14, color=rank_colour(src), connectionstyle="arc3,rad=-0.2"))
    ax.set_xlim(-2.6, 2.6)
    ax.set_ylim(-1.3, 1.3)
    ax.axis("off")
    nbytes = frame["sends"][0][2] if frame["sends"] else 0
    ax.set_title(f"hop {hop} of {n - 1}: every rank attends its queries to the K, V it holds"
                 + (f", then passes them on ({nbytes:,} bytes each)" if frame["sends"] else ": the last one"),
                 fontsize=9, loc="left")
    return fig


def ring_animation(records) -> LiveFigure:
    """Lesson 12: step through the hops of one ring-attention forward pass (a slider and a play button)."""
    if not records[0].ring.get("log"):
        raise ValueError("these records carry no ring messages: train with context > 1 and attention='ring'")
    last = len(records) - 1
    slider = W.IntSlider(value=0, min=0, max=last, description="hop")
    play = W.Play(value=0, min=0, max=last, interval=1500, description="play")
    W.jslink((play, "value"), (slider, "value"))
    return LiveFigure([slider], lambda hop: ring_figure(records, hop), lambda hop: describe_ring(records),
                      extra=[play], cache=True)


def describe_ring(records) -> str:
    """The whole forward pass of the ring as text (what a viewer without widgets reads)."""
    lines = []
    for f in ring_frames(records):
        held = "; ".join(f"rank {r} {c}" for r, c in enumerate(f["holding"]))
        lines.append(f"hop {f['hop']}: {held}")
    return "\n".join(lines)


# ---- who computes which block of the mask ------------------------------------------------------
def mask_owner(records) -> dict[tuple[int, int], int]:
    """Lesson 12: (query chunk, key chunk) -> the rank that computed that block of scores."""
    return {tuple(pair): r.rank for r in records for pair in r.ring["computed"]}


def mask_figure(runs: dict) -> Figure:
    """Lesson 12: ``runs`` maps a name ("contiguous", "zigzag") to one causal run's records: the mask in
    chunks coloured by rank (white: hidden by the mask, never computed), and each rank's attention time."""
    fig = Figure(figsize=(WIDTH, 4.6), layout="constrained")
    grid = fig.add_gridspec(2, len(runs), height_ratios=[3, 1.2])
    for k, (name, records) in enumerate(runs.items()):
        owner, chunks = mask_owner(records), records[0].ring["chunks"]
        ax = fig.add_subplot(grid[0, k])
        for (qc, kc), r in owner.items():
            ax.add_patch(Rectangle((kc, qc), 1, 1, color=rank_colour(r), alpha=0.85))
        ax.set_xlim(0, chunks)
        ax.set_ylim(chunks, 0)
        ax.set_aspect("equal")
        ax.set_xticks(range(chunks + 1))
        ax.set_yticks(range(chunks + 1))
        ax.set_xlabel("key chunk")
        ax.set_ylabel("query chunk")
        ax.set_title(f"{name}: {chunks} chunks, colour = the rank that computed the block", fontsize=9, loc="left")
        bars = fig.add_subplot(grid[1, k])
        times = [r.ring["attention_seconds"] * 1e3 for r in records]
        bars.bar(range(len(records)), times, color=[rank_colour(r.rank) for r in records])
        bars.set_xticks(range(len(records)), [f"rank {r.rank}" for r in records])
        bars.set_ylabel("attention, ms")
        bars.set_title(f"slowest / fastest: {max(times) / min(times):.2f} (one step, measured)", fontsize=9,
                       loc="left")
    return fig


# ---- memory against the line's length ----------------------------------------------------------
def memory_figure(points: dict, budget: int | None = None) -> Figure:
    """Lesson 12: ``points`` maps a way of splitting to ``[(tokens, predicted bytes, measured bytes), ...]``
    (measured ``None`` where nothing was counted: the model's line only); ``budget`` a rank's bytes, drawn
    across.  Both axes are logarithmic: the line's length doubles, and attention's scores grow as its square."""
    fig = Figure(figsize=(NARROW, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for k, (name, rows) in enumerate(points.items()):
        rows = sorted(rows, key=lambda row: row[0])
        colour = rank_colour(k)
        ax.plot([t for t, _, _ in rows], [p / 2**20 for _, p, _ in rows], color=colour, label=f"{name} (model)")
        counted = [(t, m) for t, _, m in rows if m is not None]
        if counted:
            ax.plot([t for t, _ in counted], [m / 2**20 for _, m in counted], "o", color=colour,
                    label=f"{name} (counted)")
    if budget is not None:
        ax.axhline(budget / 2**20, color=GREY, linestyle="--", label="a rank's budget")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    # plain numbers on both axes: a log axis labels itself with TeX-like text (2^6, 10^1), whose fonts a
    # fresh environment (Binder's) may lack, and says so on stderr
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("tokens in a line")
    ax.set_ylabel("activations per rank, MiB")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(color=GREY, alpha=0.3)
    return fig


# ---- one line, as the model reads it ---------------------------------------------------------------
def line_figure(tokens, digits, valid: bool, patch: int = 2) -> Figure:
    """Lesson 12: one line of handwriting put back together from its tokens (``(k * 16, patch * patch)``,
    each digit's patches row by row, as ``sequence.lines.to_tokens`` cut them), with the patches outlined:
    what the transformer reads as a sequence, and the labels it must predict."""
    k, side = len(digits), 8
    per_row = side // patch
    image = tokens.reshape(k, per_row, per_row, patch, patch).permute(1, 3, 0, 2, 4).reshape(side, k * side)
    fig = Figure(figsize=(WIDTH, 1.3), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(image.numpy(), cmap="Greys", interpolation="nearest")
    for x in range(0, k * side + 1, patch):
        ax.axvline(x - 0.5, color=GREY, linewidth=0.4 if x % side else 1.5)
    for y in range(0, side + 1, patch):
        ax.axhline(y - 0.5, color=GREY, linewidth=0.4)
    ax.set_xticks([i * side + side / 2 - 0.5 for i in range(k)], [str(int(d)) for d in digits])
    ax.set_yticks([])
    ax.set_title(f"{k} digits, {len(tokens)} tokens of {patch}x{patch} pixels; the last digit repeats the first: "
                 f"{'yes, the line checks out' if valid else 'no, a wrong check digit'}", fontsize=9, loc="left")
    return fig


# ---- what each rank holds where ------------------------------------------------------------------
def holdings_table(runs: dict) -> str:
    """Lesson 12: ``runs`` maps a name ("TP", "TP + SP") to its records: per point of the first block, the
    shape each rank held, (lines, tokens, width), as a text table."""
    out = []
    for name, records in runs.items():
        out.append(f"{name} ({len(records)} ranks): shape (lines, tokens, width) each rank holds")
        for i, (point, _) in enumerate(records[0].shapes):
            shapes = "  ".join(f"rank {r.rank} {str(r.shapes[i][1]):>14}" for r in records)
            out.append(f"  {point:<14} {shapes}")
    return "\n".join(out)


def holdings_png(runs: dict) -> bytes:
    """The same table as a picture (for a widget's or a saved notebook's output)."""
    text = holdings_table(runs)
    fig = Figure(figsize=(WIDTH, 0.22 * (text.count("\n") + 2)), layout="constrained")
    fig.text(0.01, 0.98, text, family="monospace", fontsize=9, va="top")
    return figure_png(fig)
