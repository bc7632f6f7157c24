"""The same job on Horovod: a second way to start ranks and average gradients.

Introduced in lesson 02 (``notebooks/02_horovod.ipynb``).  Horovod (Uber, 2017) made data
parallelism a few-line change to a single-process script: ``hvd.init()``, broadcast the
initial parameters from rank 0, wrap the optimizer in ``hvd.DistributedOptimizer``.  It
averaged gradients with a *ring all-reduce* from its first release, and packs many small
gradients into one buffer before reducing them (*tensor fusion*).  Inside a worker, distlab
hides the difference behind ``Worker`` (see ``runtime.py``), so ``data_parallel.train`` runs
unchanged on either backend.

Horovod starts a job in two ways, and distlab uses both:

* from Python, ``horovod.run(fn, args, num_proc=N, hosts="localhost:N", use_gloo=True)``
  ships ``fn`` to N new processes and returns every rank's return value as a list.
  ``distlab.launch(..., backend="horovod")`` calls it in a driver process
  (``horovod_driver.py``);
* from a terminal, ``horovodrun -np N --gloo -H localhost:N python -m distlab.horovod_backend
  RUN_DIR`` starts N copies of this module's ``main``, each one rank of the job in RUN_DIR
  (``horovodrun_command`` writes the line out).  ``python -m distlab.horovod_backend
  RUN_DIR FN key=value ...`` first writes the job, so a terminal needs nothing else.

Why the launcher calls ``horovod.run`` from a small *driver process* and not from the
notebook's own process: ``horovod.run`` installs SIGINT/SIGTERM handlers, which Python allows
only in a program's main thread, yet the notebook's main thread must keep drawing progress
and catch an interrupt; and it copies every rank's output into ``sys.stdout``.  In a driver
process its signal handling is exactly what we want (one SIGTERM stops every rank), and the
output, with Horovod's own "Process 1 exit with status code ..." lines, goes to
``launcher.log``, where ``HorovodJob.exit_codes`` reads which rank died how.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import os
import pickle
import re
import sys

from .launch import _Subprocess

LOOPBACK = "lo"   # keep every rank's traffic on this machine's loopback interface


def horovodrun_command(world_size: int, run_dir: str) -> list[str]:
    """Lesson 02: the terminal command that runs the job in ``run_dir`` on ``world_size`` ranks."""
    return ["horovodrun", "-np", str(world_size), "--gloo", "-H", f"localhost:{world_size}",
            "--network-interfaces", LOOPBACK, sys.executable, "-m", "distlab.horovod_backend", run_dir]


def hello(timeout: float = 30.0) -> dict:
    """Lesson 02: a tiny Horovod program: ``horovod.run(hello, num_proc=N, ...)`` runs it N times.

    Each rank joins (``hvd.init()`` inside ``start_worker``), adds up ``rank + 1`` over all
    ranks with one all-reduce, and returns what it saw; ``horovod.run`` collects the answers.
    """
    import torch

    from .runtime import start_worker, stop_worker

    _undo_horovod_run_defaults()
    worker = start_worker("horovod", "cpu", timeout)
    try:
        total = worker.all_reduce(torch.tensor([worker.rank + 1.0]))
        return {"rank": worker.rank, "size": worker.world_size, "pid": os.getpid(),
                "sum of rank+1": total.item()}
    finally:
        stop_worker(worker)


def train_both_methods(worker, **config) -> dict:
    """Lesson 02: lesson 01's training by hand, then with the backend's own wrapper, in one job.

    DistributedDataParallel under torchrun, ``hvd.DistributedOptimizer`` under Horovod.  Each
    run starts from the same seed; one launch instead of two saves seconds of start-up.
    """
    from . import data_parallel as dp

    return {method: dp.train(worker, method=method, **config) for method in ("by_hand", "ddp")}


def _check_both_methods(world_size: int, **config) -> None:
    from . import data_parallel as dp

    for method in ("by_hand", "ddp"):
        dp.validate_args(world_size, method=method, **config)


train_both_methods.validate_args = _check_both_methods   # distlab.launch checks before starting


def _undo_horovod_run_defaults() -> None:
    """horovod.run 0.28.1 hands its ranks HOROVOD_CYCLE_TIME and HOROVOD_CACHE_CAPACITY set to
    "(None,)" (a stray comma in its defaults), which Horovod reads as 0: no pause between the
    background thread's cycles (it steals CPU from training) and no response cache."""
    for name in ("HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY"):
        if os.environ.get(name) == "(None,)":
            del os.environ[name]


def run_rank(run_dir: str) -> dict:
    """One Horovod rank: run this process's part of the job in ``run_dir``.

    Both ``horovod.run`` and ``horovodrun`` start this N times.  The record is saved in
    ``run_dir`` as with torchrun; what this returns (rank, process id, where the record is)
    is what ``horovod.run`` hands back to its caller, one per rank.
    """
    from .worker import run_job

    # Horovod's launchers say who is who in HOROVOD_RANK; the run folder's pid files use RANK.
    os.environ.setdefault("RANK", os.environ.get("HOROVOD_RANK", "?"))
    _undo_horovod_run_defaults()
    run_job(run_dir, backend="horovod")
    rank = int(os.environ["RANK"])
    return {"rank": rank, "pid": os.getpid(), "record": os.path.join(run_dir, f"record_{rank}.pt")}


class HorovodJob(_Subprocess):
    """The driver process of a Horovod job, as ``distlab.launch`` sees it: like torchrun's,
    plus reading which rank failed from Horovod's log and stopping ranks outside its group."""

    def __init__(self, world_size: int, env: dict, run_dir: str):
        # By path, so that the driver imports neither distlab nor torch (see horovod_driver.py).
        driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "horovod_driver.py")
        super().__init__([sys.executable, driver, str(world_size), run_dir], env, run_dir)

    def exit_codes(self) -> dict[int, int]:
        """{rank: exit code} of the ranks that failed, read from Horovod's log lines.

        A rank killed by signal n shows as 128 + n (its shell's convention); it is returned
        as -n, the way torchrun reports it, so the launcher treats both backends alike.
        """
        codes = {}
        for rank, code in re.findall(r"Process (\d+) exit with status code (\d+)\.", self.log()):
            code = int(code)
            codes[int(rank)] = -(code - 128) if 128 < code < 128 + 65 else code
        return codes

    def terminate(self, grace: float) -> None:
        """SIGTERM the driver: Horovod then stops every rank.  Then make sure none is left.

        Horovod starts each rank under a "middleman" process in a session of its own, so
        stopping the driver's process group does not reach them: every descendant of the
        driver still there once the driver has gone is killed.
        """
        import psutil

        try:
            family = psutil.Process(self.popen.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        super().terminate(grace)
        alive = []
        for p in family:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=grace)


def start_horovod(world_size: int, port: int, env: dict, run_dir: str) -> HorovodJob:
    """Lesson 02: start the job in ``run_dir`` on Horovod (called by ``distlab.launch``).

    ``port`` is not used: Horovod picks a free port for its own rendezvous server
    (``distlab.launch`` refuses a ``port=`` given with ``backend="horovod"``).
    The collective timeout comes from the job (``runtime.start_worker`` sets Horovod's
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` from it before ``hvd.init()``).
    """
    env = dict(env)
    # horovod.run talks to its ranks over HTTP on 127.0.0.1: a proxy must not get in the way.
    no_proxy = [v for v in (env.get("NO_PROXY"), env.get("no_proxy")) if v]
    env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy + ["127.0.0.1", "localhost"])
    return HorovodJob(world_size, env, run_dir)


# ---------------------------------------------------------------------------------------------
# python -m distlab.horovod_backend ...
# ---------------------------------------------------------------------------------------------
def write_job(run_dir: str, fn_name: str, kwargs: dict, timeout: float = 60.0, threads: int = 1,
              device: str = "auto") -> None:
    """Write a job for ``fn_name`` ("module:function") into ``run_dir``, as the launcher does.

    Every rank may call this with the same arguments: the file is replaced atomically.
    """
    module, _, name = fn_name.partition(":")
    fn = getattr(importlib.import_module(module), name)
    os.makedirs(run_dir, exist_ok=True)
    job = {"fn": fn, "kwargs": kwargs, "device": device, "timeout": float(timeout),
           "threads": threads}
    path = os.path.join(run_dir, "job.pkl")
    with open(f"{path}.tmp{os.getpid()}", "wb") as f:
        pickle.dump(job, f)
    os.replace(f"{path}.tmp{os.getpid()}", path)


def _parse_kwargs(pairs: list[str]) -> dict:
    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got {pair!r}")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value            # a bare word: a string
    return kwargs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m distlab.horovod_backend",
        description="One Horovod rank of a distlab job (run it under horovodrun), e.g.\n"
                    "  horovodrun -np 2 --gloo -H localhost:2 python -m distlab.horovod_backend "
                    "runs/hvd distlab.data_parallel:train method=ddp global_batch_size=64 steps=50",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="the run folder: job.pkl in, record_<rank>.pt out")
    parser.add_argument("fn", nargs="?", help="module:function to write into the job first")
    parser.add_argument("kwargs", nargs="*", help="key=value arguments of the function")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for every collective")
    args = parser.parse_args(argv)
    if args.fn:
        write_job(args.run_dir, args.fn, _parse_kwargs(args.kwargs), timeout=args.timeout)
    summary = run_rank(args.run_dir)
    print(f"rank {summary['rank']}: done, record in {summary['record']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
