"""Start N real worker processes from a notebook cell (or a terminal) and collect their records.

Introduced in lesson 01.  ``launch(train, world_size=2, ...)``:

1. checks everything it can *before* starting a process (world size, backend, device,
   port, that ``train`` is importable, that the arguments pickle, and the training
   function's own ``validate_args`` when it has one), so mistakes fail in milliseconds;
2. writes the job into a fresh run folder and starts the workers through torchrun
   (``python -m torch.distributed.run ... -m distlab.worker RUN_DIR``): the same program
   a cluster job would run; or, with ``backend="horovod"``, through ``horovod.run`` in a
   small driver process (lesson 02, ``distlab.horovod_backend``);
3. while they run, shows one progress bar per rank (read from files the ranks append to);
4. when a rank fails, or the cell is interrupted, stops every worker, checks that none is
   left, and raises ``WorkerError`` naming the rank, with its traceback;
5. returns the list of records, one per rank, in rank order.
"""
from __future__ import annotations

import glob
import importlib
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings

from .progress import ProgressReader, make_progress
from .runtime import DEFAULT_TIMEOUT, choose_device

BACKENDS = ("torchrun", "horovod")


class WorkerError(RuntimeError):
    """A worker failed. ``rank`` names it; ``remote_traceback`` is its traceback when it had one."""

    def __init__(self, rank, message: str, remote_traceback: str = "", log: str = ""):
        self.rank, self.remote_traceback, self.log = rank, remote_traceback, log
        text = f"rank {rank} failed: {message}"
        if remote_traceback:
            text += f"\n\n--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(text)


class PortInUseError(OSError):
    pass


# ---------------------------------------------------------------------------------------------
# checks made before any process starts
# ---------------------------------------------------------------------------------------------
def check_importable(fn) -> None:
    """Workers import ``fn`` by module and name; say clearly why that would fail."""
    name = getattr(fn, "__qualname__", repr(fn))
    module = getattr(fn, "__module__", None)
    if not callable(fn):
        raise TypeError(f"the training function must be callable, got {fn!r}")
    if module in (None, "__main__"):
        raise ValueError(
            f"the training function {name!r} is defined in __main__ (a notebook cell or the script "
            "you ran), which worker processes cannot import. Put it in a .py module next to the "
            "notebook and import it from there.")
    if "<locals>" in name or "<lambda>" in name:
        raise ValueError(f"the training function {name!r} is a lambda or nested function; worker "
                         "processes can only import functions defined at the top of a module.")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"workers could not import {module}.{name}: {err}") from err
    if obj is not fn:
        raise ValueError(f"{module}.{name} is not the function passed in (was the module reloaded "
                         "or the function redefined?)")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port: int, host: str = "127.0.0.1") -> None:
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as err:
            raise PortInUseError(f"port {port} on {host} is already in use ({err.strerror}); "
                                 "pass another port, or none to let distlab pick a free one") from err


def check_world_size(world_size) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "horovod":
        try:
            import horovod.torch  # noqa: F401
        except ImportError as err:
            raise RuntimeError("backend='horovod' needs Horovod built with PyTorch and Gloo "
                               f"(import failed: {err}); run `make lab` or tools/install_horovod.sh"
                               ) from err


# ---------------------------------------------------------------------------------------------
# the launcher
# ---------------------------------------------------------------------------------------------
def launch(fn, world_size: int = 2, *, backend: str = "torchrun", device: str = "auto",
           port: int | None = None, timeout: float = DEFAULT_TIMEOUT, threads: int = 1,
           progress: str = "auto", title: str | None = None, bind_cores: bool = True,
           **kwargs) -> list:
    """Lesson 01: run ``fn(worker, **kwargs)`` on ``world_size`` real processes; return their records.

    ``fn`` must live in an importable module.  ``timeout`` (seconds) bounds every collective.
    ``threads`` is the number of intra-op threads per rank (1 keeps ranks from fighting
    over the cores); ``bind_cores`` gives each CPU rank cores of its own when there are
    enough (``runtime.bind_to_cores``, lesson 02).  Raises ``WorkerError`` naming the failed rank.
    """
    check_world_size(world_size)
    check_backend(backend)
    dev = choose_device(device, world_size)
    check_importable(fn)
    validate = getattr(fn, "validate_args", None)
    if validate is not None:
        validate(world_size, **kwargs)
    if port is not None and backend == "horovod":
        raise ValueError("port= sets torchrun's rendezvous port; Horovod always picks a free "
                         "port for its own rendezvous (horovod.run has no setting for it)")
    if port is None:
        port = free_port()
    else:
        check_port(port)
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    job = {"fn": fn, "kwargs": kwargs, "device": dev, "timeout": float(timeout), "threads": threads,
           "bind_cores": bool(bind_cores)}
    try:
        payload = pickle.dumps(job)
    except Exception as err:
        raise ValueError(f"the arguments for the workers cannot be pickled: {err}") from err

    run_dir = tempfile.mkdtemp(prefix="distlab-run-")
    with open(os.path.join(run_dir, "job.pkl"), "wb") as f:
        f.write(payload)
    title = title or f"{fn.__name__} on {world_size} {dev} rank(s) via {backend}"
    display = make_progress(progress, world_size, title)
    reader = ProgressReader(run_dir, world_size)
    proc = _start(backend, world_size, port, threads, dev, run_dir)
    status = "failed"
    try:
        while proc.poll() is None:
            if reader.poll():
                display.update(reader.latest)
            time.sleep(0.05)
        reader.poll()
        display.update(reader.latest)
        if proc.returncode != 0 and not _all_returned(run_dir, world_size):
            raise _failure(run_dir, world_size, proc)
        if proc.returncode != 0:   # every rank returned its record, then one crashed on the way out
            warnings.warn(f"every rank returned its record, but the launcher exited with code "
                          f"{proc.returncode} while the workers shut down; the results are complete")
        records = [_load_record(run_dir, r) for r in range(world_size)]
        status = "done"
        return records
    except KeyboardInterrupt:
        status = "interrupted"
        _stop(proc, run_dir)
        raise KeyboardInterrupt(f"interrupted: all {world_size} workers were stopped") from None
    finally:
        _stop(proc, run_dir)
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


def _start(backend: str, world_size: int, port: int, threads: int, dev: str, run_dir: str):
    """Start the job; return an object with ``poll()``, ``returncode`` and ``log()``."""
    env = _worker_env(threads, dev)
    if backend == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
               f"--nproc-per-node={world_size}", "--master-addr=127.0.0.1",
               f"--master-port={port}", "--max-restarts=0", "--monitor-interval=0.1",
               "-m", "distlab.worker", run_dir]
        return _Subprocess(cmd, env, run_dir)
    from .horovod_backend import start_horovod  # lesson 02; imported only when used
    return start_horovod(world_size, port, env, run_dir)


def _die_with_parent() -> None:
    """Linux: if the notebook kernel is killed outright, the launcher gets SIGTERM and stops its workers."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG
    except OSError:   # not Linux: the interrupt and failure paths still stop everything
        pass


class _Subprocess:
    """A launcher process (torchrun or horovodrun) whose output goes to ``run_dir/launcher.log``."""

    def __init__(self, cmd, env, run_dir):
        self.log_path = os.path.join(run_dir, "launcher.log")
        self._log = open(self.log_path, "w")
        # A session of its own: stopping it never touches the notebook kernel.
        self.popen = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      preexec_fn=_die_with_parent)

    def poll(self):
        return self.popen.poll()

    @property
    def returncode(self):
        return self.popen.returncode

    def log(self) -> str:
        self._log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def terminate(self, grace: float) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)   # torchrun forwards it to its workers
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        self._log.close()


def worker_pids(run_dir: str) -> list[int]:
    pids = []
    for path in glob.glob(os.path.join(run_dir, "pid_*")):
        try:
            pids.append(int(open(path).read().strip()))
        except ValueError:
            pass
    return pids


def _stop(proc, run_dir: str, grace: float = 5.0) -> None:
    """Stop the launcher, then make sure no worker process survives it."""
    import psutil

    proc.terminate(grace)
    alive = []
    for pid in worker_pids(run_dir):
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    for p in alive:
        p.terminate()
    _, still = psutil.wait_procs(alive, timeout=grace)
    for p in still:
        p.kill()
    psutil.wait_procs(still, timeout=grace)


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
_FAILURE = re.compile(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


def _failure(run_dir: str, world_size: int, proc) -> WorkerError:
    """Name the rank that caused the failure, with its traceback when it had one.

    A rank killed by a signal (other than the SIGTERM the launcher sends to the survivors)
    is the cause; otherwise the earliest Python exception is (peers that lose a connection
    to a failed rank raise later).
    """
    log = proc.log()
    errors = []
    for path in glob.glob(os.path.join(run_dir, "error_*.json")):
        try:
            with open(path) as f:
                errors.append(json.load(f))
        except (OSError, ValueError):     # a rank stopped while writing it
            pass
    exits = proc.exit_codes() if hasattr(proc, "exit_codes") else \
        {int(r): int(c) for r, c in _FAILURE.findall(log)}      # Horovod's job parses its own log
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
    return WorkerError("?", f"the launcher exited with code {proc.returncode}:\n{tail}", log=log)
