"""The simulated Binder's run of the course, started in the background as the test session begins.

Why in the background (issue 25): the course's nbval run happens inside the simulated Binder
(tools/binder_sim.py), where each lesson has one CPU's quota and 2 GiB to itself.  A lesson run
in the browser (tests/browser/, the first tests of the session) leaves much of the machine idle:
JupyterLab, the page and the kernel wait on each other between cells.  So the Binder
environment is built, and its lessons run one at a time, while the first tests run; once the
foreground itself waits for a lesson's result (test_binder.py), every core takes a lesson.

conftest.py starts it when the collected tests need it and stops it when the session ends (a
lesson still running is killed, so that no process outlives the session).  For whoever works on
a lesson: ``DISTLAB_BINDER_REUSE=FOLDER`` takes an environment built before in FOLDER
(``python tools/binder_sim.py --dest FOLDER``) instead of building one; the summary says so.  A plain module beside
the tests, like helpers.py: conftest.py holds only hooks and fixtures.
"""
from __future__ import annotations

import os
import queue
import shutil
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

from helpers import BINDER_RUN, ROOT, record_execution

sys.path.insert(0, os.path.join(ROOT, "tools"))
import binder_sim  # noqa: E402

REPORT: list = []          # lines for the "binder simulation" section of the terminal summary
_current: BackgroundCourse | None = None


class BackgroundCourse:
    """Build the simulated Binder, then run ``lessons`` in it under nbval, each in its own group."""

    def __init__(self, lessons: list[str], limits: binder_sim.Limits = binder_sim.BINDER):
        self.lessons, self.limits = list(lessons), limits
        self.reuse = os.environ.get("DISTLAB_BINDER_REUSE")
        self.dest = Path(self.reuse or tempfile.mkdtemp(prefix="distlab-binder-build-"))
        self.built: Future = Future()
        self.results = {lesson: Future() for lesson in self.lessons}
        self.side_by_side = max(1, min(len(os.sched_getaffinity(0)), 4))   # each run needs one CPU
        self._todo: queue.Queue = queue.Queue()
        for lesson in self.lessons:
            self._todo.put(lesson)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._wanted = 1                 # one run at a time while other tests use the machine

    def start(self) -> BackgroundCourse:
        self._spawn(self._build, "binder-build")
        return self

    def env(self) -> binder_sim.BinderEnv:
        """The built environment (waits for the build)."""
        return self.built.result()

    def result(self, lesson: str) -> binder_sim.Measured:
        """``lesson``'s run.  The foreground waits for it, so nothing else runs: every core takes a lesson."""
        self._more_workers(self.side_by_side)
        return self.results[lesson].result()

    def stop(self) -> None:
        """Kill any lesson still running, wait for the threads, delete the build (1.7 GB)."""
        self._stop.set()
        for t in list(self._threads):
            t.join(timeout=120)
        if not self.reuse:
            shutil.rmtree(self.dest, ignore_errors=True)

    # -- the threads
    def _spawn(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _build(self) -> None:
        try:
            env = (binder_sim.reuse(self.dest) if self.reuse else binder_sim.build(self.dest, log=lambda s: None))
        except BaseException as err:          # every lesson's test reports the failed build
            self.built.set_exception(err)
            for f in self.results.values():
                f.set_exception(err)
            return
        REPORT.append(f"built in {env.build_s:.0f} s from binder/ alone"
                      + (f" (earlier: reused from {self.dest}, DISTLAB_BINDER_REUSE)" if self.reuse else ""))
        REPORT.extend(f"note: {n}" for n in env.notes)
        self.built.set_result(env)
        self._more_workers(self._wanted)

    def _more_workers(self, n: int) -> None:
        with self._lock:
            self._wanted = max(self._wanted, n)
            if not self.built.done() or self.built.exception() is not None:
                return                           # _build starts them
            running = sum(t.is_alive() and t.name.startswith("binder-lesson") for t in self._threads)
            for k in range(running, self._wanted):
                self._spawn(self._run_lessons, f"binder-lesson-{k}")

    def _run_lessons(self) -> None:
        env = self.built.result()
        while not self._stop.is_set():
            try:
                lesson = self._todo.get_nowait()
            except queue.Empty:
                return
            record_execution(lesson, BINDER_RUN)
            try:
                self.results[lesson].set_result(
                    binder_sim.run_lesson(env, Path(lesson), self.limits, stop=self._stop))
            except BaseException as err:
                self.results[lesson].set_exception(err)
        while True:                              # stopped: what never ran says so
            try:
                lesson = self._todo.get_nowait()
            except queue.Empty:
                return
            self.results[lesson].set_exception(RuntimeError("the test session ended before it ran"))


def start(lessons: list[str]) -> BackgroundCourse:
    """Start the build and the runs (conftest.py, once the session's tests are collected)."""
    global _current
    _current = BackgroundCourse(lessons).start()
    return _current


def current() -> BackgroundCourse | None:
    return _current


def stop() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None
