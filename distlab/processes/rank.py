"""The program every rank runs: join the job once, then run training functions as they come.

Introduced in lesson 01 (the warm ranks of lesson 00 are the same program, kept waiting).  The
launcher (``distlab.launch``) starts N copies of ``serve`` through torchrun (or Horovod:
``horovod_backend.run_rank``), all pointed at one *pool folder*.  Each copy:

1. joins the job (the backend's ``start_worker``: rank, world size, device, process group);
2. waits for ``job_0/job.pkl``: a training function plus its arguments (``submit``);
3. calls the function with its ``Worker`` and saves what it returned, its *record*, as
   ``job_0/record_<rank>.pt``; then waits for ``job_1``, and so on, until a job says stop;
4. on an exception, saves the traceback as ``error_<rank>.json`` and exits non-zero, so
   that the launcher can say which rank failed and why (and never reuses these ranks).

Each job starts as a cold launch would: the random number generators are put back to the
state they had when the rank started, and the number of threads is the job's own, so a job
on warm ranks gives exactly what it gives on fresh ones.  The function travels by
*reference* (module and name), which is why it must live in an importable module and not in
a notebook cell.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import random
import signal
import sys
import threading
import time
import traceback

from .worker import DEFAULT_TIMEOUT, backend_module

SETTINGS = "pool.pkl"      # what holds for the ranks' whole life: device, timeout


def _write(obj, path: str) -> None:
    """Pickle to a temporary name, then rename: readers never see half a file."""
    payload = pickle.dumps(obj)      # fails here, in the caller, if something does not pickle
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.tmp{os.getpid()}", "wb") as f:
        f.write(payload)
    os.replace(f"{path}.tmp{os.getpid()}", path)


def job_dir(pool_dir: str, number: int) -> str:
    return os.path.join(pool_dir, f"job_{number}")


def write_settings(pool_dir: str, *, device: str = "auto", timeout: float = DEFAULT_TIMEOUT) -> None:
    """Lesson 01: what every rank of the pool needs before it can join: device and timeout."""
    _write({"device": device, "timeout": float(timeout)}, os.path.join(pool_dir, SETTINGS))


def submit(pool_dir: str, number: int, fn=None, kwargs: dict | None = None, *, threads: int = 1,
           bind_cores: bool = True, options: dict | None = None) -> str:
    """Lesson 01: hand job ``number`` to the ranks; ``fn=None`` tells them to leave.

    ``fn`` is a function or ``"module:function"``.  Several ranks may write the same job at
    once (a terminal's ``horovodrun``): the file is replaced atomically, never half-written.
    ``options`` (lesson 10): what the ranks set on their ``Worker`` for this job: ``checkpoint``,
    ``fault``, ``tensorboard``.  Returns the job's folder, where its progress lines and records appear.
    """
    if isinstance(fn, str):
        module, _, name = fn.partition(":")
        fn = getattr(importlib.import_module(module), name)
    job = None if fn is None else {"fn": fn, "kwargs": kwargs or {}, "threads": threads,
                                   "bind_cores": bool(bind_cores), "options": options or {}}
    _write(job, os.path.join(job_dir(pool_dir, number), "job.pkl"))
    return job_dir(pool_dir, number)


def write_job(run_dir: str, fn, kwargs: dict, *, device: str = "auto", timeout: float = DEFAULT_TIMEOUT,
              threads: int = 1, bind_cores: bool = True) -> None:
    """A run of one job (a terminal's ``horovodrun``): the settings, job 0, and then stop."""
    write_settings(run_dir, device=device, timeout=timeout)
    submit(run_dir, 0, fn, kwargs, threads=threads, bind_cores=bind_cores)
    submit(run_dir, 1)


def save_atomically(obj, path: str) -> None:
    """Write with torch.save to a temporary name, then rename: readers never see half a file."""
    import torch

    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def serve(pool_dir: str, backend: str) -> int:
    """Lesson 01: this rank's life: join, then run every job handed to the pool until told to stop.

    Returns how many jobs it ran.  Raises (and so ends the rank) on the first failing job.
    """
    import torch

    # torchrun forks the ranks after setting its own SIGTERM handler (it raises an exception);
    # a rank would inherit it and, told to stop, wait in its clean-up for peers already gone.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)     # a rank told to stop stops at once
    with open(os.path.join(pool_dir, SETTINGS), "rb") as f:
        settings = pickle.load(f)
    with open(os.path.join(pool_dir, f"pid_{rank_hint()}"), "w") as f:
        f.write(str(os.getpid()))
    worker, number, started = None, 0, time.time()
    try:
        worker = backend_module(backend).start_worker(settings["device"], settings["timeout"])
        with open(os.path.join(pool_dir, f"joined_{worker.rank}.json"), "w") as f:   # for lesson 00
            json.dump({"started": started, "joined": time.time()}, f)
        fresh = _fresh_state(worker.device)
        while (job := _wait_for_job(job_dir(pool_dir, number))) is not None:
            _start_like_new(job, worker, fresh)
            worker.run_dir, worker._last_progress = job_dir(pool_dir, number), 0.0
            set_options(worker, job.get("options", {}))
            record = job["fn"](worker, **job["kwargs"])
            save_atomically(record, os.path.join(worker.run_dir, f"record_{worker.rank}.pt"))
            number += 1
            torch.set_num_threads(1)          # waiting: no spare threads spinning
        return number
    except BaseException as err:
        write_error(pool_dir, worker, err, job=number)
        raise
    finally:
        stop_quietly(worker)


def set_options(worker, options: dict) -> None:
    """Lesson 10: the job's checkpoint settings, fault and TensorBoard choice, on this rank's worker."""
    worker.checkpoint = options.get("checkpoint")
    worker.fault = options.get("fault")
    worker.tensorboard = bool(options.get("tensorboard", False))


def rank_hint() -> str:
    """This rank's number as its launcher set it (torchrun: RANK, horovodrun: HOROVOD_RANK), before
    it has joined the job and knows it for sure."""
    return os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "?"))


def write_error(folder: str, worker, err: BaseException, **more) -> None:
    """Lesson 01: a failed rank's ``error_<rank>.json`` (the launcher names the rank from it).

    ``worker`` is None when the rank failed before joining.  Called inside the ``except`` block,
    so that the traceback is the one being handled.
    """
    rank = worker.rank if worker is not None else rank_hint()
    path = os.path.join(folder, f"error_{rank}.json")
    with open(f"{path}.tmp", "w") as f:           # then renamed: never read half-written
        json.dump({"rank": rank, **more, "time": time.time(), "type": type(err).__name__,
                   "message": str(err), "traceback": traceback.format_exc()}, f)
    os.replace(f"{path}.tmp", path)


def stop_quietly(worker) -> None:
    """Leave the job, if joined; a broken peer must not hide the error that ended the rank."""
    if worker is not None:
        try:
            worker.stop()
        except Exception:
            pass


PEER_GONE = ("connection reset by peer", "connection closed by peer", "broken pipe")   # gloo's words
PEER_GONE_GRACE = 1.0          # seconds: ten of torchrun's looks at its ranks (--monitor-interval=0.1)


def end_rank(main) -> None:
    """Lesson 01: run a rank's ``main`` and end the process the way multiprocessing's children end:
    ``os._exit`` with its code, after printing any error and flushing the streams, and without
    Python's finalization.

    Why: a rank that left gloo's job can still have one of gloo's worker threads holding the last
    all-reduce's tensor; when that thread lets go of it while the interpreter is finalizing, it
    needs the GIL, which finalization ends threads for, and C++ calls ``std::terminate``:
    "terminate called without an active exception", SIGABRT, after a run that had finished
    (seen in about one run in ten of ``distlab run``; the core dump showed
    ``ProcessGroupGloo::runLoop`` freeing an ``AsyncAllreduceWork`` during ``Py_FinalizeEx``;
    PyTorch's issue 190489 and pull request 179291 describe the same).  Every file a rank
    writes is closed before ``main`` returns, so finalization has nothing left to do for it.
    """
    import logging

    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    except BaseException as err:
        traceback.print_exc()
        code = 1
        if any(words in str(err).lower() for words in PEER_GONE):
            # the cause is a peer that died first: let the launcher see its death before this one.
            # torchrun names only the first failure it finds, and two found in one look are named in
            # rank order, so a survivor that ends at once can take the blame for a peer killed by a
            # signal (seen in tests/test_checkpoint.py once ranks stopped taking finalization's time)
            time.sleep(PEER_GONE_GRACE)
    if not isinstance(code, int):
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _wait_for_job(folder: str):
    """The next job (None: stop).  Also stops if the launcher that started this rank has gone."""
    path, parent, pause = os.path.join(folder, "job.pkl"), os.getppid(), 1e-3
    while not os.path.exists(path):
        if os.getppid() != parent:
            return None
        time.sleep(pause)
        pause = min(2 * pause, 0.02)      # a warm rank answers within 20 ms, at no cost meanwhile
    with open(path, "rb") as f:
        return pickle.load(f)


def _fresh_state(device) -> dict:
    """What a job may change, as it was when the rank started: every random number generator a
    training function might use, and the cores the rank may run on.  The GPUs' generators only on
    a GPU rank: a CPU rank on a GPU machine must not start CUDA (forked ranks cannot)."""
    import numpy as np
    import torch

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
            "cores": os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None}


def _start_like_new(job: dict, worker, fresh: dict) -> None:
    """Put back what a previous job may have changed: random state, threads, cores, default dtype."""
    import numpy as np
    import torch

    from .cores import bind_to_cores, set_cores

    torch.set_rng_state(fresh["torch"])
    random.setstate(fresh["python"])
    np.random.set_state(fresh["numpy"])
    if fresh["cuda"] is not None:
        torch.cuda.set_rng_state_all(fresh["cuda"])
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(job["threads"])
    if fresh["cores"] is not None:
        set_cores(fresh["cores"])             # unbound, as at the start
    if job["bind_cores"] and worker.device.type == "cpu":
        bind_to_cores(worker.local_rank, worker.local_world_size, job["threads"])


def main(argv: list[str] | None = None) -> int:
    """``torchrun --nproc-per-node=N -m distlab.processes.rank POOL_DIR``: serve the pool's jobs."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m distlab.processes.rank POOL_DIR", file=sys.stderr)
        return 2
    serve(argv[0], backend="torchrun")
    return 0


if __name__ == "__main__":
    end_rank(main)
