"""Warm ranks: a pool of ranks that stays up between launches, so that the next one starts at once.

Introduced in lesson 00.  Starting N ranks costs seconds (every one imports PyTorch, then they
meet and build their process group); a short training job costs milliseconds.  So a notebook
keeps its ranks: after a job they wait, with their process group, for the next one
(``rank.serve``), and ``distlab.launch`` hands the next job with the same world size,
backend, device and timeout to them instead of starting new ones.

What keeps this honest:

* a job on warm ranks starts as it would on fresh ones (``rank.serve`` puts the random
  number generators, threads and cores back), so it gives the same records, bit for bit;
* anything that may have left the ranks in a bad state retires the pool: a failed or
  timed-out job, an interrupt, a dead rank; so does a launch that needs other ranks (another
  world size, backend, device or timeout): there is one pool at a time;
* idle ranks hold memory (a few hundred MB each, mostly PyTorch), so a pool left unused for
  ``IDLE_SECONDS`` retires itself, and so does every pool when the notebook's kernel exits
  (the ranks also leave when the process that started them dies).
"""
from __future__ import annotations

import atexit
import glob
import json
import os
import shutil
import tempfile
import threading
import time

from .arguments import free_port
from .rank import submit, write_settings
from .worker import backend_module

IDLE_SECONDS = 600.0
_lock = threading.RLock()       # the idle timer runs in a thread of its own
_current: Pool | None = None


class Pool:
    """N ranks of one backend, started once, running job after job."""

    def __init__(self, key: tuple, env: dict):
        backend, world_size, device, timeout, port = key
        self.key, self.world_size, self.jobs = key, world_size, 0
        self.dir = tempfile.mkdtemp(prefix="distlab-pool-")
        write_settings(self.dir, device=device, timeout=timeout)
        if port is None and backend != "horovod":           # Horovod picks its own port
            port = free_port()
        self.started = time.time()
        self.job = backend_module(backend).start_job(world_size, port, env, self.dir)
        self.busy = True                     # a launch is using it: the idle timer must not retire it
        self._timer: threading.Timer | None = None

    def submit(self, fn, kwargs: dict, *, threads: int, bind_cores: bool, options: dict | None = None) -> str:
        """Hand the next job to the ranks; return its folder (progress lines, then records)."""
        self._cancel_timer()
        folder = submit(self.dir, self.jobs, fn, kwargs, threads=threads, bind_cores=bind_cores, options=options)
        self.jobs += 1
        return folder

    def startup(self) -> dict[str, float]:
        """Lesson 00: when each part of this pool's start was over, in seconds since it began:
        the launcher's imports (torchrun only), every rank started, every rank in the process group."""
        def read(name, field):
            times = []
            for path in glob.glob(os.path.join(self.dir, name)):
                with open(path) as f:
                    times.append(json.load(f)[field] - self.started)
            return max(times, default=float("nan"))

        return {"launcher has imported PyTorch": read("launcher_ready.json", "ready"),
                "ranks started": read("joined_*.json", "started"),
                "ranks have met": read("joined_*.json", "joined")}

    def memory(self) -> int:
        """Lesson 00: bytes of memory the pool holds: its launcher and ranks, all together.

        Summed as *proportional* set sizes: a page that several of the processes share (the
        ranks are forked from torchrun's process, so PyTorch's code is shared) counts once.
        """
        import psutil

        try:
            family = [psutil.Process(self.job.popen.pid)]
            family += family[0].children(recursive=True)
        except psutil.Error:
            return 0
        total = 0
        for p in family:
            try:
                total += p.memory_full_info().pss
            except psutil.Error:       # a process that has just ended
                pass
        return total

    def alive(self) -> bool:
        return self.job.poll() is None and not self.errors()

    def errors(self) -> list[str]:
        """Error files the ranks wrote (a rank that raised)."""
        return glob.glob(os.path.join(self.dir, "error_*.json"))

    def finished(self, folder: str) -> bool:
        """Every rank saved its record for the job in ``folder``."""
        return all(os.path.exists(os.path.join(folder, f"record_{r}.pt")) for r in range(self.world_size))

    def retire(self, *, clean: bool = True, grace: float = 10.0) -> int | None:
        """Stop the ranks.  ``clean``: ask them to leave after their last job and wait for it;
        otherwise (a failure, an interrupt) stop them at once.  Returns the launcher's exit code."""
        self._cancel_timer()
        if clean and self.job.poll() is None:
            submit(self.dir, self.jobs)                 # "no more jobs": each rank leaves
            deadline = time.time() + grace
            while self.job.poll() is None and time.time() < deadline:
                time.sleep(0.02)
        self.job.stop()
        return self.job.returncode

    def forget(self) -> None:
        """Delete the pool's folder (kept after a failure until the error has been read)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def retire_when_idle(self, seconds: float) -> None:
        self._cancel_timer()
        self.busy = False
        self._timer = threading.Timer(seconds, _retire_if_idle, args=(self,))
        self._timer.daemon = True
        self._timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def get(key: tuple, env: dict) -> tuple[Pool, bool]:
    """Lesson 00: the pool for ``key``, and whether it is warm (already running), starting one if needed.

    ``key`` is (backend, world size, device, timeout, port); a different key retires the
    current pool first: one pool at a time.
    """
    global _current
    with _lock:
        if _current is not None and (_current.key != key or not _current.alive()):
            retire()
        warm = _current is not None
        if _current is None:
            _current = Pool(key, env)
        _current.busy = True
        return _current, warm


def retire(clean: bool = True) -> None:
    """Lesson 00: stop the warm ranks now (``distlab.launch`` starts new ones when needed)."""
    global _current
    with _lock:
        if _current is not None:
            pool, _current = _current, None
            pool.retire(clean=clean)
            pool.forget()


def drop(pool: Pool) -> None:
    """Forget ``pool`` as the current one (it failed: its folder is read, then deleted)."""
    global _current
    with _lock:
        if _current is pool:
            _current = None


def discard(pool: Pool) -> None:
    """Stop ``pool`` at once and delete its folder, after a failure has been read from it."""
    drop(pool)
    pool.retire(clean=False)
    pool.forget()


def current() -> Pool | None:
    """Lesson 00: the warm pool, if there is one."""
    return _current


def _retire_if_idle(pool: Pool) -> None:
    with _lock:
        if _current is pool and not pool.busy:
            retire()


# At exit nothing is left to save, and Jupyter kills a kernel that takes more than a few seconds
# to leave: stop the ranks at once rather than wait for them to leave in turn.
atexit.register(retire, clean=False)
