"""Speedup pictures: does a second rank pay for its core, and why (not)?

Introduced in lesson 05 ("Does distributing pay?").  Three panels, all drawn from the rows
that ``distlab.measure.scaling.run_scaling`` measured on real ranks:

1. **speedup against N** for one configuration: measured points, the ideal line
   (speedup = N), Amdahl's law fitted to the points, the alpha-beta prediction, and one
   process using N threads for comparison; each point is labelled with its efficiency;
2. **where a step's time goes** at each N: compute, communication, waiting, the rest,
   with the communication-to-computation ratio written above each bar;
3. **speedup against compute per byte** of gradient for every configuration measured so
   far: the picture that says which regime pays.

The widget's "measure" button calls the function the lesson hands it (``measure=``), which
runs the real measurement and returns new rows; the widget itself only reads rows, with the
pure analysis of ``distlab.measure.speedup`` and the formulas of ``distlab.predict``.
"""
from __future__ import annotations

import os

import ipywidgets as W
from matplotlib.figure import Figure

from ..measure import speedup as analysis
from ..predict import flops
from ..predict import speedup as predicted
from .display import (BLACK, BLUE, GREEN, NARROW, ORANGE, PART_COLOURS, PURPLE, SKY_BLUE, VERMILLION,
                      WIDTH, LiveFigure)

COLOURS = PART_COLOURS | {"measured": BLACK, "other configurations": BLUE, "slower": VERMILLION,
                          "threads": ORANGE, "amdahl": PURPLE, "alpha-beta": SKY_BLUE}
RULE_COLOURS = {"same lr": VERMILLION, "linear scaling": BLUE, "linear + warm-up": GREEN}
WIDTHS = {"mlp": [64, 256, 1024, 2048], "cnn": [8, 16, 32, 64]}
BATCHES = [64, 256, 896, 1436]


def speedup_figure(rows, key: tuple | None = None, title: str | None = None):
    """Lesson 05: the three panels for configuration ``key`` (default: the last measured).

    ``key`` is ``measure.speedup.config_key(row)``: (model, width, "strong"|"weak", batch).  Returns
    a matplotlib ``Figure`` not attached to pyplot, so nothing leaks into a cell.
    """
    if not rows:
        raise ValueError("no rows to draw: measure something first (scaling.run_scaling)")
    table = analysis.speedups(rows)
    key = key or analysis.config_key(rows[-1])
    mine = sorted((r for r in table if analysis.config_key(r) == key), key=lambda r: r["world_size"])
    if not mine:
        raise ValueError(f"no measurement with one process (1 thread) for {key}")
    fig = Figure(figsize=(WIDTH, 3.4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3, width_ratios=[1, 1, 1.15])
    _speedup_panel(ax1, mine, rows, key)
    _split_panel(ax2, mine)
    _regime_panel(ax3, table, key)
    model, width, kind, batch = key
    fig.suptitle(title or f"{model.upper()} width {width}, {kind} scaling, "
                 f"{'global' if kind == 'strong' else 'per-rank'} batch {batch}", fontsize=11)
    return fig


def _speedup_panel(ax, mine, rows, key):
    ns = [r["world_size"] for r in mine]
    top = max(ns + [2])
    ax.plot([1, top], [1, top], ls="--", color="grey", label="ideal (N)")
    ax.plot(ns, [r["speedup"] for r in mine], "o-", color=COLOURS["measured"], label="N ranks x 1 thread")
    for r in mine:
        ax.annotate(f"eff. {r['efficiency']:.0%}", (r["world_size"], r["speedup"]),
                    textcoords="offset points", xytext=(6, -12), fontsize=8)
    threaded = [(r["world_size"], r["speedup"] / r["vs_all_cores"]) for r in mine
                if r["world_size"] > 1 and r["vs_all_cores"] == r["vs_all_cores"]]
    if threaded:
        ax.plot(*zip(*threaded), "s", color=COLOURS["threads"], label="1 process x N threads")
    parallel = [r for r in mine if 1 < r["world_size"] <= (os.cpu_count() or 1)]
    if parallel:
        s = analysis.fit_amdahl([r["world_size"] for r in parallel], [r["speedup"] for r in parallel])
        xs = [1 + i * (top - 1) / 40 for i in range(41)]
        ax.plot(xs, [predicted.amdahl_speedup(x, s) for x in xs], color=COLOURS["amdahl"],
                label=f"Amdahl, serial {s:.0%}" if 0 <= s <= 1 else
                f"Amdahl fit {s:.0%}: {'overhead, not a serial part' if s > 1 else 'faster than ideal'}")
    by_hand = [r for r in rows if r["method"] == "by_hand" and r["world_size"] > 1]
    one = next((r for r in mine if r["world_size"] == 1), None)
    if one is not None and by_hand:
        alpha, beta = analysis.fit_alpha_beta(by_hand)
        ax.plot(ns, [predicted.predicted_speedup(one, n, alpha, beta) for n in ns], "^:",
                color=COLOURS["alpha-beta"], label="alpha-beta model")
    ax.set_xlabel("ranks N")
    ax.set_ylabel("speedup over 1 process x 1 thread")
    ax.set_xticks(ns)
    ax.set_ylim(0, top + 0.3)
    ax.legend(fontsize=7, loc="upper left")


def _split_panel(ax, mine):
    labels = [f"N={r['world_size']}\n{r['comm_to_compute']:.2f}" for r in mine]
    bottom = [0.0] * len(mine)
    for part, field in [("compute", "compute_s"), ("communication", "comm_s"),
                        ("waiting", "wait_s"), ("rest", "other_s")]:
        ms = [max(r[field], 0.0) * 1e3 if r[field] == r[field] else 0.0 for r in mine]
        ax.bar(labels, ms, bottom=bottom, color=COLOURS[part], label=part)
        bottom = [b + m for b, m in zip(bottom, ms)]
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("(communication + waiting) / compute", fontsize=8)
    ax.set_ylabel("time per step (ms)")
    ax.set_title("where a step goes", fontsize=9)
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.06), ncol=4, frameon=False,
              handlelength=1, columnspacing=0.8)


def _regime_panel(ax, table, key):
    pairs = [r for r in table if r["world_size"] == 2]
    for r in pairs:
        x = flops.compute_per_byte(r["model"], r["width"], r["batch_size"], r["dtype"])
        chosen = analysis.config_key(r) == key
        weak = r["scaling"] == "weak"
        colour = COLOURS["measured"] if chosen else COLOURS["other configurations"]
        ax.scatter(x, r["speedup"], marker="o" if r["model"] == "mlp" else "D", s=60 if chosen else 25,
                   color="none" if weak else colour, edgecolors=colour)
        ax.annotate(f"{r['model']}{r['width']}/{r['global_batch_size']}" + (" weak" if weak else ""),
                    (x, r["speedup"]), textcoords="offset points", xytext=(4, -9 if weak else 3), fontsize=7)
    ax.axhline(2, ls="--", color="grey", lw=1)
    ax.axhline(1, ls=":", color=COLOURS["slower"], lw=1)
    ax.text(0.02, 0.93, "ideal", transform=ax.transAxes, fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set_ylim(0, 2.3)
    ax.set_xlabel("training FLOPs per byte of gradient (per rank)")
    ax.set_ylabel("speedup of 2 ranks")
    ax.set_title("below the dotted line, 2 ranks are slower\n(hollow: weak scaling)", fontsize=9)


class SpeedupView(LiveFigure):
    """Lesson 05: the speedup of the rows measured so far; choose a configuration, press "measure".

    ``measure(config)`` is the lesson's function: it gets ``dict(model=, width=,
    global_batch_size=)``, runs the real measurement and returns its rows.  Without one, the
    view only shows ``rows``.
    """

    def __init__(self, rows=(), measure=None, key: tuple | None = None):
        self.rows, self.measure = list(rows), measure
        self.key = key or (analysis.config_key(self.rows[-1]) if self.rows else None)
        last = (next(r for r in self.rows if analysis.config_key(r) == self.key) if self.rows
                else dict(model="mlp", width=1024, global_batch_size=896))
        look = dict(style={"description_width": "initial"}, layout=W.Layout(width="210px"))
        self.model = W.Dropdown(options=list(WIDTHS), value=last["model"], description="model", **look)
        self.width = W.Dropdown(options=WIDTHS[last["model"]], description="width", **look)
        self.width.value = last["width"] if last["width"] in WIDTHS[last["model"]] else WIDTHS[last["model"]][0]
        self.batch = W.Dropdown(options=BATCHES, description="global batch", **look)
        self.batch.value = last["global_batch_size"] if last["global_batch_size"] in BATCHES else 256
        self.model.observe(lambda change: setattr(self.width, "options", WIDTHS[change["new"]]), names="value")
        self.button = W.Button(description="measure", button_style="primary",
                               tooltip="measure the chosen configuration on real ranks, then draw it")
        self.button.on_click(self._measure_chosen)
        self.status = W.Label("" if self.rows else "press measure")
        form = [W.HBox([self.model, self.width, self.batch]), W.HBox([self.button, self.status])]
        super().__init__([], self._figure, self._describe, extra=form if measure else [])

    def config(self) -> dict:
        return dict(model=self.model.value, width=self.width.value, global_batch_size=self.batch.value)

    def _figure(self):
        return speedup_figure(self.rows, self.key) if self.rows else None

    def _describe(self) -> str:
        return f"<speedup explorer: {len({analysis.config_key(r) for r in self.rows})} configuration(s) measured>"

    def _measure_chosen(self, _button=None) -> None:
        """The button: the lesson's ``measure`` for the chosen configuration, then redraw."""
        self.button.disabled = True
        self.status.value = f"measuring {self.model.value} width {self.width.value}, batch {self.batch.value} ..."
        try:
            self.rows += self.measure(self.config())
            self.key = analysis.config_key(self.rows[-1])
            self.redraw()
            two = [r for r in analysis.speedups(self.rows)
                   if r["world_size"] == 2 and analysis.config_key(r) == self.key]
            self.status.value = (f"2 ranks: {two[-1]['speedup']:.2f}x one thread, "
                                 f"{two[-1]['vs_all_cores']:.2f}x one process on 2 threads" if two else "measured")
        except Exception as err:   # show it in the widget; a button callback has nowhere else
            self.status.value = f"failed: {err}"
        finally:
            self.button.disabled = False


def speedup_widget(rows=(), key: tuple | None = None, measure=None) -> SpeedupView:
    """Lesson 05: the speedup explorer, showing configuration ``key`` first (default: the last
    measured); with ``measure`` (config -> new rows), a "measure" button for more."""
    return SpeedupView(rows, measure, key)


def speedup_table(rows) -> str:
    """Lesson 05: the measured speedups as aligned text, one line per configuration and N."""
    lines = [f"{'configuration':<28}{'N':>3}{'samples/s':>11}{'s/epoch':>9}{'speedup':>9}{'eff.':>6}"
             f"{'vs 1 proc x N thr':>19}{'comm+wait/compute':>19}"]
    for r in analysis.speedups(rows):
        kind = "global" if r["scaling"] == "strong" else "per-rank"
        name = f"{r['model']}{r['width']}, {kind} batch {analysis.config_key(r)[3]}"
        vs = f"{r['vs_all_cores']:.2f}" if r["vs_all_cores"] == r["vs_all_cores"] else "-"
        lines.append(f"{name:<28}{r['world_size']:>3}{r['samples_per_s']:>11.0f}{r['epoch_s']:>9.3f}"
                     f"{r['speedup']:>9.2f}"
                     f"{r['efficiency']:>6.0%}{vs:>19}{r['comm_to_compute']:>19.2f}")
    return "\n".join(lines)


def large_batch_figure(rows):
    """Lesson 05: test accuracy after a fixed number of epochs against N, one line per rule.

    ``rows`` come from ``distlab.large_batch.large_batch_study``.
    """
    fig = Figure(figsize=(NARROW, 3.2), layout="constrained")
    ax = fig.add_subplot()
    markers = {"same lr": "o-", "linear scaling": "s--", "linear + warm-up": "^-"}
    for rule, marker in markers.items():
        mine = [r for r in rows if r["rule"] == rule]
        ax.plot([r["world_size"] for r in mine], [r["accuracy"] for r in mine], marker,
                color=RULE_COLOURS[rule], label=rule)
    batches = {r["world_size"]: r["global_batch_size"] for r in rows}
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(batches), [f"{n}\n({b})" for n, b in sorted(batches.items())])
    ax.set_xlabel("ranks N (global batch)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(f"after {rows[0]['epochs']} epochs, lr {rows[0]['lr']} at N = 1", fontsize=9)
    ax.legend(fontsize=8)
    return fig
