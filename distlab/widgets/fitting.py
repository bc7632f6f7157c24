"""The pictures of lesson 14 (fitting more: precision, recomputation and offload).

- ``policy_figure``: what rank 0 counted under each precision policy, one stacked bar a policy, with the
  categories mixed precision adds (the fp32 master copy, autocast's 16-bit weight copies);
- ``exponent_figure``: where a tensor of gradients lies in powers of two, with fp16's limits drawn;
- ``loss_scale_figure``: fp16's loss scale, update by update, the skipped updates marked;
- ``fitting_calculator``: lesson 08's memory model behind controls, with lesson 14's levers (precision
  policy, activation recomputation, offload) beside ZeRO's stage: one bar for the accelerator, one for
  the host's memory.  ``fitting_bars`` is its arithmetic, which the lesson checks against counted runs.

Like every widget in distlab, this module only reads records and the models in ``predict``; it never trains.
"""
from __future__ import annotations

import math

import ipywidgets as W
from matplotlib.figure import Figure

from ..predict import activations as A
from ..predict import memory as M
from ..predict.flops import TransformerShape
from .display import BLUE, NARROW, ORANGE, PURPLE, VERMILLION, LiveFigure, show
from .memory import GPUS_GB, memory_figure, unit_for

CATEGORIES = ("params", "grads", "master", "optimizer", "activations", "weight copies")   # bottom first

# Published shapes (layers, width, heads, tokens a sequence) for the activations of a named model.
SHAPES = {"GPT-2 XL": (48, 1600, 25, 1024), "Llama 2 7B": (32, 4096, 32, 4096), "Llama 2 70B": (80, 8192, 64, 4096),
          "GPT-3": (96, 12288, 96, 2048)}
COURSE_READER = TransformerShape(d_model=64, heads=4, layers=2)     # lesson 12's reader, as lesson 14 runs it


def policy_figure(counted: dict[str, dict], title: str = "") -> None:
    """Lesson 14: one bar per precision policy from what a rank counted (``record.memory``)."""
    show(memory_figure([dict(m, label=p) for p, m in counted.items()], title=title, categories=CATEGORIES))


def exponent_figure(hist: dict, title: str = "") -> None:
    """Lesson 14: ``precision.mixed.exponent_histogram``'s counts per power of two, with fp16's smallest
    subnormal, smallest normal and largest number drawn where they fall."""
    fig = Figure(figsize=(NARROW, 3.0), layout="constrained")
    ax = fig.add_subplot()
    exps = sorted(hist["exponents"])
    ax.bar(exps, [hist["exponents"][e] for e in exps], width=0.9, color=BLUE)
    fp16 = hist["fp16"]
    marks = ((fp16["zero_below"], "below 2^-25 (half fp16's smallest subnormal): 0", VERMILLION),
             (fp16["smallest_normal"], "below 2^-14 (fp16's smallest normal): subnormal", ORANGE),
             (fp16["largest"], "above 65504 (fp16's largest): inf", PURPLE))
    for value, label, colour in marks:              # between the bars of exponents e - 1 and e
        ax.axvline(math.log2(value) - 0.5, color=colour, linestyle="--", label=label)
    ax.set_xlabel("exponent: the value lies in [2^e, 2^(e+1))")
    ax.set_ylabel("gradient values")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    show(fig)


def loss_scale_figure(trace: list, title: str = "") -> None:
    """Lesson 14: the loss scale at each update (``record.loss_scale``: (scale, skipped)), on a log scale,
    the skipped updates marked."""
    if not trace:
        raise ValueError("no loss scale to draw: the run was not fp16 (only fp16 scales its loss)")
    fig = Figure(figsize=(NARROW, 2.8), layout="constrained")
    ax = fig.add_subplot()
    ax.step(range(len(trace)), [s for s, _ in trace], where="post", color=BLUE, label="loss scale")
    skipped = [i for i, (_, skip) in enumerate(trace) if skip]
    ax.plot(skipped, [trace[i][0] for i in skipped], "x", color=VERMILLION, label="update skipped (overflow)")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("update")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    show(fig)


def activation_bytes(model: str, recompute: str, batch: int = 1) -> float:
    """Lesson 14: what one rank keeps for backward: for the course's line reader (8 lines of 256 tokens, lesson
    14's section 6) ``predict.activations.transformer_activation_bytes``, checked there against counted bytes;
    for a published model Korthikanti et al. 2022's per-layer count in 16 bits (their table 2): none
    ``sbh(34 + 5as/h)``, selective ``34 sbh``, full ``2 sbh`` (each layer's input), times the layers."""
    if model == "the course's line reader":
        return A.transformer_activation_bytes(COURSE_READER, 8, 256, recompute=recompute)["total"]
    layers, h, a, s = SHAPES[model]
    return layers * A.korthikanti_layer_bytes(s, batch, h, a, recompute=recompute)


def fitting_bars(params: float, ranks: int, *, stage: int, policy: str, offload: str, activations: float,
                 optimizer: str = "adam") -> list[dict]:
    """Lesson 14: the bytes of one rank by category (``predict.memory``, the policy's accounting), split into
    what stays on the accelerator and what ``offload`` moves to the host (``predict.memory.offload_bytes``'s
    split: the optimizer's state and master copy and the gradients; with ``"params"`` the parameters too).
    Autocast's 16-bit weight copies are drawn at 2 bytes a parameter, every one kept for backward while a step
    runs (an upper bound: the course's MLP needs none for its first layer, ``activations.mlp_saved_bytes``)."""
    kept = M.per_rank(params, ranks, stage=stage, optimizer=optimizer, precision=M.POLICY_ACCOUNTING[policy],
                      master_copy=policy == "bf16_master")
    each = M.bytes_per_parameter(policy, optimizer)
    held = kept.optimizer / max(each["master"] + each["optimizer"], 1)     # the parameters this rank's optimizer holds
    copies = 2 * params if M.POLICY_ACCOUNTING[policy] == "autocast" else 0.0    # every weight's 16-bit copy
    cats = {"params": kept.params, "grads": kept.grads, "master": held * each["master"],
            "optimizer": held * each["optimizer"], "activations": activations, "weight copies": copies}
    moved = {"none": (), "optimizer": ("master", "optimizer", "grads"),
             "params": ("master", "optimizer", "grads", "params")}[offload]
    device = {c: (0.0 if c in moved else v) for c, v in cats.items()}
    host = {c: (v if c in moved else 0.0) for c, v in cats.items()}
    return [dict(device, label="accelerator"), dict(host, label="host memory")]


def fitting_calculator(reader_params: int) -> LiveFigure:
    """Lesson 14: lesson 08's calculator with lesson 14's levers: a model (its parameters and, for the
    activations, its shape), ranks, ZeRO stage, precision policy, recomputation and offload.
    ``reader_params``: the parameters of the course's line reader, as a run of it counted them."""
    if isinstance(reader_params, bool) or not isinstance(reader_params, int) or reader_params < 1:
        raise ValueError(f"reader_params must be a positive parameter count, got {reader_params!r}")
    models = {"the course's line reader": float(reader_params), **{m: M.KNOWN_MODELS[m] for m in SHAPES}}
    model = W.Dropdown(options=list(models), value="Llama 2 7B", description="model")
    ranks = W.SelectionSlider(options=[1, 2, 4, 8, 16, 64, 256, 1024], value=8, description="ranks")
    stage = W.Dropdown(options=[(M.STAGE_NAMES[s], s) for s in M.STAGES], value=1, description="ZeRO")
    policy = W.Dropdown(options=list(M.POLICY_ACCOUNTING), value="bf16_master", description="precision")
    recompute = W.Dropdown(options=["none", "selective", "full"], value="none", description="recompute")
    offload = W.Dropdown(options=list(M.OFFLOADS), value="none", description="offload")
    gpu = W.Dropdown(options=[(f"{g} GB", g) for g in GPUS_GB], value=80, description="GPU")

    def bars(m, n, s, p, r, o):
        return fitting_bars(models[m], n, stage=s, policy=p, offload=o, activations=activation_bytes(m, r))

    def draw(m, n, s, p, r, o, g):
        got = bars(m, n, s, p, r, o)
        device = sum(v for k, v in got[0].items() if k != "label")
        budget = g * 1e9 if device > 0.05 * g * 1e9 else None    # a small model's bars would vanish under it
        return memory_figure(got, budget=budget, categories=CATEGORIES,
                             title=f"{m}, {n} ranks, {p}, recompute {r}, offload {o}: "
                                   f"{'fits' if device <= g * 1e9 else 'does NOT fit'} a {g} GB GPU")

    def describe(m, n, s, p, r, o, g):
        device, host = (sum(v for k, v in b.items() if k != "label") for b in bars(m, n, s, p, r, o))
        size, unit = unit_for(max(device, 1))
        return (f"{m} on {n} ranks, {M.STAGE_NAMES[s]}, {p}, recompute {r}, offload {o}: "
                f"{device / size:,.3g} {unit} on each accelerator, {host / 1e9:,.3g} GB in the host's memory; "
                f"a {g} GB GPU {'holds it' if device <= g * 1e9 else 'is not enough'}")

    return LiveFigure([model, ranks, stage, policy, recompute, offload, gpu], draw, describe)
