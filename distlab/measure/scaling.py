"""Does distributing pay?  Measuring samples per second on 1, 2, ... real ranks.

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

``speedup.py`` reads those rows (speedups, Amdahl's law, the alpha-beta prediction); what
the larger global batch does to accuracy is in ``large_batch.py``.
"""
from __future__ import annotations

import os
import time
import warnings

import torch

from ..data_parallel.data_parallel import train

TRAINING = dict(lr=0.01, record_grads_at=())   # timing only: a small step, no gradients kept


# ---------------------------------------------------------------------------------------------
# Measuring: a training function run on every rank
# ---------------------------------------------------------------------------------------------
def check_configs(world_size: int, *, configs, steps: int, skip: int, repeats: int, method: str,
                  dtype: str) -> None:
    """Fail before any process starts: every configuration must be a valid training job."""
    from ..processes.arguments import bind_arguments
    from ..checks import check_int

    if not configs:
        raise ValueError("configs is empty: give at least one dict(model=..., width=..., ...)")
    if not isinstance(skip, int) or not 0 <= skip < steps - 1:
        raise ValueError(f"skip must be an integer in 0..steps-2, got skip={skip!r}, steps={steps!r}")
    check_int("repeats", repeats)
    for cfg in configs:
        extra = set(cfg) - {"model", "width", "batch_size", "global_batch_size"}
        if extra:
            raise ValueError(f"unknown configuration keys {sorted(extra)} in {cfg}")
        bind_arguments(train, world_size, dict(cfg, **TRAINING, method=method, steps=steps, dtype=dtype))


def measure(worker, *, configs: list[dict], steps: int = 12, skip: int = 2, repeats: int = 1,
            method: str = "by_hand", dtype: str = "float32") -> list[dict]:
    """Lesson 05: train each configuration for ``steps`` steps; return one row per run.

    ``configs`` are dicts with ``model``, ``width`` and either ``global_batch_size``
    (strong scaling: the job's batch stays fixed as ranks are added) or ``batch_size``
    (weak scaling: each rank's batch stays fixed).  The configurations alternate
    ``repeats`` times so that a noisy moment of the machine hits all of them, not one.
    """
    rows = []
    for rep in range(repeats):
        for cfg in configs:
            record = train(worker, method=method, steps=steps, dtype=dtype, **TRAINING, **cfg)
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


def _timeline(record) -> torch.Tensor:
    """One rank's step times, (steps, 5): start, end of backward, all-reduce start and end, end."""
    return torch.tensor([[s.t_start, s.t_compute_end,
                          s.t_comm_start if s.t_comm_start is not None else float("nan"),
                          s.t_comm_end if s.t_comm_end is not None else float("nan"),
                          s.t_end] for s in record.steps], dtype=torch.float64)


def _gather_timeline(worker, record) -> torch.Tensor:
    """Every rank's step times, (world_size, steps, 5), so any rank can see who waited for whom."""
    return torch.stack(worker.all_gather(_timeline(record)))


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


def side_by_side(worker, *, config: dict, steps: int = 16, skip: int = 2, blocks: int = 3,
                 method: str = "ddp") -> list[dict]:
    """Lesson 05's question asked seconds apart: one process alone, then all ranks together.

    ``measure`` times one world size per launch, so 1 rank and 2 ranks are timed tens of
    seconds apart, and on a shared machine its speed moves by more than the answer's margin
    in that time.  Here, inside one launch of N ranks, each block trains ``config`` (a
    ``global_batch_size`` shared by the ranks) three ways, in an order that rotates:

    * ``alone``: rank 0 trains the whole global batch with one thread (``train_single``, the
      same loop with nothing to communicate) while the other ranks wait at a barrier, which
      blocks without using a core;
    * ``all_cores_alone``: the same with as many threads as the ranks have cores, rank 0
      unbound for the block (the honest single-machine alternative);
    * ``together``: all ranks train with ``method`` (``data_parallel.train``).

    Returns, on every rank, one dict per block: samples per second of each way, and for each
    lone way the share of a core the busiest waiting rank used meanwhile (``*_waiting_cpu``,
    near 0 if the waiting really is idle).
    """
    from ..data_parallel.data_parallel import train_single
    from ..processes.cores import set_cores

    n = worker.world_size
    bound, threads = os.sched_getaffinity(0), torch.get_num_threads()
    out = []
    for block in range(blocks):
        order = ("alone", "all_cores_alone", "together")
        order = order[block % 3:] + order[:block % 3]
        row = {}
        for way in order:
            if way == "together":
                record = train(worker, method=method, steps=steps, **TRAINING, **config)
                t = _gather_timeline(worker, record)
                row[way] = split_step_times(t, record.config["batch_size"], skip)["samples_per_s"]
                continue
            seconds = torch.zeros(1, dtype=torch.float64)
            wall, cpu = time.perf_counter(), time.process_time()
            if worker.rank == 0:
                if way == "all_cores_alone":
                    set_cores(range(os.cpu_count() or 1))
                    torch.set_num_threads(threads * n)
                record = train_single(world_size=n, steps=steps, **TRAINING, **config)
                set_cores(bound)
                torch.set_num_threads(threads)
                step_s = split_step_times(_timeline(record)[None], record.config["batch_size"], skip)["step_s"]
                seconds += step_s
            worker.barrier()                                  # the others wait here, idle
            busy = torch.tensor([(time.process_time() - cpu) / (time.perf_counter() - wall)])
            row[f"{way}_waiting_cpu"] = max(t.item() for t in worker.all_gather(busy)[1:])
            row[way] = config["global_batch_size"] / worker.broadcast(seconds, src=0).item()
        out.append(row)
    return out


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
    from ..processes.launcher import launch

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

