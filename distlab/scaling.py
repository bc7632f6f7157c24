"""Does distributing pay?  Measuring speedup, and two models that predict it.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``).

Two ranks on two cores should be twice as fast as one.  They are not, and this module
measures by how much and why:

1. ``measure`` is a training function for ``distlab.launch``: it trains several
   configurations back to back with the *same* ``data_parallel.train`` every lesson uses
   (one launch per world size, so the seconds of start-up are paid once), and turns each
   run's timeline into samples per second and a split of the step into compute,
   communication, waiting for the slowest rank, and the rest (optimiser, data).
   Warm-up steps are skipped: the first steps pay for memory allocation and caches.
2. ``run_scaling`` launches it for N = 1, 2, ... and returns plain rows, one per
   configuration, world size and thread count.
3. ``speedups`` compares them; ``fit_amdahl`` and ``fit_alpha_beta`` explain them.

What the larger global batch does to accuracy (the other half of the lesson) is in
``distlab.large_batch``: it trains in one process and times nothing.

Why compute per byte decides everything: every step, each rank computes on its own
``B`` samples (work that shrinks as ranks are added) but sends its *whole* gradient (work
that does not).  A wide MLP at a large batch does millions of multiply-adds per byte
sent; a narrow one at a small batch does a few, and its ranks spend the step talking.
"""
from __future__ import annotations

import os
import statistics
import time
import warnings

import torch

from .data_parallel import train, validate_args
from .models import build_model, count_parameters


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
    size = {"float32": 4, "float64": 8}[dtype]
    return count_parameters(build_model(model, width)) * size


def compute_per_byte(model: str, width: int, batch_size: int, dtype: str = "float32") -> float:
    """Lesson 05: training FLOPs of one rank's step per byte of gradient it must send."""
    return 3 * flops_per_sample(model, width) * batch_size / gradient_bytes(model, width, dtype)


# ---------------------------------------------------------------------------------------------
# Measuring: a training function run on every rank
# ---------------------------------------------------------------------------------------------
def check_configs(world_size: int, configs, *, steps: int = 12, skip: int = 2,
                  method: str = "by_hand", dtype: str = "float32", **_) -> None:
    """Fail before any process starts: every configuration must be a valid training job."""
    if not configs:
        raise ValueError("configs is empty: give at least one dict(model=..., width=..., ...)")
    if not isinstance(skip, int) or not 0 <= skip < steps - 1:
        raise ValueError(f"skip must be an integer in 0..steps-2, got skip={skip!r}, steps={steps!r}")
    for cfg in configs:
        extra = set(cfg) - {"model", "width", "batch_size", "global_batch_size"}
        if extra:
            raise ValueError(f"unknown configuration keys {sorted(extra)} in {cfg}")
        validate_args(world_size, method=method, steps=steps, dtype=dtype, **cfg)


def measure(worker, *, configs, steps: int = 12, skip: int = 2, repeats: int = 1,
            method: str = "by_hand", dtype: str = "float32") -> list[dict]:
    """Lesson 05: train each configuration for ``steps`` steps; return one row per run.

    ``configs`` are dicts with ``model``, ``width`` and either ``global_batch_size``
    (strong scaling: the job's batch stays fixed as ranks are added) or ``batch_size``
    (weak scaling: each rank's batch stays fixed).  The configurations alternate
    ``repeats`` times so that a noisy moment of the machine hits all of them, not one.
    """
    check_configs(worker.world_size, configs, steps=steps, skip=skip, method=method, dtype=dtype)
    rows = []
    for rep in range(repeats):
        for cfg in configs:
            record = train(worker, method=method, steps=steps, dtype=dtype, lr=0.01,
                           record_grads_at=(), **cfg)
            timeline = _gather_timeline(worker, record)
            row = dict(model=cfg["model"], width=cfg["width"], world_size=worker.world_size,
                       threads=torch.get_num_threads(), method=method, dtype=dtype, repeat=rep,
                       batch_size=record.config["batch_size"],
                       global_batch_size=record.config["batch_size"] * worker.world_size,
                       scaling="strong" if "global_batch_size" in cfg else "weak",
                       n_tensors=len(record.params),
                       grad_bytes=sum(p.numel() * p.element_size() for p in record.params.values()))
            row.update(split_step_times(timeline, record.config["batch_size"], skip))
            row["epoch_s"] = len(record.shard) * worker.world_size / row["samples_per_s"]
            rows.append(row)
    return rows


measure.validate_args = check_configs   # the launcher checks the job before starting processes


def _gather_timeline(worker, record) -> torch.Tensor:
    """Every rank's step times, (world_size, steps, 5), so any rank can see who waited for whom."""
    mine = torch.tensor([[s.t_start, s.t_compute_end,
                          s.t_comm_start if s.t_comm_start is not None else float("nan"),
                          s.t_comm_end if s.t_comm_end is not None else float("nan"),
                          s.t_end] for s in record.steps], dtype=torch.float64)
    return torch.stack(worker.all_gather(mine))


def split_step_times(timeline: torch.Tensor, batch_size: int, skip: int) -> dict:
    """Lesson 05: throughput and the mean split of a step, from all ranks' timelines.

    ``timeline[r, s]`` holds rank ``r``'s times of step ``s``: start, end of backward,
    start and end of the all-reduce, end of the update.  A rank that reaches the
    all-reduce early cannot finish it before the last rank arrives: that part is *waiting*;
    from the last arrival on it is *communication*.  Steps before ``skip`` are ignored.
    """
    t = timeline[:, skip:]
    world, steps = t.shape[0], t.shape[1]
    span = (t[:, -1, 4] - t[:, 0, 0]).max().item()        # the slowest rank sets the pace
    step_s = span / steps
    compute = (t[..., 1] - t[..., 0]).mean().item()
    if torch.isnan(t[..., 2]).any():                      # DDP: all-reduce hidden in backward
        comm = wait = float("nan")
        other = step_s - compute
    else:
        last_arrival = t[..., 2].max(dim=0).values         # per step, over ranks
        wait = (last_arrival - t[..., 2]).mean().item()
        comm = (t[..., 3] - last_arrival).mean().item()
        other = step_s - compute - wait - comm
    return dict(samples_per_s=world * batch_size / step_s, step_s=step_s,
                compute_s=compute, comm_s=comm, wait_s=wait, other_s=other)


# ---------------------------------------------------------------------------------------------
# Launching it for N = 1, 2, ...
# ---------------------------------------------------------------------------------------------
def run_scaling(configs, world_sizes=(1, 2), *, single_threads=(1, 2), steps: int = 12,
                skip: int = 2, repeats: int = 1, method: str = "by_hand", dtype: str = "float32",
                backend: str = "torchrun", device: str = "cpu", progress: str = "none") -> list[dict]:
    """Lesson 05: measure every configuration at every world size; return all rows.

    One launch per world size, each rank with one intra-op thread; for N = 1, one launch
    per entry of ``single_threads`` (1 thread: the per-core baseline; all cores: the
    honest single-machine alternative).  World sizes beyond the machine's cores run
    oversubscribed, with a warning: they measure what happens when ranks share cores,
    not what more cores would give.
    """
    from .launch import launch

    cores = os.cpu_count() or 1
    rows = []
    jobs = [(n, t) for n in world_sizes for t in (single_threads if n == 1 else (1,))]
    for n, threads in jobs:
        if device == "cpu" and n * threads > cores:
            warnings.warn(f"{n} ranks x {threads} threads on {cores} cores: oversubscribed, they take "
                          "turns on the cores; this measures contention, not scaling", stacklevel=2)
        t0 = time.time()
        out = launch(measure, world_size=n, backend=backend, device=device, threads=threads,
                     progress=progress, configs=list(configs), steps=steps, skip=skip,
                     repeats=repeats, method=method, dtype=dtype)
        launch_s = time.time() - t0
        for row in out[0]:
            row["launch_s"] = launch_s
        rows += out[0]
    return rows


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


def speedups(rows, baseline_threads: int = 1) -> list[dict]:
    """Lesson 05: per configuration and world size, samples/s relative to one process.

    ``speedup`` is over one process with ``baseline_threads`` intra-op threads (the
    per-core question: does a second rank pay for its core?); ``vs_all_cores`` is over
    one process using every core the ranks use (the single-machine question: is a
    second *process* better than a second *thread*?).  ``efficiency`` is speedup / N.
    """
    med = median_rows(rows)
    out = []
    for key, r in sorted(med.items()):
        if r["world_size"] == 1 and r["threads"] != baseline_threads:
            continue
        one = med.get(config_key(r) + (r["method"], 1, baseline_threads))
        if one is None:
            continue
        n = r["world_size"]
        threaded = med.get(config_key(r) + (r["method"], 1, n))
        row = dict(r, speedup=r["samples_per_s"] / one["samples_per_s"])
        row["efficiency"] = row["speedup"] / n
        row["vs_all_cores"] = (r["samples_per_s"] / threaded["samples_per_s"]
                               if threaded is not None else float("nan"))
        row["comm_to_compute"] = (r["comm_s"] + r["wait_s"]) / r["compute_s"]
        out.append(row)
    return out


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


def predict_step_seconds(one: dict, world_size: int, alpha: float, beta: float) -> float:
    """Lesson 05: a step's time at ``world_size`` ranks, from the one-rank row and alpha-beta.

    Compute shrinks with N in strong scaling (each rank gets 1/N of the batch) and stays in
    weak scaling; the rest of the step (the optimiser updates every parameter on every
    rank, data handling) does not shrink; the all-reduce grows with N.
    """
    compute = one["compute_s"] / world_size if one["scaling"] == "strong" else one["compute_s"]
    comm = allreduce_seconds(one["grad_bytes"], world_size, alpha, beta, one["n_tensors"])
    return compute + one["other_s"] + comm


def predicted_speedup(one: dict, world_size: int, alpha: float, beta: float) -> float:
    """Samples/s at ``world_size`` ranks over one rank, as ``predict_step_seconds`` sees it."""
    samples = 1 if one["scaling"] == "strong" else world_size
    return samples * one["step_s"] / predict_step_seconds(one, world_size, alpha, beta)
