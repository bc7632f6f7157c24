"""What the learner measured, kept from lesson to lesson, so that the course can end on their own numbers.

Introduced in lesson 11 (the knowledge check).  A few lessons end by writing down what their
runs measured (``remember("05", speedup_2_ranks=...)``): that N ranks reached the parameters of
one big-batch process, what a straggler cost, the speedup, the bytes ZeRO saved, what a failure
cost.  Lesson 11's questions are checked against those numbers, and its answer to the insurance
company is built from them.  A learner who skipped a lesson is told which one to run; nothing is
made up in its place.

One small JSON file, ``~/.distlab/course_results.json`` (``DISTLAB_RESULTS`` names another),
rewritten whole on every change (written, then renamed: never half a file), under a lock: two
lessons open at once (or run side by side, as the test suite does) never lose each other's results.

**One sitting.**  A course that quotes itself must quote one set of runs: lesson 11 built from a
lesson 05 run on Tuesday and a lesson 10 run on Friday could contradict what the stored lessons show.
Every entry carries its *sitting*: ``DISTLAB_SITTING`` when set (``tools/run_course.py`` sets one for
a whole in-order execution of the course), otherwise the results file's own (a learner's file is
one sitting until ``new_sitting()`` starts another).  Lesson 11 reads only this sitting's entries
(``this_sitting``) and says which lessons to run again.  Each ``remember`` also leaves its values in
the cell's output (a JSON part JupyterLab does not draw), so a test can check that every number
lesson 11 quotes equals what the stored lesson kept (``tests/test_one_sitting.py``).
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import time

MIMETYPE = "application/vnd.distlab.results+json"   # the values a cell kept, in its stored output


def results_path() -> str:
    return os.environ.get("DISTLAB_RESULTS") or os.path.join(os.path.expanduser("~"), ".distlab",
                                                             "course_results.json")


def _read() -> dict:
    try:
        with open(results_path()) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load() -> dict:
    """Lesson 11: everything remembered so far, by lesson (``{}`` when nothing yet, or the file is unreadable)."""
    return {k: v for k, v in _read().items() if not k.startswith("_")}


def sitting() -> str:
    """Lesson 11: the sitting results are kept in now: ``DISTLAB_SITTING``, else the file's (made on first use)."""
    return os.environ.get("DISTLAB_SITTING") or _read().get("_sitting") or "none yet"


def new_sitting(name: str | None = None) -> str:
    """Lesson 11: start a new sitting in the results file (the old entries stay, marked as another sitting's)."""
    name = name or time.strftime("%Y-%m-%d %H:%M:%S") + "-" + secrets.token_hex(2)
    _update(lambda data: data.__setitem__("_sitting", name))
    return name


def _update(change) -> dict:
    path = results_path()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # read, change, write: one lesson at a time
        data = _read()
        change(data)
        with open(f"{path}.{os.getpid()}.tmp", "w") as f:
            json.dump(data, f, indent=1)
        os.replace(f"{path}.{os.getpid()}.tmp", path)
    return data


def remember(lesson: str, **values) -> None:
    """Lesson 11: keep what lesson ``lesson`` measured (numbers, strings, lists, dicts of them).

    The values join what the lesson stored before, key by key (a key given again is replaced):
    a lesson may remember from several cells (lesson 05 stores its speedups, later its compute
    ratios and its more-data measurements), and a later cell must not erase an earlier one's.
    """
    kept = json.loads(json.dumps(values))

    def change(data):
        if not os.environ.get("DISTLAB_SITTING") and "_sitting" not in data:
            data["_sitting"] = time.strftime("%Y-%m-%d %H:%M:%S") + "-" + secrets.token_hex(2)
        now = os.environ.get("DISTLAB_SITTING") or data["_sitting"]
        old = data.get(lesson, {})
        base = old if old.get("sitting") == now else {}        # another sitting's values are not mixed in
        data[lesson] = {**base, **kept, "when": time.strftime("%Y-%m-%d %H:%M"), "sitting": now}

    data = _update(change)
    _show(lesson, kept, data[lesson]["sitting"])


def _show(lesson: str, kept: dict, where: str) -> None:
    """In a notebook: one line naming what was kept, and the values themselves in a JSON part of the output."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is None:
        return
    said = (f"lesson 11 reads lessons {', '.join(sorted(kept)) or 'none'} (sitting {where})" if lesson == "11 reads"
            else f"kept for lesson 11 (lesson {lesson}, sitting {where}): {', '.join(kept)}")
    # the sitting goes in the output's metadata, which nbval and the browser check never compare: a
    # re-run in another sitting must still reproduce the stored output (the values themselves are compared)
    display({MIMETYPE: {"lesson": lesson, "values": kept}, "text/plain": said},
            metadata={MIMETYPE: {"sitting": where}}, raw=True)


def recall(lesson: str) -> dict | None:
    """Lesson 11: what lesson ``lesson`` measured in this sitting, or None (with a line saying which lesson to run)."""
    found = load().get(lesson)
    if found is None:
        print(f"(nothing stored from lesson {lesson} yet: run that lesson, then come back)")
        return None
    if found.get("sitting") != sitting():
        print(f"(lesson {lesson}'s results come from another sitting ({found.get('sitting', 'unmarked')}, "
              f"{found.get('when', '?')}), not this one ({sitting()}): run lesson {lesson} again, so that "
              "the course quotes one set of runs)")
        return None
    return found


def this_sitting() -> dict:
    """Lesson 11: every lesson's results from this sitting, and nothing from another; in a notebook the
    values read are also left in the cell's output (the JSON part), for the one-sitting test."""
    now = sitting()
    found = {k: v for k, v in load().items() if v.get("sitting") == now}
    _show("11 reads", {k: {n: x for n, x in v.items() if n not in ("when", "sitting")} for k, v in found.items()}, now)
    return found
