"""Pictures for lesson 01 (data parallelism): who gets which digits, and how gradients combine.

Introduced in ``notebooks/01_data_parallelism.ipynb`` (``digits_figure`` already in lesson 00).

Two widgets, each a row of controls above a picture:

- ``partition_widget``: the training digits split across N workers, for any N and epoch.
  The split is computed by ``distlab.data.shard_indices``, the very function each rank
  calls to find its shard (the lesson checks it against the shards the ranks recorded).
- ``gradient_widget``: at a recorded step and layer, each rank's own gradient, their
  average, and the gradient of one process that saw the whole global batch.  It reads
  the records of a real run and nothing else.

Both are a ``display.LiveFigure``: controls above a picture, which a viewer without
widgets sees as a PNG and a line of text.
"""
from __future__ import annotations

import ipywidgets as W
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .display import DIVERGING, GREY, NARROW, OKABE_ITO, WIDTH, LiveFigure, rank_colour


# ------------------------------------------------------------------------------------------
# lesson 00: the data
# ------------------------------------------------------------------------------------------
def digits_figure(digits, count: int = 30, columns: int = 15) -> Figure:
    """Lesson 00: the first ``count`` training digits with their labels."""
    rows = -(-count // columns)
    fig = Figure(figsize=(WIDTH, 0.75 * rows + 0.4), layout="constrained")
    for i in range(count):
        ax = fig.add_subplot(rows, columns, i + 1)
        ax.imshow(digits.x_train[i, 0].numpy(), cmap="gray_r", vmin=0, vmax=1)
        ax.set_title(str(int(digits.y_train[i])), fontsize=10)
        ax.axis("off")
    fig.suptitle(f"{count} of the {digits.n_train} training digits ({digits.side}x{digits.side} pixels) "
                 "and their labels", fontsize=11)
    return fig


def startup_figure(cold: dict[str, float], warm: float) -> Figure:
    """Lesson 00: where a cold launch's seconds go, next to a warm launch.

    ``cold`` maps each part of the start (in order) to the time it was over, in seconds since
    the launch began (``Pool.startup`` with the first step added); ``warm`` is the seconds from
    a launch on warm ranks to their first step.
    """
    fig = Figure(figsize=(NARROW, 1.9), layout="constrained")
    ax = fig.add_subplot()
    start = 0.0
    for (part, end), colour in zip(cold.items(), OKABE_ITO):
        ax.barh(1, end - start, left=start, color=colour, label=f"until {part}")
        start = end
    ax.barh(0, warm, color=GREY)
    ax.text(warm, 0, f"  {warm:.2f} s", va="center", fontsize=9)
    ax.text(start, 1, f"  {start:.1f} s", va="center", fontsize=9)
    ax.set_yticks([0, 1], ["warm ranks", "fresh ranks"])
    ax.set_xlim(0, 1.25 * start)
    ax.set_xlabel("seconds from launch() to the first training step")
    ax.legend(fontsize=8, ncol=2, loc="lower right", frameon=False)
    return fig


# ------------------------------------------------------------------------------------------
# lesson 01: partitions
# ------------------------------------------------------------------------------------------
def partition_figure(digits, shards, *, title: str = "", thumbnails: int = 12) -> Figure:
    """Lesson 01: draw a partition, given each rank's sample indices (``shards[r]``).

    Top: every training sample as one cell, in data-set order, coloured by the rank that
    trains on it.  Below: for each rank, the first digits of its shard, in the order the
    rank will see them.  ``shards`` can be computed (``shard_indices``) or recorded
    (``[record.shard for record in records]``).
    """
    n, world = digits.n_train, len(shards)
    owner = np.full(n, -1)
    uses = np.zeros(n, dtype=int)
    for r, shard in enumerate(shards):
        idx = torch.as_tensor(shard).numpy()
        owner[idx] = r
        np.add.at(uses, idx, 1)
    columns = 120
    grid = np.full(-(-n // columns) * columns, np.nan)
    grid[:n] = owner
    fig = Figure(figsize=(WIDTH, 1.6 + 0.8 * world), layout="constrained")
    rows = fig.add_gridspec(world + 1, 1, height_ratios=[1.2] + [0.8] * world)
    top = fig.add_subplot(rows[0])
    cmap = ListedColormap([rank_colour(r) for r in range(world)]).with_extremes(bad="white")
    top.imshow(grid.reshape(-1, columns), cmap=cmap, vmin=-0.5, vmax=world - 0.5,
               aspect="auto", interpolation="nearest")
    top.set_xticks([])
    top.set_yticks([])
    repeated = int((uses > 1).sum())
    note = f"\n{repeated} sample(s) used twice, so that every rank gets as many" if repeated else ""
    top.set_title(f"all {n} training samples in data-set order, coloured by rank{note}", fontsize=10)
    for r, shard in enumerate(shards):
        ax = fig.add_subplot(rows[r + 1])
        _thumbnail_row(ax, digits, torch.as_tensor(shard)[:thumbnails], rank_colour(r))
        ax.set_ylabel(f"rank {r}\n{len(shard)} samples", rotation=0, ha="right", va="center",
                      fontsize=10)
        if r == 0:
            ax.set_title(f"the first {thumbnails} digits each rank trains on, in its order "
                         "(#: index in the data set)", fontsize=10)
    fig.suptitle(title, fontsize=11)
    return fig


def _thumbnail_row(ax, digits, indices, colour: str) -> None:
    """Digits side by side, each outlined in ``colour`` and labelled with its index."""
    side, pad = digits.side, 2
    strip = np.full((side + 2 * pad, len(indices) * (side + 2 * pad)), np.nan)
    for j, i in enumerate(indices.tolist()):
        x0 = j * (side + 2 * pad) + pad
        strip[pad:pad + side, x0:x0 + side] = digits.x_train[i, 0].numpy()
        ax.add_patch(Rectangle((x0 - 1.5, pad - 1.5), side + 2, side + 2, fill=False,
                               edgecolor=colour, linewidth=2.5))
        ax.text(x0 + side / 2, side + 2 * pad + 0.5, f"#{i}", ha="center", va="top", fontsize=7)
    ax.imshow(strip, cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xlim(-0.5, strip.shape[1] - 0.5)
    ax.set_ylim(side + 2 * pad + 3, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.spines[:].set_visible(False)


def partition_widget(digits=None, world_size: int = 2, *, epoch: int = 0, seed: int = 0,
                     max_world_size: int = 8, max_epoch: int = 5, thumbnails: int = 12):
    """Lesson 01: which training samples each of N workers gets, with sliders for N and epoch.

    The partition is ``distlab.data.shard_indices(n, rank, N, seed=seed, epoch=epoch)``,
    exactly what every rank of ``distlab.data_parallel.data_parallel.train`` computes for itself, with
    no communication: all ranks shuffle with the same seed, then take every N-th index.
    """
    from ..data import load_digits, shard_indices

    digits = load_digits() if digits is None else digits
    if not 1 <= world_size <= max_world_size:
        raise ValueError(f"world_size must be in 1..{max_world_size}, got {world_size!r}")
    if not 0 <= epoch <= max_epoch:
        raise ValueError(f"epoch must be in 0..{max_epoch}, got {epoch!r}")
    n_slider = W.IntSlider(value=world_size, min=1, max=max_world_size, description="workers N",
                           continuous_update=False)
    e_slider = W.IntSlider(value=epoch, min=0, max=max_epoch, description="epoch",
                           continuous_update=False)

    def draw(world, ep):
        shards = [shard_indices(digits.n_train, r, world, seed=seed, epoch=ep) for r in range(world)]
        return partition_figure(digits, shards, thumbnails=thumbnails,
                                title=f"{world} worker(s), epoch {ep} (seed {seed})")

    return LiveFigure([n_slider, e_slider], draw,
                      lambda *_: f"partition widget: sliders for workers N and epoch (seed {seed})")


# ------------------------------------------------------------------------------------------
# lesson 01: gradients
# ------------------------------------------------------------------------------------------
def gradients_at(records, reference, step: int, layer: str) -> dict[str, torch.Tensor]:
    """Lesson 01: the gradients of one recorded step and layer, checked, as plain tensors.

    Returns ``{"rank 0": ..., ..., "average": ..., "single": ...}``: each rank's own
    gradient, the average the ranks applied (rank 0's copy), and ``reference``'s big-batch
    gradient (left out when ``reference`` is None).  Raises ``ValueError`` naming what was
    recorded when the step or layer was not.
    """
    if not records:
        raise ValueError("no records: pass the list that distlab.launch returned")
    world = len(records)
    if any(r.world_size != world for r in records):
        raise ValueError(f"the records come from different jobs: world sizes "
                         f"{sorted({r.world_size for r in records})}, but {world} records")
    steps = sorted(set.intersection(*(set(r.grads) for r in records)))
    if step not in steps:
        raise ValueError(f"step {step!r} was not recorded; recorded steps: {steps} "
                         "(choose them with train(..., record_grads_at=[...]))")
    layers = list(records[0].grads[step])
    if layer not in layers:
        raise ValueError(f"layer {layer!r} was not recorded; recorded layers: {layers}")
    out = {f"rank {r.rank}": r.grads[step][layer]["local"] for r in records}
    out["average"] = records[0].grads[step][layer]["average"]
    if reference is not None:
        mimics = reference.config.get("mimics_world_size", 1)
        if mimics != world:
            raise ValueError(f"the reference imitates {mimics} rank(s) but there are {world} records; "
                             f"use train_single(world_size={world}, ...) with the same settings")
        if step not in reference.grads or layer not in reference.grads[step]:
            raise ValueError(f"the reference did not record step {step} / layer {layer!r}; "
                             f"it has steps {sorted(reference.grads)}")
        out["single"] = reference.grads[step][layer]["local"]
    return out


def gradient_figure(records, reference, step: int, layer: str) -> Figure:
    """Lesson 01: heatmaps side by side of each rank's gradient, their average, and the big batch.

    One symmetric colour scale for all panels, so equal colours mean equal numbers.
    """
    grads = gradients_at(records, reference, step, layer)
    panels = {name: g.double().reshape(g.shape[0], -1) if g.dim() > 1 else g.double().reshape(1, -1)
              for name, g in grads.items()}
    vmax = max(p.abs().max().item() for p in panels.values()) or 1.0
    b = records[0].config["batch_size"]
    titles = {f"rank {r.rank}": f"rank {r.rank}: its own {b} samples" for r in records}
    titles["average"] = "average of the ranks\n(what every rank applies)"
    titles["single"] = f"one process,\nall {b * len(records)} samples"
    cols = min(len(panels), 4)
    rows = -(-len(panels) // cols)
    shape = next(iter(panels.values())).shape
    aspect_h = min(max(shape[0] / shape[1], 0.25), 1.2)
    fig = Figure(figsize=(WIDTH, rows * (WIDTH / cols) * aspect_h + 1.3), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, p) in zip(axes.flat, panels.items()):
        im = ax.imshow(p.numpy(), cmap=DIVERGING, vmin=-vmax, vmax=vmax,
                       aspect="auto", interpolation="nearest")
        ax.set_title(titles[name], fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"{p.shape[1]} inputs" if p.shape[0] > 1 else f"{p.shape[1]} units", fontsize=9)
        if p.shape[0] > 1:
            ax.set_ylabel(f"{p.shape[0]} units", fontsize=9)
        if name.startswith("rank"):
            ax.spines[:].set_edgecolor(rank_colour(int(name.split()[1])))
            ax.spines[:].set_linewidth(3)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="gradient value")
    fig.suptitle(f"gradient of {layer} {tuple(grads['average'].shape)} at step {step}", fontsize=11)
    return fig


def describe_gradients(grads: dict[str, torch.Tensor]) -> str:
    """Lesson 01: the differences that matter, in one line of text."""
    ranks = [k for k in grads if k.startswith("rank")]
    spread = max((grads[a].double() - grads[ranks[0]].double()).abs().max().item() for a in ranks)
    text = f"ranks differ by up to {spread:.2e}"
    mean = torch.stack([grads[k].double() for k in ranks]).mean(0)
    text += f"; |mean of ranks - applied average| <= {(mean - grads['average'].double()).abs().max().item():.1e}"
    if "single" in grads:
        diff = (grads["average"].double() - grads["single"].double()).abs().max().item()
        text += f"; |average - one process| <= {diff:.1e}"
    return text


def gradient_widget(records, reference=None, *, step: int | None = None, layer: str | None = None):
    """Lesson 01: pick a recorded step and a layer; see each rank's gradient, the average, the big batch.

    ``records`` is what ``distlab.launch(data_parallel.train, ...)`` returned;
    ``reference`` is ``train_single(world_size=N, ...)`` with the same settings (or None).
    Below the picture, the largest differences are printed.
    """
    step, layer = _defaults(records, step, layer)
    gradients_at(records, reference, step, layer)   # bad input fails here, before any control exists
    steps = sorted(set.intersection(*(set(r.grads) for r in records)))
    step_box = W.Dropdown(options=steps, value=step, description="step")
    layer_box = W.Dropdown(options=list(records[0].grads[step]), value=layer, description="layer")

    def draw(step, layer):
        return gradient_figure(records, reference, step, layer)

    def differences(step, layer):
        return describe_gradients(gradients_at(records, reference, step, layer))

    return LiveFigure([step_box, layer_box], draw, caption=differences,
                      describe=lambda *_: f"gradient widget: {len(records)} ranks, steps {steps}, choose a layer")


def _defaults(records, step, layer):
    """The first recorded step and layer when none is asked for."""
    if not records or not records[0].grads:
        raise ValueError("no recorded gradients: pass the records distlab.launch returned for "
                         "train(..., record_grads_at=[...])")
    step = min(records[0].grads) if step is None else step
    if layer is None and step in records[0].grads:
        layer = next(iter(records[0].grads[step]))
    return step, layer
