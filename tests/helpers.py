"""Helpers shared by the test modules (``from helpers import ...``); fixtures live in conftest.py.

conftest.py puts tests/ on ``sys.path``, so this module, like tests/workers.py, is importable
by name from the tests and from the processes they start.
"""
import copy
import os
import subprocess
import sys
import time
from typing import NamedTuple

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_EXECUTIONS = 2        # issue 25: runs of one lesson per `make test` (nbval under Binder's limits, browser)
EXECUTIONS: dict = {}     # notebook (path from the repository's root) -> how each of its runs ran
# how a lesson runs in the suite: the names the counter, the plan test and the summary share
BINDER_RUN, BROWSER_RUN, NBVAL_RUN = ("nbval under Binder's limits",
                                     "Run All in the browser under Binder's limits, compared as nbval does", "nbval")


SESSION_T0 = time.time()
TIMELINE: list = []       # (seconds into the session, what began or ended in the background)


def mark(what: str) -> None:
    """Note when a background run began or ended (the summary's timeline shows what the session waited for)."""
    TIMELINE.append((time.time() - SESSION_T0, what))


def record_execution(notebook, how: str) -> None:
    """Count one run of a lesson or solutions notebook in this test session (conftest.py reports it)."""
    path = os.path.abspath(os.path.join(ROOT, notebook))
    name = os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path
    EXECUTIONS.setdefault(name, []).append(how)


def executed_too_often(executions: dict, limit: int = MAX_EXECUTIONS) -> dict:
    """The notebooks run more than ``limit`` times, with how each run ran."""
    return {name: hows for name, hows in executions.items() if len(hows) > limit}


def kill_and_wait_for(proc, pids, seconds: float = 30.0) -> list[int]:
    """Kill ``proc`` (a stand-in notebook kernel) outright; return those of ``pids`` still running
    after ``seconds`` (an empty list: everything it started has gone with it)."""
    proc.kill()
    proc.wait()
    deadline = time.time() + seconds
    while alive(pids) and time.time() < deadline:
        time.sleep(0.2)
    return alive(pids)


def alive(pids):
    """The pids in ``pids`` that are still running (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def children():
    """The pids of every process this test process started, however deep.

    Not the simulated Binder's (tests/binder_course.py): its build, its JupyterLab and headless
    Chromium, its nbval runs start and stop processes in background threads while the other tests
    run, and are not theirs to account for.  Each of those is a direct child whose command names
    the build's folder, its network namespace, Playwright or binder/postBuild; its whole subtree is
    left out.  Nor the second lane's pytest (tests/second_lane.py), which may start in the middle of
    a test that counts children (CI's run of 2026-12-02 caught one: test_sequence's bad input).
    """
    course = sys.modules["binder_course"].current() if "binder_course" in sys.modules else None
    markers = [str(course.dest), "dlbinder-", "playwright", "binder/postBuild"] if course is not None else []
    found = set()
    for child in psutil.Process().children():
        try:
            command = " ".join(child.cmdline())
            below = {p.pid for p in child.children(recursive=True)}
        except psutil.Error:
            continue
        if ".second-lane.xml" in command:     # the second lane's pytest: its junit file's name
            continue
        if not any(m in command for m in markers):
            found |= {child.pid} | below
    return found


def read_pids(pid_dir):
    return [int(open(os.path.join(pid_dir, f)).read()) for f in os.listdir(pid_dir) if f.endswith(".pid")]


def launch_forever_in_subprocess(tmp_path, pid_dir, backend="torchrun", wait=120, warm=False):
    """Start ``workers.run_forever`` on 2 ranks from a separate Python process that stands in
    for a notebook kernel; return it and the ranks' pids once both ranks are running.
    ``warm=True``: the ranks first run a short job, then ``run_forever`` on the same (warm) ranks.

    The process exits with code 3 and prints ``INTERRUPTED: <message>`` on Ctrl-C.
    """
    script = tmp_path / "kernel.py"
    script.write_text(
        "import sys; sys.path.insert(0, %r)\n"
        "import distlab, workers\n"
        "warm = %r\n"
        "if warm:\n"
        "    distlab.launch(workers.echo, world_size=2, backend=%r, warm=True, progress='none')\n"
        "try:\n"
        "    distlab.launch(workers.run_forever, world_size=2, backend=%r, pid_dir=%r, progress='text', warm=warm)\n"
        "except KeyboardInterrupt as e:\n"
        "    print('INTERRUPTED:', e, flush=True); sys.exit(3)\n"
        % (os.path.join(ROOT, "tests"), warm, backend, backend, pid_dir))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT)
    deadline = time.time() + wait
    while len(os.listdir(pid_dir)) < 2 and time.time() < deadline:
        time.sleep(0.2)
    pids = read_pids(pid_dir)
    assert len(pids) == 2 and len(alive(pids)) == 2, proc.stdout.read() if proc.poll() is not None else ""
    return proc, pids


class Said(NamedTuple):
    """What a ``distlab`` command said: its exit code and its two streams (as ``subprocess.run``'s)."""
    returncode: int
    stdout: str
    stderr: str


# ---- issue 36: the one way the tests share a real job's results ------------------------------------
RESULTS: dict = {}        # the call's arguments (frozen) -> what it returned, or the exception it raised
CALLS: list = []          # the calls that really ran, in order (tests/test_helpers.py, and a count of launches)


def _frozen(value):
    """``value`` as a hashable key: dicts by their sorted items, functions by their module and name, and every
    scalar with its type (``True`` is not ``1``, ``2.0`` not ``2``)."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((_frozen(k), _frozen(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(map(_frozen, value), key=repr) if isinstance(value, (set, frozenset)) else map(_frozen, value)
        return (type(value).__name__, tuple(items))
    if callable(value) and hasattr(value, "__qualname__"):
        return ("function", value.__module__, value.__qualname__)
    hash(value)                                                         # anything else must be hashable
    return (type(value).__name__, value)


def once(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, run once per test session for the same function and arguments, whichever test
    asks first, alone or in any order; every caller gets its own copy (no test sees another's changes).  A call
    that raised raises the same again without running a second time.  What the tests use to run a real job
    (a launch, a one-process reference) once for all the tests that read it."""
    key = _frozen((fn, args, kwargs))
    if key not in RESULTS:
        CALLS.append(key)
        try:
            RESULTS[key] = (True, fn(*args, **kwargs))
        except Exception as error:                   # noqa: BLE001 - kept, and raised to every caller
            RESULTS[key] = (False, error)
    ok, result = RESULTS[key]
    if not ok:
        raise result
    return copy.deepcopy(result)


def launched(fn, world_size: int, **kwargs):
    """``distlab.launch(fn, world_size, progress="none", **kwargs)``, launched once per session for the same
    arguments (``once``): each rank's return value."""
    import distlab

    return once(distlab.launch, fn, world_size, **dict(dict(progress="none"), **kwargs))


def trained(world_size: int, cases: dict, **kwargs) -> dict:
    """Several trainings in one launch (``workers.trainings``), launched once per session for the same cases:
    ``{name: [each rank's record]}``."""
    import workers

    ranks = launched(workers.trainings, world_size, cases=cases, **kwargs)
    return {name: [rank[name] for rank in ranks] for name in cases}
