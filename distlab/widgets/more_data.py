"""Lesson 05b pictures for "More data, more accuracy": drawn from the rows and curves of
``distlab.measure.more_data``, never from anything else.

- ``distortions``: real training digits and distorted copies of them (``distorted.DistortedDigits``);
- ``accuracy_vs_samples``: test accuracy against training-set size, mean and range over seeds;
- ``time_to_accuracy``: test accuracy against training seconds on each world size, the target
  drawn across.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from .display import BLUE, GREY, NARROW, OKABE_ITO, VERMILLION, WIDTH, rank_colour

MODEL_COLOURS = {"mlp": BLUE, "cnn": VERMILLION}


def distortions(digits, columns: int = 8, copies: int = 3) -> Figure:
    """Lesson 05: the first row real training digits, the rows below distorted copies of each."""
    import torch

    n_real = digits.real.n_train
    fig = Figure(figsize=(columns * 0.9, (copies + 1) * 0.95))
    axes = fig.subplots(copies + 1, columns)
    for row in range(copies + 1):
        x, _ = digits.train_batch(torch.arange(columns) + row * n_real)
        for col in range(columns):
            ax = axes[row, col]
            ax.imshow(x[col, 0].numpy(), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
        axes[row, 0].set_ylabel("real" if row == 0 else f"copy {row}", fontsize=8)
    fig.suptitle(f"sample i, i + {n_real:,}, i + 2 x {n_real:,}, ...: one real digit and its distorted copies",
                 fontsize=9)
    return fig


def accuracy_vs_samples(summary: list[dict], real: int = 4_000) -> Figure:
    """Lesson 05b: mean test accuracy per size (line), and the lowest to highest seed (bar); ``real``: the
    real training digits (a dotted line: beyond it, distorted copies)."""
    fig = Figure(figsize=(NARROW, 3.6))
    ax = fig.subplots()
    for i, model in enumerate(dict.fromkeys(r["model"] for r in summary)):
        rows = [r for r in summary if r["model"] == model]
        n = [r["samples"] for r in rows]
        med = [100 * r["mean"] for r in rows]
        err = [[100 * (r["mean"] - r["low"]) for r in rows], [100 * (r["high"] - r["mean"]) for r in rows]]
        ax.errorbar(n, med, yerr=err, marker="o", capsize=4, label=model,
                    color=MODEL_COLOURS.get(model, OKABE_ITO[i]))
    ax.set_xscale("log")
    ax.axvline(real, color=GREY, linestyle=":", label="all real training digits")
    ax.set_xlabel("training samples (log scale)")
    ax.set_ylabel("test accuracy on the real digits (%)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def time_to_accuracy(found: dict) -> Figure:
    """Lesson 05: test accuracy against training seconds, one line per world size and repeat."""
    fig = Figure(figsize=(WIDTH * 0.7, 3.6))
    ax = fig.subplots()
    for n in sorted(k for k in found if isinstance(k, int)):
        for j, curve in enumerate(found[n]["curves"]):
            ax.plot([t for _, t, _ in curve], [100 * a for *_, a in curve], marker=".",
                    color=rank_colour(n - 1), alpha=1 if j == 0 else 0.5,
                    label=f"{n} rank{'s' if n > 1 else ''}" if j == 0 else None)
    ax.axhline(100 * found["target"], color=GREY, linestyle="--", label="target")
    ax.set_xlabel("training seconds (evaluations left out)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
