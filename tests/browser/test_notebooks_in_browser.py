"""Every lesson, run the way a learner runs it: JupyterLab in a real browser, Run All, then look.

For each notebook in ``notebooks/`` (found automatically, so new lessons are covered without new
code) browser_course.py opens a fresh copy in headless Chromium, in the simulated Binder, runs all
cells from the Run menu and checks what the page shows (browser_checks.py lists the checks: every
cell ran, outputs equal the stored ones as nbval compares them, every widget rendered, every
control changes what its widget shows, pictures fit a laptop screen).  The lessons run in the
background while the other tests run (tests/binder_course.py); each test here waits for its
lesson's result and reports it, with what Binder's limits measured.

Screenshots of each notebook after running and after the interactions go to artifacts/browser/
(not committed): look at them for readable labels and colour-blind-safe colours.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from browser_lab import notebook_dir

pytestmark = pytest.mark.browser


def pytest_generate_tests(metafunc):
    """One test per notebook in notebooks/, found when the tests are collected.

    An empty folder gives one test that fails (never an empty, silently skipped set).
    """
    if "notebook" in metafunc.fixturenames:
        names = sorted(p.name for p in notebook_dir().glob("*.ipynb"))
        params = [pytest.param(n, id=Path(n).stem) for n in names]
        metafunc.parametrize("notebook", params or [pytest.param(None, id="no-notebooks-found")])


@pytest.mark.binder
@pytest.mark.timeout(3600)        # the wait includes the environment's build and the lessons before it
def test_notebook_runs_and_its_widgets_work(notebook, binder_course_run):
    assert notebook is not None, (
        f"no notebooks found in {notebook_dir()}: the browser suite has nothing to check")
    out = binder_course_run.browser_result(notebook)
    m = out.measured
    if m is not None:
        binder_course_run.report(f"{notebook} in the browser: {'passed' if out.error is None else 'FAILED'} in "
                                 f"{m.wall_s:.1f} s, peak {m.peak_pss_gb:.2f} GB summed PSS, {m.peak_gb:.2f} GB "
                                 f"summed RSS ({m.peak_processes} processes, the server's included)"
                                 + (f", cgroup peak {m.group_peak_bytes / 1e9:.2f} GB" if m.group_peak_bytes else ""))
    print("\n".join(out.report))
    if m is not None:
        assert m.oom_kills == 0 and not m.watchdog_killed, f"{notebook} went past Binder's memory limit"
    if out.error is not None:
        raise out.error
    assert m is not None, f"{notebook}: the kernel never started"
    assert not out.left_running, f"processes left running after the kernel was shut down: {out.left_running}"

