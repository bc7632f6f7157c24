"""Start N real worker processes from a notebook cell (or a terminal) and collect their records.

Introduced in lesson 01.  ``launch(train, world_size=2, ...)``:

1. checks everything it can *before* starting a process (``checks.py``: world size,
   backend, device, port, that ``train`` is importable, its arguments against its
   signature and its own ``validate_args``), so mistakes fail in milliseconds;
2. writes the job into a fresh run folder (``rank.write_job``) and starts the ranks through
   the backend's job: torchrun (``torch_backend.TorchrunJob``), or Horovod
   (``horovod_backend.HorovodJob``, lesson 02);
3. while they run, shows one progress bar per rank (read from files the ranks append to);
4. when a rank fails, or the cell is interrupted, stops every worker, checks that none is
   left, and raises ``WorkerError`` naming the rank, with its traceback;
5. returns the list of records, one per rank, in rank order.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import warnings

from .checks import bind_arguments, check_importable, check_int, check_port, check_positive, free_port
from .progress import ProgressReader, make_progress
from .rank import write_job
from .worker import DEFAULT_TIMEOUT, backend_module, choose_device


class WorkerError(RuntimeError):
    """A worker failed. ``rank`` names it; ``remote_traceback`` is its traceback when it had one."""

    def __init__(self, rank, message: str, remote_traceback: str = "", log: str = ""):
        self.rank, self.remote_traceback, self.log = rank, remote_traceback, log
        text = f"rank {rank} failed: {message}"
        if remote_traceback:
            text += f"\n\n--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(text)


def launch(fn, world_size: int = 2, *, backend: str = "torchrun", device: str = "auto",
           port: int | None = None, timeout: float = DEFAULT_TIMEOUT, threads: int = 1,
           progress: str = "auto", title: str | None = None, bind_cores: bool = True,
           **kwargs) -> list:
    """Lesson 01: run ``fn(worker, **kwargs)`` on ``world_size`` real processes; return their records.

    ``fn`` must live in an importable module.  ``timeout`` (seconds) bounds every collective.
    ``threads`` is the number of intra-op threads per rank (1 keeps ranks from fighting
    over the cores); ``bind_cores`` gives each CPU rank cores of its own when there are
    enough (``cores.bind_to_cores``, lesson 02).  Raises ``WorkerError`` naming the failed rank.
    """
    check_int("world_size", world_size)
    chosen = backend_module(backend)
    chosen.check_available()
    dev = choose_device(device, world_size)
    check_importable(fn)
    bind_arguments(fn, world_size, kwargs)
    if port is not None and backend == "horovod":
        raise ValueError("port= sets torchrun's rendezvous port; Horovod always picks a free "
                         "port for its own rendezvous (horovod.run has no setting for it)")
    if port is None:
        port = free_port()
    else:
        check_port(port)
    check_positive("timeout", timeout, " of seconds")
    run_dir = tempfile.mkdtemp(prefix="distlab-run-")
    try:
        write_job(run_dir, fn, kwargs, device=dev, timeout=timeout, threads=threads, bind_cores=bind_cores)
    except Exception as err:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise ValueError(f"the arguments for the workers cannot be pickled: {err}") from err

    title = title or f"{fn.__name__} on {world_size} {dev} rank(s) via {backend}"
    display = make_progress(progress, world_size, title)
    reader = ProgressReader(run_dir, world_size)
    job = chosen.start_job(world_size, port, _worker_env(threads, dev), run_dir)
    status = "failed"
    try:
        while job.poll() is None:
            if reader.poll():
                display.update(reader.latest)
            time.sleep(0.05)
        reader.poll()
        display.update(reader.latest)
        if job.returncode != 0 and not _all_returned(run_dir, world_size):
            raise _failure(run_dir, job)
        if job.returncode != 0:   # every rank returned its record, then one crashed on the way out
            warnings.warn(f"every rank returned its record, but the launcher exited with code "
                          f"{job.returncode} while the workers shut down; the results are complete")
        records = [_load_record(run_dir, r) for r in range(world_size)]
        status = "done"
        return records
    except KeyboardInterrupt:
        status = "interrupted"
        job.stop()
        raise KeyboardInterrupt(f"interrupted: all {world_size} workers were stopped") from None
    finally:
        job.stop()
        display.close(status)
        if status == "done":
            shutil.rmtree(run_dir, ignore_errors=True)


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


def _all_returned(run_dir: str, world_size: int) -> bool:
    """Every rank saved its record and none reported an error."""
    return (all(os.path.exists(os.path.join(run_dir, f"record_{r}.pt")) for r in range(world_size))
            and not glob.glob(os.path.join(run_dir, "error_*.json")))


def _load_record(run_dir: str, rank: int):
    import torch

    path = os.path.join(run_dir, f"record_{rank}.pt")
    if not os.path.exists(path):
        raise WorkerError(rank, "it exited without returning a record")
    return torch.load(path, weights_only=False)


_SIGNALS = {-int(s): s.name for s in signal.Signals}


def _failure(run_dir: str, job) -> WorkerError:
    """Name the rank that caused the failure, with its traceback when it had one.

    A rank killed by a signal (other than the SIGTERM the launcher sends to the survivors)
    is the cause; otherwise the earliest Python exception is (peers that lose a connection
    to a failed rank raise later).
    """
    log = job.log()
    errors = []
    for path in glob.glob(os.path.join(run_dir, "error_*.json")):
        try:
            with open(path) as f:
                errors.append(json.load(f))
        except (OSError, ValueError):     # a rank stopped while writing it
            pass
    exits = job.exit_codes()
    for rank, code in sorted(exits.items()):
        if code < 0 and code != -signal.SIGTERM and not any(e["rank"] == rank for e in errors):
            return WorkerError(rank, f"it was killed by {_SIGNALS.get(code, code)} "
                               "(out of memory, or killed by hand?)", log=log)
    if errors:
        first = min(errors, key=lambda e: e["time"])
        return WorkerError(first["rank"], f"{first['type']}: {first['message']}",
                           first["traceback"], log=log)
    if exits:
        rank, code = min(exits.items())
        return WorkerError(rank, f"it exited with code {code}", log=log)
    tail = "\n".join(log.splitlines()[-20:])
    return WorkerError("?", f"the launcher exited with code {job.returncode}:\n{tail}", log=log)
