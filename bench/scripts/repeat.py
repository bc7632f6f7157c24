"""Does a benchmark repeat?  Run it twice in a row and compare every GOAL figure.

    .venv/bin/python bench/scripts/repeat.py bench/collectives.py [args...]

A GOAL measured once says little if the next run of the same benchmark, on the same machine,
lands somewhere else.  This runs the benchmark twice, one run right after the other, reads
the ``GOAL <name> <value> ...`` lines of both and prints, per goal, the two values and how far
apart they are: ``|a - b| / min(a, b)``, the larger of the two relative differences (a first
run of 1.00 and a second of 1.05 differ by 5%).  Two runs *agree* when that is at most
``--within`` (5% by default).  The last line counts the goals that agreed:

    REPEAT <benchmark> <agreeing>/<goals> within ±5%

and the exit status is 0 either way, like the benchmarks themselves.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def goals(output: str) -> dict[str, float]:
    """{goal name: measured value} from a benchmark's printed ``GOAL`` lines."""
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "GOAL":
            found[parts[1]] = float(parts[2])
    return found


def difference(a: float, b: float) -> float:
    """|a - b| over the smaller magnitude: how far apart two runs of one figure are."""
    if a == b:
        return 0.0
    small = min(abs(a), abs(b))
    return abs(a - b) / small if small else float("inf")


def run_once(command: list[str], label: str) -> dict[str, float]:
    t0 = time.time()
    out = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stdout.write(out.stderr[-3000:])
        raise SystemExit(f"{label} exited with {out.returncode}")
    print(f"== {label}: {time.time() - t0:.0f} s", flush=True)
    return goals(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", help="a benchmark script, e.g. bench/collectives.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    parser.add_argument("--within", type=float, default=0.05, help="agreement, as a fraction (0.05)")
    opts = parser.parse_args()
    command = [sys.executable, opts.benchmark, *opts.args]
    first = run_once(command, "run 1")
    second = run_once(command, "run 2")
    if not first or set(first) != set(second):
        raise SystemExit(f"the two runs printed different goals: {sorted(first)} vs {sorted(second)}")
    agreed = 0
    for name in first:
        d = difference(first[name], second[name])
        agreed += d <= opts.within
        print(f"repeat {name}: {first[name]:.4g} then {second[name]:.4g}, {d:.1%} apart "
              f"({'agree' if d <= opts.within else 'DISAGREE'})")
    print(f"REPEAT {os.path.basename(opts.benchmark)} {agreed}/{len(first)} within ±{opts.within:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
