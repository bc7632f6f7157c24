"""The same jobs on Horovod: a second way to start ranks and average gradients.

Introduced in lesson 02 (``notebooks/02_horovod.ipynb``).  Horovod (Uber, 2017) made data
parallelism a few-line change to a single-process script: ``hvd.init()``, broadcast the
initial parameters from rank 0, wrap the optimizer in ``hvd.DistributedOptimizer``.  It
averaged gradients with a *ring all-reduce* from its first release, and packs many small
gradients into one buffer before reducing them (*tensor fusion*).  ``HorovodWorker``
(``horovod_worker.py``) puts Horovod behind the ``Worker`` interface (``worker.py``), so every
training function runs unchanged on either backend.

Horovod starts a job in two ways, and distlab uses both:

* from Python, ``horovod.run(fn, args, num_proc=N, hosts="localhost:N", use_gloo=True)``
  ships ``fn`` to N new processes and returns every rank's return value as a list.
  ``distlab.launch(..., backend="horovod")`` calls it in a driver process
  (``horovod_driver.py``, started by ``HorovodJob``);
* from a terminal, ``horovodrun -np N --gloo -H localhost:N python -m
  distlab.processes.horovod_backend RUN_DIR`` starts N copies of this module's ``main``,
  each one rank of the job in RUN_DIR (``horovodrun_command`` writes the line out).

Why the launcher calls ``horovod.run`` from a *driver process* and not from the notebook's
own process: ``horovod.run`` installs SIGINT/SIGTERM handlers, which Python allows only in a
program's main thread, yet the notebook's main thread must keep drawing progress and catch
an interrupt; and it copies every rank's output into ``sys.stdout``.  In a driver process
its signal handling is exactly what we want (one SIGTERM stops every rank), and the output,
with Horovod's own "Process 1 exit with status code ..." lines, goes to ``launcher.log``,
where ``HorovodJob.exit_codes`` reads which rank died how.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys

import torch

from .jobs import Job
from .horovod_worker import HorovodWorker
from .devices import choose_device, torch_device
from .worker import DEFAULT_TIMEOUT

NAME = "horovod"
LOOPBACK = "lo"   # keep every rank's traffic on this machine's loopback interface


def start_worker(device: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 run_dir: str | None = None) -> HorovodWorker:
    """Join the job: ``hvd.init()`` tells each process its rank (Horovod's launcher set it up)."""
    import horovod.torch as hvd

    _undo_horovod_run_defaults()
    # Horovod reads Gloo's time limit (for connecting, and for each transfer) from the
    # environment in init(); a rank that never joins a collective is _poll's business.
    os.environ["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, math.ceil(timeout)))
    # lesson 07: process sets (``new_group``) are made when a job asks for them, after init
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    hvd.init()
    return HorovodWorker(hvd, torch_device(choose_device(device, hvd.local_size()), hvd.local_rank()),
                         timeout, run_dir)


def _undo_horovod_run_defaults() -> None:
    """horovod.run 0.28.1 hands its ranks HOROVOD_CYCLE_TIME and HOROVOD_CACHE_CAPACITY set to
    "(None,)" (a stray comma in its defaults), which Horovod reads as 0: no pause between the
    background thread's cycles (it steals CPU from training) and no response cache."""
    for name in ("HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY"):
        if os.environ.get(name) == "(None,)":
            del os.environ[name]


def check_available() -> None:
    """A clear error, before any process starts, when Horovod is not built here."""
    try:
        import horovod.torch  # noqa: F401
    except ImportError as err:
        raise RuntimeError("backend='horovod' needs Horovod built with PyTorch and Gloo "
                           f"(import failed: {err}); run `make lab` or tools/install_horovod.sh"
                           ) from err


def hello(timeout: float = 30.0) -> dict:
    """Lesson 02: a tiny Horovod program: ``horovod.run(hello, num_proc=N, ...)`` runs it N times.

    Each rank joins (``hvd.init()`` inside ``start_worker``), adds up ``rank + 1`` over all
    ranks with one all-reduce, and returns what it saw; ``horovod.run`` collects the answers.
    """
    worker = start_worker("cpu", timeout)
    try:
        total = worker.all_reduce(torch.tensor([worker.rank + 1.0]))
        return {"rank": worker.rank, "size": worker.world_size, "pid": os.getpid(),
                "sum of rank+1": total.item()}
    finally:
        worker.stop()


# ---------------------------------------------------------------------------------------------
# the notebook's side: the driver process, and reading its log
# ---------------------------------------------------------------------------------------------
class HorovodJob(Job):
    """The driver process of a Horovod job: like torchrun's, plus reading which rank failed
    from Horovod's log and stopping ranks outside the driver's process group."""

    def __init__(self, world_size: int, env: dict, run_dir: str):
        # By path, so that the driver imports neither distlab nor torch (see horovod_driver.py).
        driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "horovod_driver.py")
        super().__init__([sys.executable, driver, str(world_size), run_dir], env, run_dir)

    def exit_codes(self) -> dict[int, int]:
        """Read from Horovod's "Process 1 exit with status code 137." lines.

        A rank killed by signal n shows as 128 + n (its shell's convention); it is returned
        as -n, the way torchrun reports it, so the launcher treats both backends alike.
        """
        codes = {}
        for rank, code in re.findall(r"Process (\d+) exit with status code (\d+)\.", self.log()):
            code = int(code)
            codes[int(rank)] = -(code - 128) if 128 < code < 128 + 65 else code
        return codes

    def terminate_launcher(self, grace: float) -> None:
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
        super().terminate_launcher(grace)
        alive = []
        for p in family:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=grace)


def start_job(world_size: int, port: int | None, env: dict, run_dir: str) -> HorovodJob:
    """Lesson 02: start the job in ``run_dir`` on Horovod (called by ``distlab.launch``).

    ``port`` is not used: Horovod picks a free port for its own rendezvous server
    (``distlab.launch`` refuses a ``port=`` given with ``backend="horovod"``).
    """
    env = dict(env)
    # horovod.run talks to its ranks over HTTP on 127.0.0.1: a proxy must not get in the way.
    no_proxy = [v for v in (env.get("NO_PROXY"), env.get("no_proxy")) if v]
    env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy + ["127.0.0.1", "localhost"])
    return HorovodJob(world_size, env, run_dir)


# ---------------------------------------------------------------------------------------------
# a terminal's side: horovodrun ... python -m distlab.processes.horovod_backend RUN_DIR
# ---------------------------------------------------------------------------------------------
def horovodrun_command(world_size: int, run_dir: str) -> list[str]:
    """Lesson 02: the terminal command that runs the job in ``run_dir`` on ``world_size`` ranks."""
    return ["horovodrun", "-np", str(world_size), "--gloo", "-H", f"localhost:{world_size}",
            "--network-interfaces", LOOPBACK, sys.executable, "-m", "distlab.processes.horovod_backend",
            run_dir]


def run_rank(pool_dir: str) -> dict:
    """One Horovod rank: serve the jobs handed to ``pool_dir`` (``rank.serve``).

    Both ``horovod.run`` (through the driver) and ``horovodrun`` start this N times.  Records
    are saved in the pool folder as with torchrun; what this returns is what ``horovod.run``
    hands back to its caller, one per rank.
    """
    from .rank import serve

    # Horovod's launchers say who is who in HOROVOD_RANK; the pool folder's pid files use RANK.
    os.environ.setdefault("RANK", os.environ.get("HOROVOD_RANK", "?"))
    jobs = serve(pool_dir, backend=NAME)
    return {"rank": int(os.environ["RANK"]), "pid": os.getpid(), "jobs": jobs}


def main(argv: list[str] | None = None) -> int:
    from .arguments import parse_kwargs
    from .rank import write_job

    parser = argparse.ArgumentParser(
        prog="python -m distlab.processes.horovod_backend",
        description="One Horovod rank of a distlab job (run it under horovodrun), e.g.\n"
                    "  horovodrun -np 2 --gloo -H localhost:2 python -m distlab.processes.horovod_backend "
                    "runs/hvd distlab.data_parallel.data_parallel:train method=ddp global_batch_size=64 steps=50",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="the run folder: job_0/job.pkl in, job_0/record_<rank>.pt out")
    parser.add_argument("fn", nargs="?", help="module:function to write into the job first")
    parser.add_argument("kwargs", nargs="*", help="key=value arguments of the function")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds for every collective")
    args = parser.parse_args(argv)
    if args.fn:
        try:
            kwargs = parse_kwargs(args.kwargs)
        except ValueError as err:
            parser.error(str(err))
        write_job(args.run_dir, args.fn, kwargs, timeout=args.timeout)
    summary = run_rank(args.run_dir)
    record = os.path.join(args.run_dir, "job_0", f"record_{summary['rank']}.pt")
    print(f"rank {summary['rank']}: done, record in {record}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
