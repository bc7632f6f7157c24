"""Reading speed measurements: speedups, and the constants of the models that predict them.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``).  ``scaling.py``
measures rows of samples per second on real ranks; this module only reads such rows (the
lesson's widgets use it too):

1. ``speedups`` compares each world size with one process (and with one process using as
   many threads as the ranks use cores);
2. ``fit_amdahl`` explains them with Amdahl's law (a part of the work that does not shrink);
3. ``fit_alpha_beta`` explains them with the alpha-beta model of lesson 03, fitted to the
   all-reduces measured inside training.

The models themselves, and the count of the work a step does per byte it sends, are
``predict.speedup`` and ``predict.flops``.
"""
from __future__ import annotations

import statistics

import torch

from ..predict.alpha_beta import all_reduce_seconds

# The regimes lesson 05 compares (global batch, 2 ranks): the worst found on 2 cores, the
# untuned probe of the course's issue, and the most compute-bound found (bench/scaling.py --grid).
REGIMES = {"worst": dict(model="mlp", width=64, global_batch_size=64),
           "probe": dict(model="mlp", width=1024, global_batch_size=896),
           "best": dict(model="cnn", width=16, global_batch_size=1436)}


# ---------------------------------------------------------------------------------------------
# Comparing measurements
# ---------------------------------------------------------------------------------------------
def config_key(row: dict) -> tuple:
    """What makes two rows the same experiment, apart from the world size and threads."""
    batch = row["global_batch_size"] if row["scaling"] == "strong" else row["batch_size"]
    return (row["model"], row["width"], row["scaling"], batch)


def median_rows(rows) -> dict:
    """Median samples/s (and split) per (configuration, method, world size, threads) over repeats."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(config_key(r) + (r["method"], r["world_size"], r["threads"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        best = dict(rs[0])
        for field in ("samples_per_s", "step_s", "epoch_s", "compute_s", "comm_s", "wait_s", "other_s"):
            best[field] = statistics.median(r[field] for r in rs)
        out[key] = best
    return out


def repeat_ratios(rows, key: tuple, world_size: int, threads: int, base_threads: int = 1,
                  field: str = "samples_per_s", method: str = "by_hand") -> list[float]:
    """Lesson 05: ``field`` at ``world_size`` ranks over one process's, repeat by repeat, sorted.

    ``scaling.measure`` runs every configuration once per repeat; repeat i of N ranks is paired
    with repeat i of one process, which ran in another launch (``run_scaling`` launches the
    world sizes one after the other), so a pair shares its place in the order, not its moment.
    Each pair's ratio is one run, and the spread of the ratios over repeats says how far the
    answer can be trusted.  The table (``speedups``), the verdicts and the
    compute ratios all take their numbers from here, so they cannot disagree.
    """
    def by_repeat(world, thr):
        return {r.get("repeat", 0): r[field] for r in rows
                if config_key(r) == key and r.get("method", method) == method
                and r["world_size"] == world and r["threads"] == thr}

    mine, base = by_repeat(world_size, threads), by_repeat(1, base_threads)
    return sorted(mine[i] / base[i] for i in mine if i in base)


def speedups(rows, baseline_threads: int = 1) -> list[dict]:
    """Lesson 05: per configuration and world size, samples/s relative to one process.

    ``speedup`` is over one process with ``baseline_threads`` intra-op threads (the
    per-core question: does a second rank pay for its core?); ``vs_all_cores`` is over
    one process using every core the ranks use (the single-machine question: is a
    second *process* better than a second *thread*?).  ``efficiency`` is speedup / N.
    Both ratios are the median over repeats of ``repeat_ratios`` (``speedup_lo`` and
    ``speedup_hi`` are their range), the same numbers ``verdicts`` prints.
    """
    med = median_rows(rows)
    out = []
    for key, r in sorted(med.items()):
        if r["world_size"] == 1 and r["threads"] != baseline_threads:
            continue
        if med.get(config_key(r) + (r["method"], 1, baseline_threads)) is None:
            continue
        n = r["world_size"]
        ratios = repeat_ratios(rows, config_key(r), n, r["threads"], baseline_threads, method=r["method"])
        threaded = repeat_ratios(rows, config_key(r), n, r["threads"], n, method=r["method"])
        row = dict(r, speedup=statistics.median(ratios), speedup_lo=ratios[0], speedup_hi=ratios[-1])
        row["efficiency"] = row["speedup"] / n
        row["vs_all_cores"] = statistics.median(threaded) if threaded else float("nan")
        row["comm_to_compute"] = (r["comm_s"] + r["wait_s"]) / r["compute_s"]
        out.append(row)
    return out


def verdicts(rows, world_size: int = 2) -> str:
    """Lesson 05: what the measurement says, configuration by configuration, with its spread.

    A lesson must not promise a speedup that this machine may not deliver today, so it prints
    this instead: ``world_size`` ranks against one process with 1 thread, and against one with
    ``world_size`` threads.  Each repeat (a round in which every configuration ran once) gives
    one ratio, one independent run; the course's one rule (``distlab.verdict.against`` on the
    ratios, ``log=True``) says "faster", "slower" or "no clear difference" against 1.
    """
    from ..verdict import against

    lines = []
    for key in dict.fromkeys(config_key(r) for r in rows):
        model, width, scaling, batch = key
        for other, threads in (("1 process x 1 thread", 1), (f"1 process x {world_size} threads", world_size)):
            ratios = repeat_ratios(rows, key, world_size, 1, threads)
            if not ratios:
                continue
            v = against(ratios, 1.0, names=(f"{world_size} ranks", other), better="higher", log=True)
            said = ("faster" if v.winner == f"{world_size} ranks" else "slower" if v.winner else
                    v.text.split(" (")[0])
            lines.append(f"{model}{width}, {scaling}, batch {batch}: {world_size} ranks vs {other}: "
                         f"{statistics.median(ratios):.2f}x (repeats {ratios[0]:.2f} to {ratios[-1]:.2f}): {said}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The constants of the models that predict the speedup (the models: predict.speedup)
# ---------------------------------------------------------------------------------------------
def fit_amdahl(world_sizes, measured_speedups) -> float:
    """Lesson 05: the serial fraction ``s`` that best explains measured speedups.

    Amdahl's law is linear in ``s`` once inverted: ``1/S - 1/N = s * (1 - 1/N)``, so the
    least-squares ``s`` has a closed form.  World sizes of 1 carry no information and are
    ignored.  A negative ``s`` means faster than ideal (e.g. the data fit in cache).
    """
    pairs = [(n, s) for n, s in zip(world_sizes, measured_speedups) if n > 1]
    if not pairs:
        raise ValueError("fit_amdahl needs at least one measurement with more than one worker")
    a = [1 - 1 / n for n, _ in pairs]
    b = [1 / s - 1 / n for n, s in pairs]
    return sum(x * y for x, y in zip(a, b)) / sum(x * x for x in a)


def fit_alpha_beta(rows) -> tuple[float, float]:
    """Lesson 05: latency ``alpha`` (s) and inverse bandwidth ``beta`` (s/byte) from measured rows.

    Uses each row's measured communication time (``comm_s``: from the last rank's arrival
    at the all-reduces to their end) against its gradient size and number of tensors;
    least squares, with neither coefficient allowed below zero (then the better of the
    one-coefficient fits is kept).  The model is linear in alpha and beta, so what multiplies
    each is read from the model itself (``predict.alpha_beta.all_reduce_seconds`` with one of
    them 1 and the other 0), not written out a second time.
    """
    def weights(r):
        return [all_reduce_seconds(r["grad_bytes"], r["world_size"], a, b, r["n_tensors"]) for a, b in ((1, 0), (0, 1))]

    pts = [(*weights(r), r["comm_s"]) for r in rows if r["world_size"] > 1 and r["comm_s"] == r["comm_s"]]
    if not pts:
        raise ValueError("fit_alpha_beta needs by_hand rows with more than one rank")
    x = torch.tensor([p[:2] for p in pts], dtype=torch.float64)
    t = torch.tensor([p[2] for p in pts], dtype=torch.float64)
    best = (float("inf"), 0.0, 0.0)
    for cols in ([0, 1], [1], [0]):              # both; bandwidth alone; latency alone
        coef = torch.zeros(2, dtype=torch.float64)
        coef[cols] = torch.linalg.lstsq(x[:, cols], t[:, None]).solution.flatten()
        err = ((x @ coef - t) ** 2).sum().item()
        if (coef >= 0).all() and err < best[0]:
            best = (err, coef[0].item(), coef[1].item())
    return best[1], best[2]


def compute_ratios(rows, world_size: int = 2) -> list[dict]:
    """Lesson 05: did each rank's forward+backward really shrink to 1/N of one process's?

    The alpha-beta prediction (``predict.speedup.predict_step_seconds``) assumes it did in strong
    scaling.
    This compares the measured ``compute_s`` (forward and backward, per rank and step) at
    ``world_size`` ranks with one process at one thread, repeat by repeat (``repeat_ratios``):
    ``ideal`` is 1/N in strong scaling and 1 in weak scaling.  A ratio above the ideal is
    compute that did not split: smaller matrix products use a core less well, and two
    processes on two cores share caches, memory bandwidth and the machine's other work.
    """
    out = []
    for key in dict.fromkeys(config_key(r) for r in rows):
        ratios = repeat_ratios(rows, key, world_size, 1, 1, field="compute_s")
        if ratios:
            out.append(dict(key=key, ratios=ratios, median=statistics.median(ratios),
                            ideal=1 / world_size if key[2] == "strong" else 1.0))
    return out


