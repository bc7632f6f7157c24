"""A second pytest process for some test modules, once the simulated Binder's course is done (issue 25).

Why: ``make test`` has two lanes.  The foreground runs the tests one after another; the background
(tests/binder_course.py) builds the simulated Binder and runs the course in it.  In the last full
run the background was done 1777 s into a 2769 s session, and the foreground's own tests went on
until 2639 s: for the last 15 minutes one lane sat idle.  So the modules named in ``MODULES`` (whole
modules, chosen because their tests mostly wait: for timeouts, for killed kernels, for Horovod's
start-up) leave the foreground and run in a second ``python -m pytest`` started when the background
course is done; the session's last test (test_second_lane.py) waits for it, shows its summary, and
fails when any of its tests failed.  Every test still runs, once.

The second lane is used only when the whole suite runs with the simulated Binder (``make test``) and
no ``-k`` or ``-m`` narrows it; otherwise the modules run in the foreground as always.
``DISTLAB_SECOND_LANE=0`` keeps them there too.  Its output is in the folder of the session's junit
file (``<junit>.second-lane.xml``) or in a temporary folder; the terminal summary says where.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from helpers import ROOT, mark

MODULES = ("tests/test_faults.py", "tests/test_horovod.py")
WAIT_S = 2400               # the most the session's last test waits for the lane

_current: SecondLane | None = None
# what the session began with: a module's fixture (conftest.warm_ranks) sets DISTLAB_WARM=1 while its tests
# run, and a lane started then must not inherit it (CI's run of 2026-12-03: test_horovod's launches kept
# their ranks warm, and its check that no rank outlives its job found them)
_WARM_AT_START = os.environ.get("DISTLAB_WARM")


class SecondLane:
    """``python -m pytest MODULES`` in its own process group, started once every future in ``after`` is done."""

    def __init__(self, modules, after=(), junit: str | None = None, timeline: bool = False):
        self.modules, self.after, self.timeline = list(modules), list(after), timeline
        folder = Path(junit).parent if junit else Path(tempfile.mkdtemp(prefix="distlab-second-lane-"))
        stem = Path(junit).name if junit else "second-lane"
        self.junit, self.log = folder / f"{stem}.second-lane.xml", folder / f"{stem}.second-lane.log"
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="second-lane", daemon=True)

    def start(self) -> SecondLane:
        self._thread.start()
        return self

    def _run(self) -> None:
        for future in self.after:           # a failed lesson is its own test's failure, not this lane's
            while not future.done() and not self._stop.is_set():
                time.sleep(1)
        if self._stop.is_set():
            return
        env = lane_env()
        command = [sys.executable, "-m", "pytest", *self.modules, "-v", "-rfE", "-p", "no:cacheprovider",
                   "--durations=10", f"--junitxml={self.junit}"]
        if self.timeline:
            mark("second lane begins: " + " ".join(Path(m).name for m in self.modules))
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            self.returncode = self.proc.wait()
        if self.timeline:
            mark("second lane ends")

    def result(self, timeout: float = WAIT_S) -> tuple[int | None, str]:
        """The lane's exit code (None: it did not finish in time) and its output."""
        self._thread.join(timeout)
        text = self.log.read_text() if self.log.exists() else ""
        return self.returncode, text

    def stop(self) -> None:
        """Nothing outlives the session: a lane still running is stopped, its process group with it."""
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._thread.join(timeout=60)


def lane_env() -> dict:
    """The environment of the lane's pytest: this process's, without pytest's own settings, and with the
    DISTLAB_WARM the session began with (not the one a running module's fixture has set)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST", "DISTLAB_WARM")}
    if _WARM_AT_START is not None:
        env["DISTLAB_WARM"] = _WARM_AT_START
    return env


def start(modules, after=(), junit: str | None = None) -> SecondLane:
    global _current
    _current = SecondLane(modules, after, junit, timeline=True).start()
    return _current


def current() -> SecondLane | None:
    return _current


def stop() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None
