"""The exercises of lesson 10 (failure is normal at scale), checked as ``exercises.py`` checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.
"""
from __future__ import annotations

import math

from .checking import check


def checkpoint_interval(answer, save_seconds: float, hours_between_failures: float) -> bool | None:
    """Lesson 10: the seconds between checkpoints that waste the least time (Young's rule).

    Saving every ``T`` seconds costs ``save_seconds / T`` of the time; a failure loses on
    average half an interval, ``T / 2``, once every ``M`` seconds: ``T / (2 M)``.  The sum is
    smallest where both terms are equal: ``T = sqrt(2 * save_seconds * M)``.
    """
    mtbf = hours_between_failures * 3600
    expected = math.sqrt(2 * save_seconds * mtbf)
    return check("checkpoint interval", answer, expected, tolerance=0.02, hints={
        math.sqrt(save_seconds * mtbf): "a failure loses half an interval on average, not a whole one: "
                                        "where does the 2 come from?",
        2 * save_seconds * mtbf: "the two costs balance at the square root of that product.",
        save_seconds: "saving all the time wastes all the time; the interval grows with the time between failures."},
        otherwise="write the wasted fraction as save/T + T/(2M) and find the T where it is smallest.")


def steps_redone(answer, reached: int, resumed_from: int, measured: int) -> bool | None:
    """Lesson 10: how many steps the restarted job trained twice: the learner's run, measured by the monitor."""
    return check("steps redone", answer, measured, hints={
        reached: "only the steps after the last checkpoint are lost; the ones before it were saved.",
        resumed_from: "that is the step it resumed from; how far had it got past it?"},
        otherwise=f"it had reached step {reached} and went back to the checkpoint of step {resumed_from}.")
