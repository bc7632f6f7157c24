"""Issue 25: each lesson and solution runs at most twice in one test session (the whole suite runs
each once), and still runs everywhere the project promises: the lessons in the browser under
Binder's limits with their outputs compared as nbval does, the solutions under nbval there.

Two guards: conftest.py counts every run as it happens (the "lesson executions" section of the
summary) and fails the session past two; the test below reads the session's collected tests
before any of them runs, so that a third run is caught at once, not an hour later.
"""
from pathlib import Path

from helpers import BINDER_RUN, BROWSER_RUN, NBVAL_RUN, ROOT, executed_too_often

BINDER_TEST, BROWSER_TEST = "test_lesson_runs_on_binder", "test_notebook_runs_and_its_widgets_work"


def planned_runs(items) -> dict:
    """Notebook (path from the repository's root) -> the runs the collected tests will make of it."""
    runs: dict = {}
    nbval_files = set()
    for item in items:
        name = getattr(item, "originalname", "")
        params = getattr(getattr(item, "callspec", None), "params", {})
        if name == BINDER_TEST:
            runs.setdefault(params["lesson"], []).append(BINDER_RUN)
        elif name == BROWSER_TEST and params.get("notebook"):
            runs.setdefault(f"notebooks/{params['notebook']}", []).append(BROWSER_RUN)
        elif type(item).__name__ == "IPyNbCell" and item.parent not in nbval_files:
            nbval_files.add(item.parent)
            runs.setdefault(Path(item.parent.path).relative_to(ROOT).as_posix(), []).append(NBVAL_RUN)
    return runs


def test_too_many_runs_are_found():
    assert executed_too_often({"a.ipynb": ["nbval", "browser"], "b.ipynb": ["nbval"]}) == {}
    assert executed_too_often({"a.ipynb": ["nbval", "browser", "binder"]}) == {
        "a.ipynb": ["nbval", "browser", "binder"]}


def test_no_lesson_is_planned_to_run_more_than_twice(request):
    runs = planned_runs(request.session.items)
    assert not executed_too_often(runs), executed_too_often(runs)
    collected = {getattr(item, "originalname", "") for item in request.session.items}
    if {BINDER_TEST, BROWSER_TEST} <= collected:          # the whole suite: every promise kept
        lessons = sorted(p.relative_to(ROOT).as_posix() for p in Path(ROOT).glob("notebooks/*.ipynb"))
        solutions = sorted(p.relative_to(ROOT).as_posix() for p in Path(ROOT).glob("course/solutions/*.ipynb"))
        for lesson in lessons:                            # one run keeps all three promises (README)
            assert runs.get(lesson) == [BROWSER_RUN], lesson
        for solution in solutions:
            assert runs.get(solution) == [BINDER_RUN], solution
