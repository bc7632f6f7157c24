"""The memory pictures: what each rank holds, by category, predicted and measured.

Introduced in lesson 08 ("ZeRO: sharding what every worker used to copy").  Two pictures:

- ``memory_figure``: one stacked bar per rank (parameters, gradients, optimizer state,
  activations), with a line at a GPU's memory; drawn from the memory model or from what the
  ranks of a real run counted (``record.memory``), or both side by side;
- ``memory_calculator``: the same picture behind controls (parameter count, or a model by
  name; world size; optimizer; precision; ZeRO stage; GPU size), with a caption that says
  where the GPU stops being enough.

Like every widget in distlab, this module only reads records and the model; it never trains.
"""
from __future__ import annotations

import ipywidgets as W
from matplotlib.figure import Figure

from ..predict import memory as M
from .display import BLUE, GREEN, GREY, ORANGE, PURPLE, SKY_BLUE, VERMILLION, WIDTH, LiveFigure

# lesson 14 adds the fp32 master copy and autocast's 16-bit weight copies (``widgets.fitting``)
CATEGORY_COLOURS = {"params": BLUE, "grads": SKY_BLUE, "master": PURPLE, "optimizer": ORANGE, "activations": GREY,
                    "weight copies": GREEN}
CATEGORY_LABELS = {"params": "parameters", "grads": "gradients", "master": "fp32 master copy",
                   "optimizer": "optimizer state", "activations": "activations",
                   "weight copies": "autocast's weight copies"}
LESSON_08 = ("params", "grads", "optimizer", "activations")    # the categories lesson 08's bars stack
GPUS_GB = (16, 24, 40, 80, 141)
SHOWN_RANKS = 8          # more bars than this would be too thin to read: the rest are the same


def unit_for(nbytes: float) -> tuple[float, str]:
    """The unit to print ``nbytes`` in: (bytes per unit, name), decimal as the ZeRO paper's GB."""
    for size, name in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if nbytes >= size:
            return size, name
    return 1.0, "B"


def memory_figure(bars: list[dict], budget: float | None = None, title: str = "",
                  categories=LESSON_08) -> Figure:
    """Lesson 08: one stacked bar per entry of ``bars`` ({"label", "params", "grads", ...} in bytes).

    ``budget`` (bytes) draws a line at a GPU's memory: a bar above it does not fit.  ``categories``: which
    of ``CATEGORY_COLOURS`` to stack, bottom first (lesson 14 adds the master copy and weight copies).
    """
    top = max([sum(b.get(c, 0) for c in categories) for b in bars] + [budget or 0])
    size, unit = unit_for(top)
    fig = Figure(figsize=(min(WIDTH, 2.0 + 0.9 * len(bars)), 3.6), layout="constrained")
    ax = fig.add_subplot()
    for i, bar in enumerate(bars):
        bottom = 0.0
        for category in categories:
            height = bar.get(category, 0) / size
            ax.bar(i, height, bottom=bottom, color=CATEGORY_COLOURS[category], width=0.7,
                   label=CATEGORY_LABELS[category] if i == 0 else None)
            bottom += height
    if budget:
        ax.axhline(budget / size, color=VERMILLION, linestyle="--", label=f"GPU memory {budget / size:g} {unit}")
    ax.set_xticks(range(len(bars)), [b["label"] for b in bars], fontsize=8)
    ax.set_ylabel(f"per rank ({unit})")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def predicted_bars(params: float, world_size: int, **settings) -> list[dict]:
    """Lesson 08: the model's bars for ranks 0 .. world_size - 1 (at most ``SHOWN_RANKS`` of them)."""
    one = M.per_rank(params, world_size, **settings).as_dict()
    shown = min(world_size, SHOWN_RANKS)
    labels = [f"rank {r}" for r in range(shown)]
    if world_size > shown:
        labels[-1] = f"... rank {world_size - 1}"
    return [dict(one, label=label) for label in labels]


def measured_bars(records) -> list[dict]:
    """Lesson 08: the bars of a real run: what each rank counted after its last update."""
    return [dict(r.memory, label=f"rank {r.rank}\nmeasured") for r in sorted(records, key=lambda r: r.rank)]


def verdict(params: float, world_size: int, budget: float, **settings) -> str:
    """Lesson 08: per stage, what one rank needs, and whether it fits ``budget`` bytes."""
    settings.pop("stage", None)
    size, unit = unit_for(budget)
    lines = []
    for stage in M.STAGES:
        need = M.per_rank(params, world_size, stage=stage, **settings).total
        room = M.largest_model(budget, world_size, stage=stage, **settings)
        lines.append(f"stage {stage} ({M.STAGE_NAMES[stage]}): {need / size:,.3g} {unit} per rank, "
                     f"{'fits' if need <= budget else 'does NOT fit'}; the largest model that fits: "
                     f"{room / 1e9:,.3g} billion parameters")
    return "\n".join(lines)


def memory_calculator(models: dict[str, float] | None = None) -> LiveFigure:
    """Lesson 08: the memory model behind sliders; ``models`` adds named parameter counts to choose.

    The parameter count is set on a log scale (10^6 to 10^12); choosing a model by name sets
    it.  The caption lists every stage against the chosen GPU.
    """
    named = dict(M.KNOWN_MODELS, **(models or {}))
    pick = W.Dropdown(options=["(slider)"] + list(named), value="(slider)", description="model")
    params = W.FloatLogSlider(value=7.5e9, base=10, min=3, max=12, step=0.05, description="parameters",
                              readout_format=".3g")
    world = W.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 1024], value=64, description="ranks")
    optimizer = W.Dropdown(options=list(M.OPTIMIZER_STATE), value="adam", description="optimizer")
    # lesson 08's two accountings (lesson 14's autocast and offload are not among its controls yet)
    precision = W.Dropdown(options=["fp32", "mixed"], value="mixed", description="precision")
    stage = W.Dropdown(options=[(M.STAGE_NAMES[s], s) for s in M.STAGES], value=0, description="stage")
    gpu = W.Dropdown(options=[(f"{g} GB", g) for g in GPUS_GB], value=80, description="GPU")

    def chosen(change):
        if change["new"] in named:
            params.value = named[change["new"]]
    pick.observe(chosen, names="value")

    def settings(o, p, s):
        return dict(optimizer=o, precision=p, stage=s)

    def draw(_pick, n, w, o, p, s, g):
        title = f"{n:,.4g} parameters, {w} ranks, {o}, {p}: {M.STAGE_NAMES[s]}"
        return memory_figure(predicted_bars(n, w, **settings(o, p, s)), budget=g * 1e9, title=title)

    def describe(_pick, n, w, o, p, s, g):
        need = M.per_rank(n, w, **settings(o, p, s)).total
        size, unit = unit_for(max(need, 1))
        return (f"{n:,.4g} parameters on {w} ranks, {o}, {p}, {M.STAGE_NAMES[s]}: "
                f"{need / size:,.3g} {unit} per rank; a {g} GB GPU "
                + ("holds it" if need <= g * 1e9 else "is not enough"))

    def caption(_pick, n, w, o, p, s, g):
        return verdict(n, w, g * 1e9, optimizer=o, precision=p)

    return LiveFigure([pick, params, world, optimizer, precision, stage, gpu], draw, describe, caption=caption)


def compare_figure(records, predicted: dict, title: str = "") -> Figure:
    """Lesson 08: the memory model's bar next to each rank's measured one (same categories)."""
    bars = [dict(predicted, label="model")] + measured_bars(records)
    return memory_figure(bars, title=title)


def ratio_line(records, predicted: dict) -> str:
    """Lesson 08: measured over predicted, per category, on the rank that holds the most."""
    most = max(records, key=lambda r: sum(r.memory.values()))
    parts = [f"{CATEGORY_LABELS[c]} {most.memory[c] / predicted[c]:.3f}"
             for c in ("params", "grads", "optimizer") if predicted.get(c)]
    return f"rank {most.rank}, measured / predicted: " + (", ".join(parts) or "nothing to compare")
