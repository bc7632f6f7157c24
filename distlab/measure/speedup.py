"""Reading speed measurements: speedups, and two models that predict them.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``).  ``scaling.py``
measures rows of samples per second on real ranks; this module only reads such rows (the
lesson's widgets use it too):

1. ``speedups`` compares each world size with one process (and with one process using as
   many threads as the ranks use cores);
2. ``fit_amdahl`` explains them with Amdahl's law (a part of the work that does not shrink);
3. ``fit_alpha_beta`` and ``predicted_speedup`` explain them with the alpha-beta model of
   lesson 03, fitted to the all-reduces measured inside training.

Why compute per byte decides everything: every step, each rank computes on its own
``B`` samples (work that shrinks as ranks are added) but sends its *whole* gradient (work
that does not).  A wide MLP at a large batch does millions of multiply-adds per byte
sent; a narrow one at a small batch does a few, and its ranks spend the step talking.
``flops_per_sample`` and ``compute_per_byte`` count that work.
"""
from __future__ import annotations

import statistics

import torch

from ..models import DTYPES, build_model, count_parameters

# The regimes lesson 05 compares (global batch, 2 ranks): the worst found on 2 cores, the
# untuned probe of the course's issue, and the most compute-bound found (bench/scaling.py --grid).
REGIMES = {"worst": dict(model="mlp", width=64, global_batch_size=64),
           "probe": dict(model="mlp", width=1024, global_batch_size=896),
           "best": dict(model="cnn", width=16, global_batch_size=1436)}



# ---------------------------------------------------------------------------------------------
# How much work is one step? (counted, not timed)
# ---------------------------------------------------------------------------------------------
def flops_per_sample(model: str, width: int) -> int:
    """Lesson 05: multiply-adds x2 of one *forward* pass on one 8x8 digit.

    Counted from the layers themselves (a forward hook per ``Linear``/``Conv2d``), so it
    follows the model if the model changes.  Training costs about three times this
    (forward, then backward for the activations and for the weights).
    """
    net = build_model(model, width)
    total = 0

    def count(layer, inputs, output):
        nonlocal total
        if isinstance(layer, torch.nn.Linear):
            total += 2 * layer.in_features * layer.out_features
        elif isinstance(layer, torch.nn.Conv2d):
            k = layer.kernel_size[0] * layer.kernel_size[1]
            total += 2 * layer.in_channels * layer.out_channels * k * output[0, 0].numel()

    hooks = [m.register_forward_hook(count) for m in net.modules()]
    with torch.no_grad():
        net(torch.zeros(1, 1, 8, 8))
    for h in hooks:
        h.remove()
    return total


def gradient_bytes(model: str, width: int, dtype: str = "float32") -> int:
    """Bytes each rank sends into the all-reduce every step: one number per parameter."""
    return count_parameters(build_model(model, width)) * DTYPES[dtype].itemsize


def compute_per_byte(model: str, width: int, batch_size: int, dtype: str = "float32") -> float:
    """Lesson 05: training FLOPs of one rank's step per byte of gradient it must send."""
    return 3 * flops_per_sample(model, width) * batch_size / gradient_bytes(model, width, dtype)

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

    ``scaling.measure`` runs every configuration once per repeat, a few seconds apart, so a
    repeat of N ranks and the same repeat of one process saw the machine in about the same
    mood: their ratio is the fair comparison, and the spread of the ratios over repeats says
    how far the answer can be trusted.  The table (``speedups``), the verdicts and the
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
    ``world_size`` threads, for every repeat (each repeat is a round in which every
    configuration ran once).  "Faster" or "slower" only when every repeat agrees; otherwise
    the difference is smaller than the spread of the repeats.
    """
    lines = []
    for key in dict.fromkeys(config_key(r) for r in rows):
        model, width, scaling, batch = key
        for other, threads in (("1 process x 1 thread", 1), (f"1 process x {world_size} threads", world_size)):
            ratios = repeat_ratios(rows, key, world_size, 1, threads)
            if not ratios:
                continue
            said = ("faster" if ratios[0] > 1 else "slower" if ratios[-1] < 1
                    else "no clear difference (the repeats fall on both sides of 1)")
            lines.append(f"{model}{width}, {scaling}, batch {batch}: {world_size} ranks vs {other}: "
                         f"{statistics.median(ratios):.2f}x (repeats {ratios[0]:.2f} to {ratios[-1]:.2f}): {said}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Models that predict the speedup
# ---------------------------------------------------------------------------------------------
def amdahl_speedup(n, serial_fraction: float):
    """Lesson 05: Amdahl's law: a fraction ``s`` of the work does not shrink with N workers."""
    return 1.0 / (serial_fraction + (1.0 - serial_fraction) / n)


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


def allreduce_seconds(nbytes: float, world_size: int, alpha: float, beta: float,
                      messages: int = 1) -> float:
    """Lesson 05: the alpha-beta cost of ring all-reducing ``nbytes`` in ``messages`` calls.

    A ring all-reduce takes ``2 (N-1)`` rounds (reduce-scatter, then all-gather); each round
    pays a latency ``alpha`` and moves ``nbytes / N`` bytes at ``beta`` seconds per byte.
    This is lesson 03's ``cost_model.predict_time("ring", ...)`` with one link per rank
    (``lanes=None``) and no adding cost; here alpha and beta are fitted to the all-reduces
    *inside training* (``fit_alpha_beta``) rather than to a ping-pong.
    """
    if world_size == 1:
        return 0.0
    n = world_size
    return messages * 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta


def fit_alpha_beta(rows) -> tuple[float, float]:
    """Lesson 05: latency ``alpha`` (s) and inverse bandwidth ``beta`` (s/byte) from measured rows.

    Uses each row's measured communication time (``comm_s``: from the last rank's arrival
    at the all-reduces to their end) against its gradient size and number of tensors;
    least squares, with neither coefficient allowed below zero (then the better of the
    one-coefficient fits is kept).
    """
    pts = [(r["n_tensors"] * 2 * (r["world_size"] - 1),
            2 * (r["world_size"] - 1) / r["world_size"] * r["grad_bytes"], r["comm_s"])
           for r in rows if r["world_size"] > 1 and r["comm_s"] == r["comm_s"]]
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

    The alpha-beta prediction (``predict_step_seconds``) assumes it did in strong scaling.
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


def predict_step_seconds(one: dict, world_size: int, alpha: float, beta: float,
                         compute_s: float | None = None) -> float:
    """Lesson 05: a step's time at ``world_size`` ranks, from the one-rank row and alpha-beta.

    Compute shrinks with N in strong scaling (each rank gets 1/N of the batch) and stays in
    weak scaling; the rest of the step (the optimiser updates every parameter on every
    rank, data handling) does not shrink; the all-reduce grows with N.  ``compute_s``, when
    given, replaces that assumed compute by one measured at ``world_size`` ranks
    (``compute_ratios`` says how far the two differ).
    """
    if compute_s is None:
        compute_s = one["compute_s"] / world_size if one["scaling"] == "strong" else one["compute_s"]
    comm = allreduce_seconds(one["grad_bytes"], world_size, alpha, beta, one["n_tensors"])
    return compute_s + one["other_s"] + comm


def predicted_speedup(one: dict, world_size: int, alpha: float, beta: float,
                      compute_s: float | None = None) -> float:
    """Samples/s at ``world_size`` ranks over one rank, as ``predict_step_seconds`` sees it."""
    samples = 1 if one["scaling"] == "strong" else world_size
    return samples * one["step_s"] / predict_step_seconds(one, world_size, alpha, beta, compute_s)
