"""The course's one rule for saying that one choice beats another (lesson 01 teaches it).

Every lesson, benchmark and knowledge-check answer that names a winner asks this module, so the
course never has two standards of evidence.  The rule, over **independent runs** (one number a run:
a seed's test accuracy, a repeat's median step time; never the steps of one run, which share
their start-up, their neighbours on the machine and their data order):

1. at least ``MIN_RUNS`` runs a side;
2. the gap between the two means is larger than its uncertainty: the half-width of a 99%
   confidence interval for the difference, ``t * SE`` with ``SE = sqrt(s_a^2/n_a + s_b^2/n_b)``
   and Welch's degrees of freedom (Welch 1947; any statistics text, e.g. Wasserman,
   *All of Statistics*, section 10.1);
3. the gap is larger than the smallest difference that matters, ``margin`` (a share of the larger
   mean): a 1% gap in step time is not an answer to "does distributing pay?", however many
   runs pin it down.

Otherwise the verdict is "no clear difference": the runs allow either order.  Times, throughputs and
speed-ups are compared as ratios (``log=True``: the rule on their logarithms, the gap a factor),
because their noise multiplies: a busy moment slows a long step by as large a share as a short one.  Why the standard
*error* and not one run's standard deviation: the spread of single runs does not shrink when you
add runs, the uncertainty of their mean does, as ``s / sqrt(n)``; so more runs can settle a
question, and the verdict says how many it used.

Two identical configurations give "no clear difference": always for identical seeded runs (gap 0),
and almost always for noisy timings, where a false winner needs a gap beyond both the 99% interval
and the margin (rare, not impossible).  ``tests/test_verdict.py`` checks both, and that a real,
large difference names its winner.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

MIN_RUNS = 3          # fewer cannot estimate a spread worth the name
CONFIDENCE = 0.99     # a 1-in-100 chance of naming a winner between identical choices, before the margin
MARGIN = 0.02         # the smallest gap that matters, as a share of the larger mean


@dataclass(frozen=True)
class Runs:
    """Lesson 01: one side's independent runs, summarised."""
    name: str
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def sd(self) -> float:
        """One run's spread: it does not shrink with more runs."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def se(self) -> float:
        """The mean's uncertainty: ``sd / sqrt(n)``, which more runs do shrink."""
        return self.sd / math.sqrt(self.n) if self.n else float("nan")

    def describe(self, digits: int = 3, unit: str = "", log: bool = False) -> str:
        """The mean (geometric on a log scale, where ``values`` are logarithms) and the range."""
        back = math.exp if log else float
        lo, hi = back(min(self.values)), back(max(self.values))
        return (f"{self.name} {back(self.mean):.{digits}g}{unit} (runs from {lo:.{digits}g} to {hi:.{digits}g}, "
                f"{self.n} run{'s' if self.n != 1 else ''})")


@dataclass(frozen=True)
class Verdict:
    """Lesson 01: what the runs say.  ``winner`` is a side's name, or None for "no clear difference"."""
    a: Runs
    b: Runs | None        # None: one side against a fixed reference (``against``)
    better: str
    gap: float            # mean of a minus mean of b (or minus the reference)
    half_width: float     # the 99% interval's half-width for that gap (nan: too few runs)
    margin: float         # the smallest gap that matters, in the values' own unit
    winner: str | None
    text: str

    @property
    def clear(self) -> bool:
        return self.winner is not None

    def __str__(self) -> str:
        return self.text


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Lesson 01: Student's t for a two-sided interval (scipy's ``t.ppf``; the normal's 2.58 as df grows)."""
    from scipy.stats import t
    return float(t.ppf(0.5 + confidence / 2, df))


def welch_df(a: Runs, b: Runs) -> float:
    """Lesson 01: Welch-Satterthwaite degrees of freedom of the difference of two means."""
    va, vb = a.se ** 2, b.se ** 2
    if va + vb == 0:
        return float(a.n + b.n - 2)
    return (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))


def _sides(a, b, names, log: bool) -> tuple[Runs, Runs | None]:
    def runs(name, values):
        values = tuple(map(float, values))
        if log and any(x <= 0 for x in values):
            raise ValueError(f"log=True compares positive numbers (times, ratios): {name} has {min(values)}")
        return Runs(name, tuple(math.log(x) for x in values) if log else values)
    return runs(names[0], a), (runs(names[1], b) if b is not None else None)


def _decide(a: Runs, b: Runs | None, reference: float | None, se: float, df: float, *, better: str,
            margin: float, confidence: float, digits: int, unit: str, names_b: str, log: bool) -> Verdict:
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    mean_b = b.mean if b is not None else reference
    gap = a.mean - mean_b
    floor = math.log1p(margin) if log else margin * max(abs(a.mean), abs(mean_b))
    short = [s for s in (a, b) if s is not None and s.n < MIN_RUNS]
    if short:
        why = ", ".join(f"{s.n} of {s.name}" for s in short)
        return Verdict(a, b, better, gap, float("nan"), floor, None,
                       f"no clear difference: too few runs ({why}; at least {MIN_RUNS} a side)")
    half = t_quantile(df, confidence) * se
    clear = abs(gap) > half and abs(gap) > floor and gap != 0
    a_ahead = (gap > 0) == (better == "higher")
    winner = (a.name if a_ahead else names_b) if clear else None
    sides = a.describe(digits, unit, log) + "; " + (
        b.describe(digits, unit, log) if b is not None
        else f"{names_b} {math.exp(reference) if log else reference:.{digits}g}{unit}")
    if log:
        numbers = (f"ratio {math.exp(gap):.{digits}g}, 99% interval x/ {math.exp(half):.{digits}g}, "
                   f"smallest ratio that matters {math.exp(floor):.{digits}g}")
    else:
        numbers = (f"gap {gap:+.{digits + 1}g}{unit}, 99% interval +/- {half:.{digits + 1}g}, "
                   f"smallest gap that matters {floor:.{digits}g}")
    if clear:
        words = f"{winner} {better}: a clear difference"
    elif abs(gap) <= half:
        words = "no clear difference: the runs allow either order"
    else:
        words = "no clear difference: the gap is smaller than what matters"
    return Verdict(a, b, better, gap, half, floor, winner, f"{words} ({sides}; {numbers})")


def verdict(a, b, *, names=("A", "B"), better: str = "higher", log: bool = False, margin: float = MARGIN,
            confidence: float = CONFIDENCE, digits: int = 3, unit: str = "") -> Verdict:
    """Lesson 01: the rule applied to two sides' independent runs (``a`` and ``b``: lists of numbers).

    ``better``: "higher" for accuracies and speed-ups, "lower" for times and losses; ``log``: compare
    as ratios (times, throughputs), where ``margin`` is the smallest ratio above 1 that matters."""
    ra, rb = _sides(a, b, names, log)
    if ra.n < 2 or rb.n < 2:
        se, df = float("nan"), 1.0
    else:
        se, df = math.sqrt(ra.se ** 2 + rb.se ** 2), welch_df(ra, rb)
    return _decide(ra, rb, None, se, df, better=better, margin=margin, confidence=confidence,
                   digits=digits, unit=unit, names_b=rb.name, log=log)


def against(runs, reference: float, *, names=("runs", "reference"), better: str = "higher", log: bool = False,
            margin: float = MARGIN, confidence: float = CONFIDENCE, digits: int = 3, unit: str = "") -> Verdict:
    """Lesson 01: the rule for one side's runs against a fixed number (a speed-up against 1: paired
    repeats, each repeat's ratio one run).  The interval is the one-sample ``t * sd / sqrt(n)``."""
    ra, _ = _sides(runs, None, names, log)
    ref = math.log(reference) if log else float(reference)
    se, df = (ra.se, float(ra.n - 1)) if ra.n >= 2 else (float("nan"), 1.0)
    return _decide(ra, None, ref, se, df, better=better, margin=margin, confidence=confidence,
                   digits=digits, unit=unit, names_b=names[1], log=log)
