import os
import sys

import pytest

# Test modules and the worker processes they start import tests/helpers.py and tests/workers.py
# by name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import helpers  # noqa: E402
from helpers import ROOT  # noqa: E402

_nbval_files = set()


@pytest.fixture
def pid_dir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    return str(d)


@pytest.fixture(scope="module")
def warm_ranks():
    """Launches in this module reuse warm ranks (lesson 00), as in a notebook: one start-up of
    several seconds per world size instead of one per launch.  For tests that only need ranks to
    train on; warm ranks give the same records as fresh ones, bit for bit (test_pool.py).  Tests
    about starting, stopping or failing ranks pass ``warm=False`` or stay in cold modules.  The
    ranks are stopped when the module ends."""
    import distlab

    before = os.environ.get("DISTLAB_WARM")
    os.environ["DISTLAB_WARM"] = "1"
    try:
        yield
    finally:
        distlab.shutdown()
        if before is None:
            os.environ.pop("DISTLAB_WARM", None)
        else:
            os.environ["DISTLAB_WARM"] = before


@pytest.fixture
def cli_here(capsys):
    """The same command through ``cli.main`` in this process, for what only reads or refuses a config:
    what the command prints and returns, without the 3-10 s of a new Python's imports per call (issue 25).
    The tests that start ranks, and one --help, still run ``python -m distlab.cli`` itself."""
    from distlab import cli

    def call(*args) -> helpers.Said:
        capsys.readouterr()
        try:
            code = cli.main(list(args))
        except SystemExit as stop:                     # argparse: --help (0), a usage error (2)
            code = stop.code if isinstance(stop.code, int) else 0
        said = capsys.readouterr()
        return helpers.Said(code, said.out, said.err)
    return call


def pytest_runtest_setup(item):
    """A notebook collected by nbval (``pytest --nbval notebooks``) runs once, from its first cell.
    The first test that waits for the simulated Binder marks the end of the foreground's own tests."""
    if _needs_binder(item) and not any(what == FOREGROUND_DONE for _, what in helpers.TIMELINE):
        helpers.mark(FOREGROUND_DONE)
    if type(item).__name__ == "IPyNbCell" and item.parent not in _nbval_files:
        _nbval_files.add(item.parent)
        helpers.record_execution(str(item.parent.path), helpers.NBVAL_RUN)


BINDER_FIXTURES = {"binder_env", "binder_course_run"}
FOREGROUND_DONE = "the tests that need no Binder are done; the rest wait for it"
BROWSER_TEST = "test_notebook_runs_and_its_widgets_work"


def _needs_binder(item) -> bool:
    return bool(BINDER_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(session, config, items):
    """Issue 25: the tests that wait for the simulated Binder's background runs go last (the browser's
    lessons at the very end), so that the other tests run while it builds and runs the course; and
    when the whole suite runs with it, the second lane's modules leave this process (second_lane.py)."""
    rank = {id(item): (2 if getattr(item, "originalname", "") == BROWSER_TEST else 1) if _needs_binder(item) else 0
            for item in items}
    items.sort(key=lambda item: rank[id(item)])          # stable: each group keeps its order
    import second_lane

    lane = {os.path.join(ROOT, m) for m in second_lane.MODULES}
    moved = [item for item in items if str(item.path) in lane]
    if (os.environ.get("DISTLAB_SECOND_LANE", "1") != "0" and not config.option.keyword
            and not config.option.markexpr and any(_needs_binder(item) for item in items)
            and {str(item.path) for item in moved} == lane):
        config.hook.pytest_deselected(items=moved)
        items[:] = [item for item in items if str(item.path) not in lane]
        config.second_lane = sorted(lane)


@pytest.fixture(scope="session")
def binder_course_run():
    """The simulated Binder's background run of the course (tests/binder_course.py)."""
    import binder_course

    return binder_course.current() or binder_course.start([])


def pytest_collection_finish(session):
    """Start the simulated Binder's build, and its run of the course, in the background as soon as the
    collected tests need it (tests/binder_course.py says why); they wait for it where they read it."""
    if session.config.option.collectonly:
        return
    needs = [item for item in session.items if _needs_binder(item)]
    if needs:
        import binder_course

        named = [(getattr(item, "originalname", ""), getattr(getattr(item, "callspec", None), "params", {}))
                 for item in needs]
        browser = [params["notebook"] for name, params in named if name == BROWSER_TEST and params.get("notebook")]
        source = None
        if browser:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser"))
            from browser_lab import notebook_dir

            source = notebook_dir()
        course = binder_course.start([params["lesson"] for name, params in named
                                      if name == "test_lesson_runs_on_binder"], browser=browser, browser_source=source)
        if getattr(session.config, "second_lane", None):
            import second_lane

            after = [*course.results.values(), *(course.browser.results.values() if course.browser else ())]
            second_lane.start(session.config.second_lane, after, junit=session.config.option.xmlpath)


def pytest_sessionfinish(session):
    """Stop the background course (nothing outlives the session).  Issue 25: no lesson runs more than
    twice in one session; the session fails if one did."""
    if getattr(session.config, "second_lane", None) and not session.config.option.collectonly:
        import second_lane           # the session's last wait: the second lane's tests (issue 25)

        lane = second_lane.current()
        if lane is None:            # its modules left this process: they must have run somewhere
            LANE_RESULT.extend([None, "", "nowhere: it never started"])
        else:
            code, text = lane.result() if session.exitstatus != pytest.ExitCode.INTERRUPTED else (None, "")
            LANE_RESULT.extend([code, text, lane.log])
            second_lane.stop()
        if LANE_RESULT[0] != 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if "binder_course" in sys.modules:
        sys.modules["binder_course"].stop()
    if helpers.executed_too_often(helpers.EXECUTIONS):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


LANE_RESULT: list = []      # the second lane's exit code, output and log file, for the summary


def pytest_terminal_summary(terminalreporter):
    """How often each lesson ran; the simulated Binder launch says what it enforced and what it had to
    substitute (test_binder.py)."""
    if helpers.EXECUTIONS:
        runs = helpers.EXECUTIONS
        terminalreporter.section("lesson executions")
        terminalreporter.write_line(f"{len(runs)} notebooks run; at most {helpers.MAX_EXECUTIONS} runs each allowed, "
                                    f"most runs of one: {max(len(h) for h in runs.values())}")
        for name, hows in sorted(runs.items()):
            terminalreporter.write_line(f"{name}: {len(hows)} ({', '.join(hows)})")
        for name, hows in helpers.executed_too_often(runs).items():
            terminalreporter.write_line(f"FAILED: {name} ran {len(hows)} times in this session", red=True)
    if helpers.TIMELINE:
        terminalreporter.section("background timeline (seconds into the session)")
        for t, what in helpers.TIMELINE:
            terminalreporter.write_line(f"{t:6.0f}  {what}")
    if LANE_RESULT:
        lane = sys.modules["second_lane"]
        terminalreporter.section("second lane (tests/second_lane.py)")
        code, text, log = LANE_RESULT or (None, "", "nowhere: it never started")
        lines = text.splitlines()
        shown = lines[next((i for i, ln in enumerate(lines) if "slowest" in ln and "durations" in ln), len(lines)):]
        for line in shown or lines[-20:]:
            terminalreporter.write_line(line)
        verdict = ("passed" if code == 0 else "did not finish" if code is None else f"FAILED (exit code {code})")
        terminalreporter.write_line(f"second lane {', '.join(os.path.basename(m) for m in lane.MODULES)}: {verdict}; "
                                    f"its output: {log}",
                                    red=code != 0, green=code == 0)
    module = sys.modules.get("binder_course")
    if module is not None and module.REPORT:
        terminalreporter.section("binder simulation")
        for line in module.REPORT:
            terminalreporter.write_line(line)
