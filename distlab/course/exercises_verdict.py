"""Lesson 11's build-it exercise: the course's verdict rule, written by the learner, judged against the library's.

Introduced in lesson 11 (the rule itself is lesson 01's, ``distlab.verdict``).  Every winner the
course named came from one rule; the knowledge check ends with the learner writing it:
``fn(a, b, margin) -> "a" | "b" | None`` for two lists of independent runs where higher is better,
``margin`` the smallest gap that matters in the values' own unit.  The checker asks it about
made-up runs chosen so that each common mistake gives a different answer from the rule
(identical runs, a clear gap either way, too few runs, one run's spread in place of the standard
error, the normal's quantile or a one-sided one or the population's standard deviation in place of
Student's two-sided t, a pooled variance in place of Welch's, a gap under the margin), then about
the runs of this sitting that lesson 11 reads (lesson 05's speed-up repeats, lesson 05b's speed-ups
to the target and the probe ceilings), given as logarithms with the margin of a 2% ratio, exactly
as the course judged them (``verdict(..., log=True)``).  Each disagreement is shown with the
library's numbers and what the case tests.
"""
from __future__ import annotations

import math

from ..verdict import verdict

EXERCISE = "Build it: the verdict rule"

# made-up runs: (what the case tests, a, b); the margin given is the rule's, 2% of the larger |mean|
PLANTED = [
    ("identical runs", [0.91, 0.92, 0.93], [0.91, 0.92, 0.93]),
    ("a large, clear gap", [0.95, 0.96, 0.97, 0.96], [0.80, 0.81, 0.79, 0.80]),
    ("a large, clear gap the other way", [0.70, 0.72, 0.71], [0.90, 0.91, 0.92]),
    ("too few runs: two a side", [0.99, 0.98], [0.50, 0.51]),
    ("a gap inside one run's spread, outside the standard error's interval",
     [0.819 + 0.03 * math.sin(i) for i in range(40)], [0.80 + 0.03 * math.cos(i) for i in range(40)]),
    ("a gap inside the t interval at 3 runs, outside the normal's 2.58 standard errors",
     [0.90, 0.95, 1.00], [0.75, 0.80, 0.85]),
    ("a gap just inside the two-sided 99% t interval at 3 runs",
     [0.90, 0.95, 1.00], [0.73, 0.78, 0.83]),
    ("3 spread runs against 12 close ones: Welch's interval, not a pooled variance's",
     [0.80, 0.90, 1.00], [0.70 + 0.005 * i for i in range(12)]),
    ("a real gap smaller than the margin", [0.910, 0.911, 0.912, 0.911], [0.900, 0.901, 0.902, 0.901]),
]


def sitting_cases(stored: dict) -> list[tuple[str, list, list]]:
    """Lesson 11: pairs of this sitting's ratios (positive numbers), judged as ratios."""
    cases = []
    runs = (stored.get("05") or {}).get("speedup_2_ranks_runs", {})
    names = sorted(runs)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            cases.append((f"lesson 05: {x} against {y}, speed-ups of 2 ranks", list(runs[x]), list(runs[y])))
    timed = (stored.get("05b") or {}).get("time_to_target") or {}
    if timed.get("speedup_to_target") and timed.get("probe_ceilings"):
        cases.append(("lesson 05b: the probe ceilings against the speed-ups to the target",
                      list(timed["probe_ceilings"]), list(timed["speedup_to_target"])))
    return cases


def asked(a, b, log: bool) -> tuple[list, list, float, str | None, object]:
    """Lesson 11: what the learner's function is given for one case, and the library's verdict on it."""
    said = verdict(a, b, names=("a", "b"), better="higher", log=log)     # its margin in the values' own unit
    if log:
        return [math.log(x) for x in a], [math.log(x) for x in b], said.margin, said.winner, said
    return list(a), list(b), said.margin, said.winner, said


def verdict_rule(fn, stored: dict | None = None) -> bool | None:
    """Lesson 11: check the learner's ``fn(a, b, margin)`` against ``distlab.verdict``, planted cases first
    (each names its mistake), then this sitting's runs; the first disagreement is shown with the
    library's gap, interval and margin."""
    from .build import unanswered

    if unanswered(EXERCISE, fn):
        return None
    cases = [(name, a, b, False) for name, a, b in PLANTED]
    cases += [(name, a, b, True) for name, a, b in sitting_cases(stored or {})]
    for name, a, b, log in cases:
        xa, xb, margin, rule, said = asked(a, b, log)
        try:
            yours = fn(xa, xb, margin)
        except Exception as err:          # the learner's code: say what it raised, on which runs
            print(f"{EXERCISE}: not quite. On {name}, your function raised {type(err).__name__}: {err}")
            return False
        if yours != rule:
            given = "the logarithms of " if log else ""
            print(f"{EXERCISE}: not quite. On {name} ({given}a, b and margin {margin:.3g}) you answered "
                  f"{yours!r}, the rule {rule!r}: {said.text}.")
            print(_hint(name))
            return False
    real = len(cases) - len(PLANTED)
    real_said = f"{real} pairs of this sitting's runs" if real else "no runs of this sitting (run lessons 05 and 05b)"
    print(f"{EXERCISE}: correct. Your rule agrees with the course's on all {len(cases)} cases: {len(PLANTED)} "
          f"made up to catch the usual mistakes and {real_said}.")
    return True


def _hint(name: str) -> str:
    """What the planted case that caught the learner's function tests."""
    hints = {
        "identical runs": "A gap of zero is never a winner.",
        "the other way": "The side with the higher mean wins, when it wins: return \"b\" when b's is higher.",
        "too few runs": "Below 3 runs a side there is no spread worth the name: no verdict.",
        "one run's spread": "Compare the gap with the uncertainty of the means, sd/sqrt(n) per side, not with "
                            "one run's sd: more runs shrink the first, never the second.",
        "normal's": "With few runs the interval uses Student's t at Welch's degrees of freedom "
                    "(distlab.verdict.t_quantile(df)), much wider than the normal's 2.58 at 3 runs.",
        "two-sided": "The interval is two-sided at 99%: t_quantile(df) is scipy's t.ppf(0.995, df); and each "
                     "side's variance is the sample's (statistics.variance: divide by n - 1).",
        "Welch": "Welch's standard error keeps each side's own variance, s_a^2/n_a + s_b^2/n_b, with its degrees "
                 "of freedom (v_a + v_b)^2 / (v_a^2/(n_a - 1) + v_b^2/(n_b - 1)); a pooled variance lets the "
                 "12 close runs hide the 3 spread ones.",
        "margin": "A gap must also exceed the margin the checker gives: a tiny but certain gap is no answer.",
    }
    return next((why for key, why in hints.items() if key in name),
                "Check each step: at least 3 runs a side; the 99% Welch interval of the gap; the margin.")
