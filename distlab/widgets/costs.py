"""Pictures for lesson 03: what the alpha-beta model predicts, with measured times on top.

Introduced in ``notebooks/03_combining_gradients.ipynb``.  ``cost_explorer(link,
measurements)`` draws, for each algorithm, the busiest rank's traffic against N, the time
against tensor size and the time against N, from ``predict.alpha_beta`` with a ``Link`` fitted on
this machine, and lets the learner switch to a cluster (one link per rank).  Like
``widgets/collectives.py`` it is a live widget and, for viewers without a widget manager,
a PNG plus a plain-text account.
"""
from __future__ import annotations

import dataclasses
import math

import ipywidgets as W
from matplotlib.figure import Figure

from ..comm.cost_model import BASELINE, best
from ..predict import alpha_beta as M
from ..predict.alpha_beta import ALGORITHMS
from .collectives import ALGORITHM_STYLE
from .display import WIDTH, LiveFigure


def cost_figure(link, world_size: int, numel: int, measurements=(), max_world: int = 64) -> Figure:
    """Lesson 03: bytes and time of each algorithm, from the model, with measured times on top.

    Left: the busiest rank's traffic against N.  Middle: time against tensor size on
    ``world_size`` ranks (markers: ``measurements`` made on that many ranks, best repetition).
    Right: time against N for a tensor of ``numel`` floats.
    """
    fig = Figure(figsize=(WIDTH, 3.2), layout="constrained")
    ax_bytes, ax_size, ax_world = fig.subplots(1, 3)
    worlds = list(range(2, max_world + 1))
    sizes = [int(10 ** (e / 4)) for e in range(8, 33)]          # 100 .. 1e8 floats
    for name in ALGORITHMS:
        colour, marker, line = ALGORITHM_STYLE[name]
        style = dict(color=colour, lw=3.5 if name == "naive" else 1.6)   # naive under the server
        ax_bytes.plot(worlds, [max(M.bytes_per_rank(name, w, numel)) / (4 * numel) for w in worlds],
                      line, label=name.replace("_", " "), **style)
        ax_size.plot(sizes, [M.predict_time(name, world_size, s, link) for s in sizes], line, **style)
        ax_world.plot(worlds, [M.predict_time(name, w, numel, link) for w in worlds], line, **style)
    for m in measurements:
        if m["world_size"] != world_size:
            continue
        for name, by_size in m["times"].items():
            colour, marker, _ = ALGORITHM_STYLE[name]
            ax_size.scatter(list(by_size), [best(t) for t in by_size.values()], marker=marker,
                            color=colour, s=28, zorder=3,
                            label="dist.all_reduce (gloo)" if name == BASELINE else None)
    ax_bytes.set(xlabel="ranks N", ylabel="busiest rank sends / tensor size", yscale="log",
                 title="traffic of the busiest rank")
    ax_size.set(xscale="log", yscale="log", xlabel="tensor size (floats)", ylabel="seconds",
                title=f"time on {world_size} ranks (lines: model, marks: measured)")
    ax_world.set(xlabel="ranks N", ylabel="seconds", yscale="log",
                 title=f"time for {numel:.0e} floats".replace("e+0", "e"))
    for ax in (ax_bytes, ax_size, ax_world):
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncol=5, fontsize=8, frameon=False)
    where = "a cluster, one link per rank" if link.lanes is None else "this machine"
    fig.suptitle(f"alpha-beta model for {where}: {link}", fontsize=9)
    return fig


class CostExplorer(LiveFigure):
    """Lesson 03: sliders for N and tensor size, a choice of hardware; the three cost pictures below."""

    def __init__(self, link, measurements=(), world_size: int = 4, numel: int = 1_000_000):
        self.machine, self.measurements = link, list(measurements)
        self.cluster = dataclasses.replace(link, lanes=None)
        self.world = W.IntSlider(value=world_size, min=2, max=64, description="ranks N",
                                 continuous_update=False)
        self.numel = W.IntSlider(value=round(math.log10(numel)), min=2, max=8, description="10^ floats",
                                 continuous_update=False)
        self.hardware = W.ToggleButtons(options=["this machine", "a cluster"], description="hardware")
        super().__init__([self.world, self.numel, self.hardware], self.figure, self.predictions)

    @property
    def link(self):
        return self.machine if self.hardware.value == "this machine" else self.cluster

    def figure(self, n: int, exponent: int, _hardware: str) -> Figure:
        return cost_figure(self.link, n, 10 ** exponent, self.measurements)

    def predictions(self, n: int, exponent: int, hardware: str) -> str:
        """What the model predicts for the chosen N, size and hardware, one line per algorithm."""
        numel = 10 ** exponent
        lines = [f"predicted all-reduce of {numel:.0e} floats on {n} ranks ({hardware}):"]
        lines += [f"  {a:<17} {M.predict_time(a, n, numel, self.link) * 1e3:9.2f} ms, busiest rank sends "
                  f"{max(M.bytes_per_rank(a, n, numel)) / (4 * numel):.2f} x the tensor" for a in ALGORITHMS]
        return "\n".join(lines)


def cost_explorer(link, measurements=(), world_size: int = 4, numel: int = 1_000_000) -> CostExplorer:
    """Lesson 03: explore the model (``link`` from ``cost_model.fit_link``) against measurements."""
    return CostExplorer(link, measurements, world_size, numel)
