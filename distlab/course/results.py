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
"""
from __future__ import annotations

import fcntl
import json
import os
import time


def results_path() -> str:
    return os.environ.get("DISTLAB_RESULTS") or os.path.join(os.path.expanduser("~"), ".distlab",
                                                             "course_results.json")


def load() -> dict:
    """Lesson 11: everything remembered so far, by lesson (``{}`` when nothing yet, or the file is unreadable)."""
    try:
        with open(results_path()) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember(lesson: str, **values) -> None:
    """Lesson 11: keep what lesson ``lesson`` measured (numbers, strings, lists, dicts of them).

    The values join what the lesson stored before, key by key (a key given again is replaced):
    a lesson may remember from several cells (lesson 05 stores its speedups, later its compute
    ratios and its more-data measurements), and a later cell must not erase an earlier one's.
    """
    entry = {**json.loads(json.dumps(values)), "when": time.strftime("%Y-%m-%d %H:%M")}
    path = results_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # read, change, write: one lesson at a time
        data = load()
        data[lesson] = {**data.get(lesson, {}), **entry}
        with open(f"{path}.{os.getpid()}.tmp", "w") as f:
            json.dump(data, f, indent=1)
        os.replace(f"{path}.{os.getpid()}.tmp", path)


def recall(lesson: str) -> dict | None:
    """Lesson 11: what lesson ``lesson`` measured, or None (with a line saying which lesson to run)."""
    found = load().get(lesson)
    if found is None:
        print(f"(nothing stored from lesson {lesson} yet: run that lesson, then come back)")
    return found
