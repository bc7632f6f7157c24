"""The simulated Binder's run of the course, started in the background as the test session begins.

Why in the background (issue 25): every lesson runs once in the suite, in the browser inside the
simulated Binder (tests/browser/browser_course.py: Run All, outputs compared as nbval compares,
every control moved, within Binder's 2 GiB and one CPU's quota); every solutions notebook runs
once under nbval inside it (tools/binder_sim.py).  Each run has one CPU's quota, so the
environment is built, and the lessons run one at a time, while the other tests use the rest of
the machine (conftest.py puts the tests that wait for these results last); once the foreground
itself waits for a result, more solutions run side by side.

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

from helpers import BINDER_RUN, ROOT, mark, record_execution

sys.path.insert(0, os.path.join(ROOT, "tools"))
import binder_sim  # noqa: E402

REPORT: list = []          # lines for the "binder simulation" section of the terminal summary
_current: BackgroundCourse | None = None


class BackgroundCourse:
    """Build the simulated Binder, then run ``browser`` lessons in its browser (one at a time) and
    ``lessons`` in it under nbval, each in its own group."""

    def __init__(self, lessons: list[str], limits: binder_sim.Limits = binder_sim.BINDER,
                 browser: list[str] = (), browser_source: Path | None = None):
        self.lessons, self.limits = list(lessons), limits
        self.browser = None
        if browser:
            sys.path.insert(0, os.path.join(ROOT, "tests", "browser"))
            from browser_course import BrowserCourse

            self.browser = BrowserCourse(list(browser), browser_source, limits)
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
        # one run at a time while other tests use the machine: the browser's lessons first, if any
        self._wanted = 0 if self.browser else 1

    def start(self) -> BackgroundCourse:
        self._spawn(self._build, "binder-build")
        return self

    def env(self) -> binder_sim.BinderEnv:
        """The built environment (waits for the build)."""
        return self.built.result()

    def result(self, lesson: str) -> binder_sim.Measured:
        """``lesson``'s run.  The foreground waits for it, so nothing else runs: every core takes a lesson."""
        self._more_workers(self._spare())
        return self.results[lesson].result()

    def browser_result(self, notebook: str):
        """``notebook``'s run in the browser (a browser_course.LessonInBrowser); meanwhile the cores the
        foreground leaves run solutions."""
        if self.browser is None or notebook not in self.browser.results:
            raise RuntimeError(f"{notebook} was not collected for the browser when the session began")
        self._more_workers(self._spare())
        return self.browser.results[notebook].result()

    def report(self, line: str) -> None:
        REPORT.append(line)

    def _spare(self) -> int:
        browsing = any(t.is_alive() and t.name == "binder-browser" for t in self._threads)
        return max(1, self.side_by_side - browsing)

    def stop(self) -> None:
        """Kill any lesson still running, wait for the threads, delete the build (1.7 GB)."""
        self._stop.set()
        if self.browser is not None:
            self.browser.abort()
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
        mark("binder build begins")
        try:
            env = (binder_sim.reuse(self.dest) if self.reuse else binder_sim.build(self.dest, log=lambda s: None))
            mark("binder build ends")
        except BaseException as err:          # every lesson's test reports the failed build
            self.built.set_exception(err)
            for f in self.results.values():
                f.set_exception(err)
            if self.browser is not None:
                self.browser.fail_all(err)
            return
        REPORT.append(f"built in {env.build_s:.0f} s from binder/ alone"
                      + (f" (earlier: reused from {self.dest}, DISTLAB_BINDER_REUSE)" if self.reuse else ""))
        REPORT.extend(f"note: {n}" for n in env.notes)
        self.built.set_result(env)
        if self.browser is not None:
            self._spawn(self._browse, "binder-browser")
        self._more_workers(self._wanted)

    def _browse(self) -> None:
        self.browser.run(self.built.result(), self._stop)
        REPORT.append(f"browser lessons: JupyterLab of the simulated Binder, in {self.browser.where}")
        self._more_workers(1)                    # the browser's core is free: the solutions may use it

    def _more_workers(self, n: int) -> None:
        with self._lock:
            self._wanted = max(self._wanted, n)
            if not self.built.done() or self.built.exception() is not None:
                return                           # _build starts them
            running = sum(t.is_alive() and t.name.startswith("binder-lesson") for t in self._threads)
            for k in range(running, min(self._wanted, self._todo.qsize() + running)):
                self._spawn(self._run_lessons, f"binder-lesson-{k}")

    def _run_lessons(self) -> None:
        env = self.built.result()
        while not self._stop.is_set():
            try:
                lesson = self._todo.get_nowait()
            except queue.Empty:
                return
            record_execution(lesson, BINDER_RUN)
            mark(f"{lesson} (nbval) begins")
            try:
                self.results[lesson].set_result(
                    binder_sim.run_lesson(env, Path(lesson), self.limits, stop=self._stop))
            except BaseException as err:
                self.results[lesson].set_exception(err)
            mark(f"{lesson} (nbval) ends")
        while True:                              # stopped: what never ran says so
            try:
                lesson = self._todo.get_nowait()
            except queue.Empty:
                return
            self.results[lesson].set_exception(RuntimeError("the test session ended before it ran"))


def start(lessons: list[str], browser: list[str] = (), browser_source: Path | None = None) -> BackgroundCourse:
    """Start the build and the runs (conftest.py, once the session's tests are collected)."""
    global _current
    _current = BackgroundCourse(lessons, browser=browser, browser_source=browser_source).start()
    return _current


def current() -> BackgroundCourse | None:
    return _current


def stop() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None
