"""Start N real worker processes from a notebook cell (or a terminal) and collect their records.

Introduced in lesson 01 (warm ranks: lesson 00).  ``launch(train, world_size=2, ...)``:

1. checks everything it can *before* starting a process (``checks.py``: world size,
   backend, device, port, that ``train`` is importable, what it ``supports`` (backends,
   devices, checkpoints, faults), its arguments against its signature and its own
   ``validate_args``), so mistakes fail in milliseconds;
2. finds ranks to run it on: the warm ones of the last launch when they fit (``pool.py``),
   else new ones, started through the backend's job: torchrun (``torch_backend``) or
   Horovod (``horovod_backend``, lesson 02);
3. hands them the job (``rank.submit``) and, while they run, shows one progress bar per
   rank (read from files the ranks append to);
4. when a rank fails, or the cell is interrupted, stops every rank, checks that none is
   left, and raises ``WorkerError`` naming the rank, with its traceback;
5. returns the list of records, one per rank, in rank order.
"""
from __future__ import annotations

import os
import signal
import sys
import time
import warnings

from ..long_runs import diagnosis
from . import pool as pools
from .arguments import bind_arguments, check_capabilities, check_importable, check_port
from ..checks import check_int, check_positive
from .progress import ProgressReader, in_notebook, make_progress
from .devices import choose_device
from .worker import DEFAULT_TIMEOUT, backend_module


class WorkerError(RuntimeError):
    """A worker failed. ``rank`` names it (None: the launcher itself died); ``remote_traceback`` is
    its traceback when it had one."""

    def __init__(self, rank, message: str, remote_traceback: str = "", log: str = ""):
        self.rank, self.remote_traceback, self.log = rank, remote_traceback, log
        text = f"rank {rank} failed: {message}" if rank is not None else f"the launcher failed: {message}"
        if remote_traceback:
            text += f"\n\n--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(text)


def launch(fn, world_size: int | None = None, *, backend: str = "torchrun", device: str = "auto",
           port: int | None = None, timeout: float = DEFAULT_TIMEOUT, threads: int = 1,
           progress: str = "auto", title: str | None = None, bind_cores: bool = True,
           warm: bool | str = "auto", checkpoint: dict | None = None, fault: dict | None = None,
           tensorboard: bool = False, run_options: dict | None = None, who_can=None, **kwargs) -> list:
    """Lesson 01: run ``fn(worker, **kwargs)`` on ``world_size`` real processes; return their records.

    ``fn`` must live in an importable module.  ``timeout`` (seconds) bounds every collective.
    ``threads`` is the number of intra-op threads per rank (1 keeps ranks from fighting
    over the cores); ``bind_cores`` gives each CPU rank cores of its own when there are
    enough (``cores.bind_to_cores``, lesson 02).  ``warm`` (lesson 00): keep the ranks for the
    next launch (True), or start fresh ones and stop them afterwards (False); ``"auto"``:
    warm in a notebook, cold in a script (``DISTLAB_WARM=1`` or ``0`` decides instead).
    Raises ``WorkerError`` naming the failed rank.

    ``distlab.launch`` also takes a run config (lesson 09), or the path of its file, in place of ``fn``
    (``cluster.config.launch_arguments`` turns it into this call: ``run_options`` are its checkpoint,
    fault and TensorBoard settings), and passes ``who_can``, which names the strategies that can do what
    ``fn`` cannot.  ``world_size`` defaults to 2.

    Lesson 10, for long runs: ``checkpoint={"dir": ..., "every": 10, "keep": 2, "resume": True}``
    saves the ranks' state every 10 steps and starts from the newest checkpoint in ``dir``;
    ``fault={"kind": "kill", "rank": 1, "step": 5}`` breaks a rank on purpose (``faults``);
    ``tensorboard=True`` also writes TensorBoard files next to the metrics every rank writes.
    """
    world_size = 2 if world_size is None else world_size
    options = {**(run_options or {}), **job_options(world_size, checkpoint, fault, tensorboard)}
    check_int("world_size", world_size)
    dev = choose_device(device, world_size)
    check_importable(fn)
    check_capabilities(fn, backend, dev, options, who_can=who_can)   # issue 27: what fn.supports rules out
    chosen = backend_module(backend)                   # the backend (Horovod's import alone takes seconds)
    chosen.check_available()
    bound = bind_arguments(fn, world_size, kwargs, backend=backend, device=dev)
    if hasattr(fn, "spec_of"):                         # issue 36: the ranks get the one spec
        kwargs = bound
    if port is not None and backend == "horovod":
        raise ValueError("port= sets torchrun's rendezvous port; Horovod always picks a free "
                         "port for its own rendezvous (horovod.run has no setting for it)")
    if port is not None:
        check_port(port)
    check_positive("timeout", timeout, " of seconds")
    warm = use_warm_ranks(warm)
    key = (backend, world_size, dev, float(timeout), port)
    env = dict(_worker_env(threads, dev), DISTLAB_PRELOAD=getattr(fn, "__module__", ""))
    if warm:
        pool, reused = pools.get(key, env)
    else:
        pools.retire()                    # one pool at a time: idle ranks hold memory
        pool, reused = pools.Pool(key, env), False
    try:
        folder = pool.submit(fn, kwargs, threads=threads, bind_cores=bind_cores, options=options)
    except Exception as err:
        pools.discard(pool)
        raise ValueError(f"the arguments for the workers cannot be pickled: {err}") from err

    title = title or (f"{fn.__name__} on {world_size} {dev} rank(s) via {backend}"
                      + (" (warm ranks)" if reused else ""))
    display = make_progress(progress, world_size, title)
    reader = ProgressReader(folder, world_size)
    status = "failed"
    try:
        while not pool.finished(folder):
            if not pool.alive():
                raise _failure(pool)
            if reader.poll():
                display.update(reader.latest)
            time.sleep(0.02)
        reader.poll()
        display.update(reader.latest)
        records = [_load_record(folder, r) for r in range(world_size)]
        status = "done"
        if warm:
            pool.retire_when_idle(pools.IDLE_SECONDS)
        else:
            code = pool.retire()
            pool.forget()
            if code:   # every rank returned its record, then one crashed on the way out
                warnings.warn(f"every rank returned its record, but the launcher exited with code {code} "
                              "while the workers shut down; the results are complete")
        return records
    except KeyboardInterrupt:
        status = "interrupted"
        raise KeyboardInterrupt(f"interrupted: all {world_size} workers were stopped") from None
    finally:
        if status != "done":
            pools.discard(pool)
        display.close(status)


def job_options(world_size: int, checkpoint, fault, tensorboard) -> dict:
    """Lesson 10: ``launch``'s checkpoint, fault and TensorBoard settings, checked, as the ranks take them."""
    from ..long_runs.checkpoint import check_settings
    from ..long_runs.faults import check_fault

    options = {}
    if checkpoint is not None:
        options["checkpoint"] = check_settings(checkpoint)
    if fault is not None:
        check_fault(fault, world_size)
        options["fault"] = dict(fault)
    if tensorboard:
        options["tensorboard"] = True
    return options


def use_warm_ranks(warm: bool | str = "auto") -> bool:
    """Lesson 00: whether ``launch(..., warm=warm)`` keeps its ranks for the next launch."""
    if warm == "auto":
        setting = os.environ.get("DISTLAB_WARM", "")
        return setting == "1" if setting in ("0", "1") else in_notebook()
    if not isinstance(warm, bool):
        raise ValueError(f"warm must be True, False or 'auto', got {warm!r}")
    return warm


def _worker_env(threads: int, dev: str) -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    # The workers must import what this process imports (a notebook's folder included).
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([os.getcwd()] + paths))
    if dev == "cpu":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")   # keep gloo on the loopback interface
    return env


def _load_record(folder: str, rank: int):
    import torch

    return torch.load(os.path.join(folder, f"record_{rank}.pt"), weights_only=False)


def _failure(pool, grace: float = 10.0) -> WorkerError:
    """Name the rank that caused the failure, with its traceback when it had one.

    First the launcher gets a moment to stop the other ranks and say who died how.  A rank
    killed by a signal (other than the SIGTERM the launcher sends to the survivors) is the
    cause; otherwise the earliest Python exception is (peers that lose a connection to a
    failed rank raise later).
    """
    job, deadline = pool.job, time.time() + grace
    while job.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    launcher_code = job.poll()
    job.stop()
    log = job.log()
    if launcher_code is not None and launcher_code < 0:   # lesson 10: nobody signals it but us, and we had not yet
        name = diagnosis.SIGNALS.get(-launcher_code, launcher_code)
        return WorkerError(None, f"it was killed by {name} while the ranks trained; every rank was stopped "
                           "with it", log=log)
    errors, exits = diagnosis.read_errors(pool.dir), job.exit_codes()
    rank, why, trace = diagnosis.blame(errors, diagnosis.killed_by(exits, errors, log),
                                       silent=lambda: _silent_ranks(pool, errors, exits))
    if why:
        return WorkerError(rank, why, trace, log=log)
    if exits:
        rank, code = min(exits.items())
        return WorkerError(rank, f"it exited with code {code}", log=log)
    tail = "\n".join(log.splitlines()[-20:])
    return WorkerError("?", f"the launcher exited with code {job.returncode}:\n{tail}", log=log)


def _silent_ranks(pool, errors: list[dict], exits: dict[int, int]) -> list[int]:
    """Lesson 10: ranks with no error and no record for the current job, not killed by a signal of
    their own: while the others timed out in a collective, these never reached it."""
    from .rank import job_dir

    folder, spoke = job_dir(pool.dir, pool.jobs - 1), {e["rank"] for e in errors}
    return [r for r in range(pool.world_size)
            if r not in spoke and not os.path.exists(os.path.join(folder, f"record_{r}.pt"))
            and exits.get(r, -signal.SIGTERM) in (-signal.SIGTERM, 1)]
