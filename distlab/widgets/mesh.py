"""The mesh picture: which rank holds which part of the model, and which ranks talk.

Introduced in lesson 07 ("Tensor and 3D parallelism").  Reads the records of a
``mesh.train`` run: each rank's place in the grid (``config["mesh"]``), its groups
(``config["groups"]``), the parameters it holds (``params``) and the bytes it sent per step
in each kind of group (``traffic``).  Ranks are boxes, one row per data replica; a choice of
axis draws that axis's groups as lines labelled with the bytes each rank sends per step.

Like every widget in distlab, this module only reads records; it never trains.
"""
from __future__ import annotations

import ipywidgets as W
from matplotlib.figure import Figure

from .display import GREEN, ORANGE, PURPLE, WIDTH, LiveFigure, rank_colour

AXIS_COLOURS = {"data": PURPLE, "pipeline": GREEN, "tensor": ORANGE}


def _place(record) -> tuple[float, float]:
    """x: the position inside a replica (stage, then tensor slice); y: the replica."""
    where, shape = record.config["mesh"], record.config["shape"]
    return where["pipeline"] * shape["tensor"] + where["tensor"], where["data"]


def holds(record) -> str:
    """Lesson 07: what a rank holds, in words: the layers, and whether they are whole or sliced."""
    layers = sorted({name.split(".")[0] for name in record.params},
                    key=lambda n: ("flatten fc1 fc2 fc3 fc4 fc5 fc6 out".split() + [n]).index(n))
    numbers = sum(p.numel() for p in record.params.values())
    sliced = record.config["shape"]["tensor"] > 1
    return f"{', '.join(layers)}{' (fc2, fc3 sliced)' if sliced else ''}\n{numbers:,} numbers"


def mesh_figure(records, axis: str = "data") -> Figure:
    """Lesson 07: the ranks in their grid, the groups along ``axis`` drawn as lines."""
    shape = records[0].config["shape"]
    columns, rows = shape["pipeline"] * shape["tensor"], shape["data"]
    fig = Figure(figsize=(min(WIDTH, 2.9 * columns + 1.5), 1.0 + 1.7 * rows), layout="constrained")
    ax = fig.add_subplot()
    by_rank = {r.rank: r for r in records}
    for r in records:
        x, y = _place(r)
        ax.add_patch(_box(x, y, rank_colour(r.rank)))
        where = r.config["mesh"]
        ax.text(x, y - 0.22, f"rank {r.rank}  (d{where['data']}, p{where['pipeline']}, t{where['tensor']})",
                ha="center", va="center", fontsize=9, weight="bold")
        ax.text(x, y + 0.1, holds(r), ha="center", va="center", fontsize=8)
    drawn = set()
    for r in records:
        members = tuple(r.config["groups"][axis])
        if len(members) < 2 or members in drawn:
            continue
        drawn.add(members)
        points = [_place(by_rank[m]) for m in members]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):     # a link between neighbouring boxes
            if y0 == y1:
                xs, ys = [x0 + 0.36, x1 - 0.36], [y0, y1]
            else:
                xs, ys = [x0, x1], [y0 + 0.35, y1 - 0.35]
            ax.plot(xs, ys, color=AXIS_COLOURS[axis], linewidth=4, solid_capstyle="butt")
        (x0, y0), (x1, y1) = points[0], points[1]
        ax.text((x0 + x1) / 2 + (0.05 if x0 == x1 else 0), (y0 + y1) / 2 + (0.0 if x0 == x1 else -0.2),
                f"{r.traffic.get(axis, 0) / 1e3:,.1f} kB\nper step\neach rank" if y0 == y1 else
                f"{r.traffic.get(axis, 0) / 1e3:,.1f} kB per step, each rank",
                color=AXIS_COLOURS[axis], fontsize=8, ha="center" if y0 == y1 else "left", va="center")
    ax.set_xlim(-0.6, columns - 0.4)
    ax.set_ylim(rows - 0.4, -0.6)
    ax.axis("off")
    ax.set_title(f"data {shape['data']} x pipeline {shape['pipeline']} x tensor {shape['tensor']}: "
                 f"{axis} groups", fontsize=10)
    return fig


def _box(x: float, y: float, colour: str):
    from matplotlib.patches import FancyBboxPatch
    return FancyBboxPatch((x - 0.36, y - 0.35), 0.72, 0.7, boxstyle="round,pad=0.02", facecolor=colour,
                          alpha=0.25, edgecolor=colour)


def traffic_table(records) -> str:
    """Lesson 07: bytes each rank sent per step, by kind of group."""
    lines = [f"{'rank':>4} {'where':>12} " + " ".join(f"{a:>10}" for a in AXIS_COLOURS)]
    for r in sorted(records, key=lambda r: r.rank):
        w = r.config["mesh"]
        lines.append(f"{r.rank:>4} {'d%d p%d t%d' % (w['data'], w['pipeline'], w['tensor']):>12} "
                     + " ".join(f"{r.traffic.get(a, 0):>10,}" for a in AXIS_COLOURS))
    return "\n".join(lines)


def mesh_widget(records) -> LiveFigure:
    """Lesson 07: the mesh, with a choice of which groups to draw."""
    axis = W.ToggleButtons(options=list(AXIS_COLOURS), value="data", description="groups")
    return LiveFigure([axis], lambda a: mesh_figure(records, a),
                      lambda a: f"{a} groups: " + "; ".join(
                          sorted({str(r.config['groups'][a]) for r in records})))


