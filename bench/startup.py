"""Benchmark (lesson 00): how long a launch takes before the first training step, cold and warm.

Three ways to start the same 2-rank, 1-step job (``data_parallel.train``), alternated in
rounds so that a drifting machine hits them alike, each next to ``import torch`` timed in a
fresh process in the same round (the unit every start-up is measured in):

* ``torchrun CLI``: what distlab did before warm ranks, and what a terminal does:
  ``torchrun ... -m distlab.processes.rank`` starts every rank as a new Python;
* ``cold``: a new pool (``distlab.launch(..., warm=True)`` after ``distlab.shutdown()``):
  torchrun's launcher forks its ranks from a process that has imported PyTorch once;
* ``warm``: the same launch again, on the ranks the cold one left waiting (the median of
  ``WARM_LAUNCHES`` in a row).

For the cold launch the pool's own clock splits the wait (``Pool.startup``): launcher
ready, ranks started, ranks joined, first step.  With ``--course``, the whole course then runs
under nbval twice, with every launch cold (``DISTLAB_WARM=0``) and warm (the default in a
notebook).

Goals: cold launch to first step at most 2.0 x ``import torch``; warm at most 0.1 x; the
course's nbval time before/after (goal: warm not slower, ratio >= 1.0) only with ``--course``
(the course runs twice under nbval, about 20 minutes, far past a benchmark's few minutes, and
as one round it cannot show a spread).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.processes import pool as pools
from distlab.processes.arguments import free_port
from distlab.processes.rank import write_job
from distlab.processes.torch_backend import torchrun_command
from scripts.goals import goal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = dict(global_batch_size=64, steps=1, record_grads_at=())
ROUNDS = 9
WARM_LAUNCHES = 5   # per round: a warm launch takes milliseconds, so one alone is mostly noise


def import_torch() -> float:
    t0 = time.time()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.time() - t0


def first_step(records, t0: float) -> float:
    return max(r.steps[0].t_start for r in records) - t0


def torchrun_cli() -> float:
    """The job through the torchrun command, every rank a fresh Python (records read back)."""
    import torch

    run_dir = tempfile.mkdtemp(prefix="distlab-bench-")
    t0 = time.time()
    write_job(run_dir, dp.train, JOB, device="cpu")
    cmd = torchrun_command(2, free_port(), run_dir)
    cmd[0:1] = [sys.executable, "-m", "torch.distributed.run"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    records = [torch.load(os.path.join(run_dir, "job_0", f"record_{r}.pt"), weights_only=False) for r in (0, 1)]
    return first_step(records, t0)


def launch(warm_pool: bool) -> tuple[float, dict]:
    if not warm_pool:
        distlab.shutdown()
    t0 = time.time()
    records = distlab.launch(dp.train, world_size=2, warm=True, progress="none", **JOB)
    startup = pools.current().startup()
    startup["first step"] = first_step(records, pools.current().started)
    return first_step(records, t0), startup


def course_seconds(warm: str) -> float:
    env = dict(os.environ, DISTLAB_WARM=warm)
    t0 = time.time()
    out = subprocess.run([sys.executable, "-m", "pytest", "notebooks", "--nbval", "--nbval-current-env",
                          "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    print(f"  course under nbval, DISTLAB_WARM={warm}: {time.time() - t0:.0f} s, "
          f"{out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]}", flush=True)
    return time.time() - t0


def main() -> int:
    started = time.time()
    ratios = {"torchrun CLI": [], "cold": [], "warm": []}
    phases = []
    for r in range(ROUNDS):
        base = import_torch()
        cli = torchrun_cli()
        cold, phase = launch(warm_pool=False)
        warm = statistics.median(launch(warm_pool=True)[0] for _ in range(WARM_LAUNCHES))
        phases.append(phase)
        for name, seconds in (("torchrun CLI", cli), ("cold", cold), ("warm", warm)):
            ratios[name].append(seconds / base)
        print(f"round {r}: import torch {base:.2f} s; to first step: torchrun CLI {cli:.2f} s, "
              f"cold {cold:.2f} s, warm {warm:.3f} s", flush=True)
    distlab.shutdown()
    print("cold start, seconds since the pool began (median of rounds):")
    for part in phases[0]:
        print(f"  {part:<15}{statistics.median(p[part] for p in phases):6.2f}")
    for name, values in ratios.items():
        print(f"  {name:<13} / import torch: {statistics.median(values):.3f} "
              f"(rounds {', '.join(f'{v:.3f}' for v in values)})")
    if "--course" in sys.argv:
        before, after = course_seconds("0"), course_seconds("1")
        print(f"  course: {before:.0f} s with cold launches, {after:.0f} s with warm ranks")
    goal("cold_launch_to_first_step_vs_import_torch", ratios["cold"], "<=", 2.0)
    goal("warm_launch_to_first_step_vs_import_torch", ratios["warm"], "<=", 0.1)
    if "--course" in sys.argv:
        goal("course_nbval_seconds_before_vs_after", [before / after], ">=", 1.0)   # one round: minutes each
    print(f"benchmark took {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
