"""The program every rank runs: ``python -m distlab.processes.rank RUN_DIR``.

Introduced in lesson 01.  The launcher (``distlab.launch``) writes the job, a training
function plus its arguments, into ``RUN_DIR/job.pkl`` (``write_job``) and starts N copies of
this module through torchrun (or Horovod: ``horovod_backend.run_rank``).  Each copy:

1. joins the job (the backend's ``start_worker``: rank, world size, device, process group);
2. calls the training function with its ``Worker`` object;
3. saves what the function returned, its *record*, as ``record_<rank>.pt``;
4. on an exception, saves the traceback as ``error_<rank>.json`` and exits non-zero, so
   that the launcher can say which rank failed and why.

The function travels by *reference* (module and name), which is why it must live in an
importable module and not in a notebook cell.
"""
from __future__ import annotations

import ast
import importlib
import json
import os
import pickle
import sys
import time
import traceback

from .worker import DEFAULT_TIMEOUT, backend_module


def write_job(run_dir: str, fn, kwargs: dict, *, device: str = "auto", timeout: float = DEFAULT_TIMEOUT,
              threads: int = 1, bind_cores: bool = True) -> None:
    """Lesson 01: write what every rank must run into ``run_dir/job.pkl``.

    ``fn`` is a function or ``"module:function"``.  Several ranks may write the same job at
    once (a terminal's ``horovodrun``): the file is replaced atomically, never half-written.
    """
    if isinstance(fn, str):
        module, _, name = fn.partition(":")
        fn = getattr(importlib.import_module(module), name)
    job = {"fn": fn, "kwargs": kwargs, "device": device, "timeout": float(timeout), "threads": threads,
           "bind_cores": bool(bind_cores)}
    payload = pickle.dumps(job)      # fails here, in the caller, if the arguments do not pickle
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, "job.pkl")
    with open(f"{path}.tmp{os.getpid()}", "wb") as f:
        f.write(payload)
    os.replace(f"{path}.tmp{os.getpid()}", path)


def parse_kwargs(pairs: list[str]) -> dict:
    """``["steps=50", "method=ddp"]`` as ``{"steps": 50, "method": "ddp"}`` (for terminals)."""
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


def save_atomically(obj, path: str) -> None:
    """Write with torch.save to a temporary name, then rename: readers never see half a file."""
    import torch

    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def run_job(run_dir: str, backend: str):
    """Run this process's part of the job in ``run_dir``; return the record."""
    import torch

    from .cores import bind_to_cores

    with open(os.path.join(run_dir, "job.pkl"), "rb") as f:
        job = pickle.load(f)
    rank_hint = os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "?"))
    with open(os.path.join(run_dir, f"pid_{rank_hint}"), "w") as f:
        f.write(str(os.getpid()))
    torch.set_num_threads(job["threads"])
    worker = None
    try:
        worker = backend_module(backend).start_worker(job["device"], job["timeout"], run_dir)
        if job["bind_cores"] and worker.device.type == "cpu":
            bind_to_cores(worker.local_rank, worker.local_world_size, job["threads"])
        record = job["fn"](worker, **job["kwargs"])
        save_atomically(record, os.path.join(run_dir, f"record_{worker.rank}.pt"))
        return record
    except BaseException as err:
        rank = worker.rank if worker is not None else rank_hint
        path = os.path.join(run_dir, f"error_{rank}.json")
        with open(f"{path}.tmp", "w") as f:       # then renamed: never read half-written
            json.dump({"rank": rank, "time": time.time(), "type": type(err).__name__,
                       "message": str(err), "traceback": traceback.format_exc()}, f)
        os.replace(f"{path}.tmp", path)
        raise
    finally:
        if worker is not None:
            try:
                worker.stop()
            except Exception:  # a broken peer must not hide the original error
                pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m distlab.processes.rank RUN_DIR", file=sys.stderr)
        return 2
    run_job(argv[0], backend="torchrun")
    return 0


if __name__ == "__main__":
    sys.exit(main())
