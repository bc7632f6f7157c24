"""Lesson 11: the learner's own measurements across the course, in one figure.

Introduced in lesson 11 (``notebooks/11_knowledge_check.ipynb``).  Every panel draws what one lesson
stored when the learner ran it (``distlab.course.results``); a lesson not run yet leaves a panel
that says which lesson to run, never a made-up number.  One picture, because the answer to the
insurance company is a comparison: what distributing changed (nothing in the result, lesson 01),
what it cost (waiting, lesson 04; compute that did not halve, lesson 05), what it bought (speed,
lesson 05; memory, lesson 08; more data, lesson 05's more-data section) and what failure costs
(lesson 10).
"""
from __future__ import annotations

from matplotlib.figure import Figure

from .display import BLUE, GREEN, GREY, ORANGE, PURPLE, VERMILLION, WIDTH

# What lesson 05b stores (course_results.remember("05b", curve={...})): its "summary" holds
# more_data.summarise's rows (model: the data set's name, samples, mean, median, low, high).
MORE_DATA_LESSON, MORE_DATA_KEY = "05b", "curve"


def _missing(ax, title: str, lesson: str, what: str = "") -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, f"not measured yet:\nrun lesson {lesson}{' ' + what if what else ''}", ha="center",
            va="center", transform=ax.transAxes, color=GREY)
    ax.set_xticks([])
    ax.set_yticks([])


def _lesson01(ax, r):
    acc = r["test_accuracy"]
    ax.bar(["1 process", f"{r['world_size']} ranks"], [acc["one_process"], acc["ranks"]], color=[GREY, BLUE])
    ax.set_ylim(0, 1)
    ax.set_ylabel("test accuracy")
    ax.set_title(f"01: same result (params {r['max_param_difference']:.0e} apart)", fontsize=10)


def _lesson04(ax, r):
    ax.bar(["slow rank's\ndelay", "fast rank's\nextra wait"],
           [r["straggler_seconds"] * 1e3, r["extra_wait_of_rank_0"] * 1e3], color=[VERMILLION, ORANGE])
    ax.set_ylabel("ms per step")
    ax.set_title("04: everyone waits for the slowest", fontsize=10)


def _lesson05(ax, r):
    names = list(r["speedup_2_ranks"])
    values = [r["speedup_2_ranks"][n] for n in names]
    repeats = r.get("speedup_2_ranks_repeats", {})
    low = [v - repeats[n][0] if n in repeats else 0 for n, v in zip(names, values)]
    high = [repeats[n][1] - v if n in repeats else 0 for n, v in zip(names, values)]
    ax.bar(names, values, yerr=[low, high], capsize=4, color=BLUE,
           label="speedup of 2 ranks (median; whiskers: range over repeats)")
    if "compute_ratio_2_ranks" in r:
        ratio = r["compute_ratio_2_ranks"]
        ax.plot(names, [ratio.get(n, float("nan")) for n in names], "D", color=PURPLE,
                label="compute per rank, 2 ranks / 1 (ideal 0.5)")
    ax.set_ylabel("2 ranks / 1 process")
    ax.axhline(1, color=GREY, lw=1, label="break-even: 1")
    ax.axhline(2, color=GREY, lw=1, ls="--", label="ideal speedup for 2 ranks: 2")
    top = max([2.0] + [v + h for v, h in zip(values, high)])
    ax.set_ylim(0, top * 1.6)                       # room above the bars for the legend
    ax.set_title("05: does a second rank pay?", fontsize=10)
    ax.legend(fontsize=6, loc="upper left")


def _more_data(ax, rows):
    colours = {"mlp": BLUE, "cnn": GREEN, "mnist_5k": BLUE, "distorted_mnist_5k": GREEN}
    for model in dict.fromkeys(row["model"] for row in rows):
        mine = sorted((row for row in rows if row["model"] == model), key=lambda row: row["samples"])
        xs = [row["samples"] for row in mine]
        ax.plot(xs, [row["median"] for row in mine], "o-", color=colours.get(model, ORANGE), label=model)
        ax.fill_between(xs, [row["low"] for row in mine], [row["high"] for row in mine],
                        color=colours.get(model, ORANGE), alpha=0.2)
    ax.set_xscale("log")
    sizes = sorted({row["samples"] for row in rows})
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes], fontsize=7, rotation=30)
    ax.minorticks_off()                             # log-scale minor labels overlap the sizes
    ax.set_xlabel("training samples")
    ax.set_ylabel("test accuracy (seeds: range)")
    ax.set_title("05b: more data, more accuracy?", fontsize=10)
    ax.legend(fontsize=7)


def _lesson08(ax, r):
    held = r["bytes_held_by_rank_0"]
    stages = sorted(held, key=int)
    ax.bar([f"stage {s}" for s in stages], [held[s] / 1e6 for s in stages], color=GREEN)
    ax.set_ylabel("MB held by rank 0")
    ax.set_title(f"08: ZeRO on {r['world_size']} ranks", fontsize=10)


def _lesson10(ax, r):
    ax.barh(["back to\ntraining"], [r["seconds_to_restart"]], color=ORANGE)
    ax.set_xlabel("seconds from the kill")
    ax.text(0.02, 0.9, f"steps trained twice: {r['steps_redone']}\nfinal params {r['largest_difference']:.1e} "
            "from an unbroken run", transform=ax.transAxes, va="top", fontsize=8)
    ax.set_ylim(-0.6, 1.2)
    ax.set_title("10: what a killed worker cost", fontsize=10)


def course_figure(results: dict) -> Figure:
    """Lesson 11: six panels of the learner's own runs (``course_results.load()``)."""
    fig = Figure(figsize=(WIDTH, 6.2), layout="constrained")
    axes = fig.subplots(2, 3).flatten()
    panels = [("01", _lesson01, "01: same result?"), ("04", _lesson04, "04: waiting"),
              ("05", _lesson05, "05: does a second rank pay?"), ("08", _lesson08, "08: ZeRO"),
              ("10", _lesson10, "10: a failure's cost")]
    for ax, (lesson, draw, title) in zip(axes[[0, 1, 2, 4, 5]], panels):
        if lesson in results:
            draw(ax, results[lesson])
        else:
            _missing(ax, title, lesson)
    more = results.get(MORE_DATA_LESSON, {}).get(MORE_DATA_KEY, {}).get("summary")
    if more:
        _more_data(axes[3], more)
    else:
        _missing(axes[3], "05b: more data, more accuracy?", MORE_DATA_LESSON)
    fig.suptitle("Your measurements across the course", fontsize=11)
    return fig
