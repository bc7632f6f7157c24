"""Lesson 11's build-it exercise: the course's verdict rule, written by the learner, judged against the library's.

Introduced in lesson 11 (the rule itself is lesson 01's, ``distlab.verdict``).  Every winner the
course named came from one rule; the knowledge check ends with the learner writing it:
``fn(a, b) -> "a" | "b" | None`` for two lists of independent runs where higher is better.  The
checker asks it about the runs of this sitting that lesson 11 reads (lesson 05's speed-up repeats,
lesson 05b's speed-ups to the target and the probe ceilings, all compared as logarithms, the way
the course compares ratios) and about made-up runs chosen so that each common mistake gives a
different answer from the rule: identical runs, too few runs, a gap inside one run's spread but
outside the standard error's interval, a gap inside the t interval but outside the normal's, a
real gap smaller than the margin.  Each disagreement is shown with the library's numbers.
"""
from __future__ import annotations

import math

from ..verdict import verdict

EXERCISE = "Build it: the verdict rule"

# made-up runs, each a pair (a, b) and why it is there
PLANTED = [
    ("identical runs", [0.91, 0.92, 0.93], [0.91, 0.92, 0.93]),
    ("a large, clear gap", [0.95, 0.96, 0.97, 0.96], [0.80, 0.81, 0.79, 0.80]),
    ("a large, clear gap the other way", [0.70, 0.72, 0.71], [0.90, 0.91, 0.92]),
    ("too few runs: two a side", [0.99, 0.98], [0.50, 0.51]),
    ("a gap inside one run's spread, outside the standard error's interval",
     [0.819 + 0.03 * math.sin(i) for i in range(40)], [0.80 + 0.03 * math.cos(i) for i in range(40)]),
    ("a gap inside the t interval at 3 runs, outside the normal's 2.58 standard errors",
     [0.90, 0.95, 1.00], [0.75, 0.80, 0.85]),
    ("a real gap smaller than the margin (2% of the larger mean)",
     [0.910, 0.911, 0.912, 0.911], [0.900, 0.901, 0.902, 0.901]),
]


def sitting_cases(stored: dict) -> list[tuple[str, list, list]]:
    """Lesson 11: pairs of this sitting's runs, as logarithms (ratios compare as ratios)."""
    cases = []
    runs = (stored.get("05") or {}).get("speedup_2_ranks_runs", {})
    names = sorted(runs)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            cases.append((f"lesson 05: {x} against {y}, speed-ups of 2 ranks (logarithms)",
                          [math.log(v) for v in runs[x]], [math.log(v) for v in runs[y]]))
    timed = (stored.get("05b") or {}).get("time_to_target") or {}
    if timed.get("speedup_to_target") and timed.get("probe_ceilings"):
        cases.append(("lesson 05b: the probe ceilings against the speed-ups to the target (logarithms)",
                      [math.log(v) for v in timed["probe_ceilings"]],
                      [math.log(v) for v in timed["speedup_to_target"]]))
    return cases


def the_rule(a, b) -> str | None:
    """Lesson 11: the library's answer in the exercise's terms: "a", "b" or None."""
    said = verdict(a, b, names=("a", "b"), better="higher")
    return said.winner


def verdict_rule(fn, stored: dict | None = None) -> bool | None:
    """Lesson 11: check the learner's ``fn(a, b)`` against ``distlab.verdict`` on this sitting's runs and
    on planted ones; the first disagreement is named with the library's gap, interval and margin."""
    from .build import unanswered

    if unanswered(EXERCISE, fn):
        return None
    cases = PLANTED + sitting_cases(stored or {})      # the planted first: each names its mistake
    for name, a, b in cases:
        try:
            yours = fn(list(a), list(b))
        except Exception as err:          # the learner's code: say what it raised, on which runs
            print(f"{EXERCISE}: not quite. On {name}, your function raised {type(err).__name__}: {err}")
            return False
        rule = the_rule(a, b)
        if yours != rule:
            said = verdict(a, b, names=("a", "b"), better="higher")
            print(f"{EXERCISE}: not quite. On {name} you answered {yours!r}, the rule {rule!r}: {said.text}.")
            print(_hint(name))
            return False
    real = len(cases) - len(PLANTED)
    real_said = f"{real} pairs of this sitting's runs" if real else "no runs of this sitting (run lessons 05 and 05b)"
    print(f"{EXERCISE}: correct. Your rule agrees with the course's on all {len(cases)} cases: {real_said} and "
          f"{len(PLANTED)} made up to catch the usual mistakes.")
    return True


def _hint(name: str) -> str:
    """What the planted case that caught the learner's function tests."""
    hints = {
        "identical runs": "A gap of zero is never a winner.",
        "the other way": "The side with the higher mean wins, when it wins: return \"b\" when b's is higher.",
        "too few runs": "Below 3 runs a side there is no spread worth the name: no verdict.",
        "one run's spread": "Compare the gap with the uncertainty of the means, sd/sqrt(n) per side, not with "
                            "one run's sd: more runs shrink the first, never the second.",
        "t interval": "With few runs the interval uses Student's t at Welch's degrees of freedom "
                      "(distlab.verdict.t_quantile, welch_df), much wider than the normal's 2.58 at 3 runs.",
        "margin": "A gap must also exceed the margin, 2% of the larger mean: a tiny but certain gap is no answer.",
    }
    return next((why for key, why in hints.items() if key in name),
                "Check each step: at least 3 runs a side; the 99% Welch interval of the gap; the 2% margin.")
