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


# -- bench/gpu_check.py: the check for the day a GPU machine is lent (issue 27) -------------------
GPU_CHECK = os.path.join(BENCH, "gpu_check.py")


def run_gpu_check(*args, timeout=300):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")     # no GPU, even on a machine that has one
    return subprocess.run([sys.executable, GPU_CHECK, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_gpu_check_without_a_gpu_says_so_in_one_line_and_exits_0():
    done = run_gpu_check()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.strip()]
    assert done.stdout.startswith("gpu_check: no CUDA GPU here") and "nothing checked" in done.stdout


def test_gpu_check_prints_a_miss_for_what_it_did_not_run():
    done = run_gpu_check("--device", "cpu", "--only", "data,tensor", "--budget", "0")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:3] == [f"GOAL {s}_max_diff nan <= 1e-05 MISS (not run: the check's budget of 0 s was spent)"
                          for s in ("data", "tensor")]
    assert lines[-1].startswith("gpu_check: 0 PASS, 2 MISS, 0 SKIP in ")
    assert repeat.goals(done.stdout).keys() == {"data_max_diff", "tensor_max_diff"}


def test_gpu_check_on_cpu_compares_a_strategy_with_one_process():
    """The whole path of one strategy (child process, launch, the reference, the GOAL line) on gloo."""
    done = run_gpu_check("--device", "cpu", "--only", "data")
    assert done.returncode == 0, done.stderr
    goal = [line for line in done.stdout.splitlines() if line.startswith("GOAL")]
    assert len(goal) == 1 and goal[0].startswith("GOAL data_max_diff "), done.stdout
    assert goal[0].split()[3:6] == ["<=", "1e-05", "PASS"], done.stdout
    assert "(2 rank(s), 10 steps, 8970 parameters, over gloo)" in goal[0]
    assert done.stdout.splitlines()[-1].startswith("gpu_check: 1 PASS, 0 MISS, 0 SKIP in ")
