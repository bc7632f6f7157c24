"""Every lesson run once, in a real browser, inside the simulated Binder: the suite's one run of it.

Why (issue 25): the suite promises that every lesson runs under nbval (its stored outputs
compared), in a real browser with every control moved, and within Binder's limits.  These used
to be separate executions.  Here one execution keeps all three promises:

* the JupyterLab that serves the lesson is the simulated Binder's (tools/binder_sim.py: built from
  ``binder/`` alone), started through ``binder/start`` in a network namespace of its own with a
  link the browser can reach, as a Binder pod is reached;
* once the lesson's kernel has started, the server and the kernel are moved into a cgroup with
  Binder's 2 GiB and one CPU's quota (``Confinement.adopt``): every rank the lesson starts is born
  inside it; the memory of the group is sampled throughout (``Watch``);
* headless Chromium runs it as a learner does (browser_checks.check_lesson): Run All, outputs
  compared with the stored ones as nbval compares them, every widget looked at, every control moved.

It runs in the background (tests/binder_course.py starts it once the environment is built), one
lesson at a time, while the other tests run; test_notebooks_in_browser.py waits for each result.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from browser_checks import check_lesson, new_page
from browser_lab import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, LabServer
from helpers import BROWSER_RUN, ROOT, mark, record_execution

sys.path.insert(0, os.path.join(ROOT, "tools"))
import binder_sim  # noqa: E402


@dataclass
class LessonInBrowser:
    """What one lesson's run in the browser gave: the report, the problems, Binder's measurements."""
    notebook: str
    report: list = field(default_factory=list)
    error: BaseException | None = None          # check_lesson's AssertionError (or whatever broke)
    measured: binder_sim.Measured | None = None
    left_running: list = field(default_factory=list)


class BrowserCourse:
    """Run ``notebooks`` (names in ``source``) one after the other in ``run(env, stop)``."""

    def __init__(self, notebooks: list[str], source: Path, limits: binder_sim.Limits = binder_sim.BINDER):
        self.notebooks, self.source, self.limits = list(notebooks), Path(source), limits
        self.results = {n: Future() for n in self.notebooks}
        self.where = ""
        self._server: LabServer | None = None
        self._box: binder_sim.Confinement | None = None

    def fail_all(self, err: BaseException) -> None:
        for f in self.results.values():
            if not f.done():
                f.set_exception(err)

    def run(self, env: binder_sim.BinderEnv, stop: threading.Event) -> None:
        """Start the server and the browser, then every lesson (in the thread that calls it)."""
        from playwright.sync_api import sync_playwright

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="distlab-browser-"))
        try:
            with binder_sim.own_network(reachable=True) as (prefix, where, host):
                self.where = where
                self._server = server = LabServer(base, self.source, binder=env, prefix=prefix, host=host)
                try:
                    with sync_playwright() as p:
                        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                        try:
                            for notebook in self.notebooks:
                                if stop.is_set():
                                    raise RuntimeError("the test session ended before it ran")
                                record_execution(self.source / notebook, BROWSER_RUN)
                                mark(f"{notebook} (browser) begins")
                                try:
                                    self.results[notebook].set_result(self._one(browser, server, notebook))
                                except BaseException as err:
                                    self.results[notebook].set_exception(err)
                                mark(f"{notebook} (browser) ends")
                        finally:
                            browser.close()
                finally:
                    server.stop()
                    shutil.copy(server.log_path, ARTIFACTS / "jupyter-server.log")
                    self._server = None
        except BaseException as err:
            self.fail_all(err)
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def abort(self) -> None:
        """The session ends: stop the server and whatever runs in the group now (from another thread)."""
        box, server = self._box, self._server
        if box is not None:
            box.kill_all()
        if server is not None and server.proc.poll() is None:
            try:
                os.killpg(server.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _one(self, browser, server: LabServer, notebook: str) -> LessonInBrowser:
        out = LessonInBrowser(notebook)
        context, page = new_page(browser)
        box = binder_sim.Confinement(self.limits).__enter__()
        self._box = box
        watch = binder_sim.Watch(box)
        started = False
        try:
            # the server goes into Binder's limits; the kernel it starts, and every rank, are born there.
            # What the server held before it moved stays charged outside: the limit is lowered by it.
            held = binder_sim._memory(server.proc.pid)[0]
            box.adopt(server.proc.pid)
            if self.limits.memory_bytes is not None:
                box.set_memory_limit(self.limits.memory_bytes - held)
            out.report.append(f"the server held {held / 1e6:.0f} MB when it joined the group: the group's limit "
                              f"is {self.limits.memory_bytes / 2**30:g} GiB minus that")
            watch.__enter__()
            started = True
            out.report[:0] = check_lesson(page, server, notebook, ARTIFACTS)
        except BaseException as err:
            out.error = err
        finally:
            try:
                out.left_running = server.shut_down_kernels()
            except OSError as err:
                out.left_running = [f"the server did not answer: {err}"]
            if started:
                watch.__exit__(None, None, None)
                out.left_running += binder_sim.left_behind(box, server.proc.pid)
                out.measured = watch.measured([f"Run All of {notebook} in the browser"],
                                              0 if out.error is None else 1, out.left_running)
                try:
                    box.release(server.proc.pid)
                except OSError:
                    pass                  # the server itself is gone: the next lesson reports it
            self._box = None
            box.__exit__(None, None, None)
            context.close()
        return out
