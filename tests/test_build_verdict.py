"""Issue 37: lesson 11's build-it checker (the verdict rule) against distlab.verdict, with planted mistakes."""
import pytest
from test_build import checked, solution_cell

from distlab.course import exercises_verdict

RIGHT = solution_cell("11_knowledge_check", "my_verdict")        # the stored solution
SITTING = {"05": {"speedup_2_ranks_runs": {"worst": [0.61, 0.66, 0.64], "probe": [1.05, 1.21, 1.13],
                                            "best": [0.97, 1.42, 1.14]}},
           "05b": {"time_to_target": {"speedup_to_target": [0.53, 0.54, 0.73],
                                      "probe_ceilings": [1.94, 1.85, 2.01]}}}


def test_the_solution_agrees_with_the_library_on_every_case(capsys):
    answer, out = checked(exercises_verdict.verdict_rule, RIGHT, "my_verdict", capsys, SITTING)
    assert answer is True and "9 made up to catch the usual mistakes and 4 pairs of this sitting's runs" in out, out


@pytest.mark.parametrize("mistake,named", [
    (RIGHT.replace("abs(gap) <= t_quantile(df) * math.sqrt(va + vb)",
                   "abs(gap) <= t_quantile(df) * math.sqrt(va * len(a) + vb * len(b))"), "not with one run's sd"),
    (RIGHT.replace("t_quantile(df)", "2.576"), "Student's t at Welch's degrees of freedom"),
    (RIGHT.replace("t_quantile(df)", "t_quantile(df, 0.98)"), "The interval is two-sided at 99%"),   # one-sided 99%
    (RIGHT.replace("statistics.variance(a) / len(a), statistics.variance(b) / len(b)",
                   "statistics.pvariance(a) / len(a), statistics.pvariance(b) / len(b)"), "divide by n - 1"),
    (RIGHT.replace("    gap = ma - mb\n", "    gap = ma - mb\n    va = vb = ((len(a) - 1) * statistics.variance(a) + "
                   "(len(b) - 1) * statistics.variance(b)) / (len(a) + len(b) - 2) * (1 / len(a) + 1 / len(b)) / 2\n"
                   "    df = len(a) + len(b) - 2\n"), "a pooled variance lets the"),
    (RIGHT.replace(" or abs(gap) <= margin", ""), "exceed the margin"),
    (RIGHT.replace("if len(a) < 3 or len(b) < 3:", "if len(a) < 2 or len(b) < 2:"), "Below 3 runs a side"),
    (RIGHT.replace('return "a" if gap > 0 else "b"', 'return "a"'), "return \"b\" when b's is higher"),
])
def test_planted_mistakes_are_named(capsys, mistake, named):
    answer, out = checked(exercises_verdict.verdict_rule, mistake, "my_verdict", capsys, SITTING)
    assert answer is False and named in out, out


def test_the_placeholder_is_not_answered(capsys):
    cell = "def my_verdict(a, b, margin):\n    ...\n"
    answer, out = checked(exercises_verdict.verdict_rule, cell, "my_verdict", capsys, {})
    assert answer is None and "not answered yet" in out, out
