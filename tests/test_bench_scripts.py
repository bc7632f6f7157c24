"""The helpers every benchmark ends with (bench/scripts/goals.py and repeat.py).

Not the benchmarks themselves (they time things, and take minutes): how their results are
summarised and compared, which must be right for a GOAL line to mean anything.
"""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

from scripts import goals, repeat  # noqa: E402


def test_goal_takes_the_median_and_prints_the_spread(capsys):
    assert goals.goal("x", [1.0, 3.0, 2.0], ">=", 1.9) is True
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "x: median of 3 rounds 2, rounds 1 to 3 (spread ±50.0%)"
    assert out[1] == "GOAL x 2 >= 1.9 PASS"


@pytest.mark.parametrize("op,target,ok", [("<=", 1.5, False), ("<=", 2.5, True), (">", 2.0, False), (">", 1.9, True),
                                          ("within", (0.75, 1.25), False), ("within", (1.5, 2.5), True)])
def test_goal_ops(capsys, op, target, ok):
    assert goals.goal("y", [2.0, 2.0], op, target) is ok
    assert capsys.readouterr().out.splitlines()[-1].endswith("PASS" if ok else "MISS")


def test_repeat_reads_goal_lines_and_compares_them():
    out = "noise\nGOAL a 1.00 >= 0.9 PASS\nGOAL b 2.5e-3 <= 0.1 PASS\nREPORT c 3\n"
    assert repeat.goals(out) == {"a": 1.0, "b": 0.0025}
    assert repeat.difference(1.0, 1.05) == pytest.approx(0.05)
    assert repeat.difference(1.05, 1.0) == pytest.approx(0.05)
    assert repeat.difference(0.0, 0.0) == 0.0


def test_repeat_runs_a_benchmark_twice(tmp_path):
    fake = tmp_path / "fake_bench.py"
    fake.write_text("import os, sys\n"
                    "path = sys.argv[1]\n"
                    "n = int(open(path).read()) if os.path.exists(path) else 0\n"
                    "open(path, 'w').write(str(n + 1))\n"
                    "print('GOAL steady 1.0 >= 0.5 PASS')\n"
                    "print(f'GOAL drifting {1.0 + 0.2 * n} >= 0.5 PASS')\n")
    out = subprocess.run([sys.executable, os.path.join(BENCH, "scripts", "repeat.py"), str(fake),
                          str(tmp_path / "count")], capture_output=True, text=True, check=True).stdout
    assert "repeat steady: 1 then 1, 0.0% apart (agree)" in out
    assert "repeat drifting: 1 then 1.2, 20.0% apart (DISAGREE)" in out
    assert out.splitlines()[-1] == "REPEAT fake_bench.py 1/2 within ±5%"
