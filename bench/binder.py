"""Does the course fit in a Binder session?  Every lesson timed and measured, with and without Binder's limits.

Builds the simulated Binder image (tools/binder_sim.py: a fresh environment from ``binder/`` alone;
``--reuse`` takes the one built before in artifacts/binder), then runs every lesson and solutions
notebook under nbval twice, side by side: on the whole machine (2 cores here), and inside a cgroup
with Binder's limits (2 GiB of memory, one CPU's time).  The two settings alternate lesson by
lesson, so that a busy moment on a shared machine falls on both.

This is the one benchmark that takes longer than a few minutes: what it measures is the whole
course, twice (about 15 minutes on 2 cores, plus the build).

Memory is the peak, sampled every 0.1 s, over every process of the lesson (pytest standing in for
the Jupyter server, the kernel, and all the ranks it starts), counted two ways: summed PSS, where a
page shared by several processes is split among them, so that it counts once; and summed RSS, where
it counts once per process.  The ranks are forked from torchrun's process and share most of
PyTorch's pages with it, so summed RSS counts PyTorch once per rank: an upper bound, not what the
lesson uses.  The cgroup's own peak (the kernel's count, page cache included) is in the table.

Goals (issue 14): every lesson under 1.5 GB (``lesson_peak_memory_gb``: summed PSS, the largest over
the lessons, under the limits; ``lesson_peak_rss_sum_gb``: the same by summed RSS); the whole course
under 6 minutes on 2 cores (``course_nbval_minutes``) and under 12 minutes with Binder's CPU quota
(``course_nbval_minutes_binder_quota``).  The per-lesson table is written to artifacts/binder/.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import binder_sim  # noqa: E402
from scripts.goals import goal  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reuse", action="store_true", help="reuse the environment built before in artifacts/binder")
    a = p.parse_args(argv)
    dest = ROOT / "artifacts" / "binder"
    env = binder_sim.reuse(dest) if a.reuse and (dest / "notes.json").exists() else binder_sim.build(dest)
    settings = {"2 cores": binder_sim.NONE, "binder limits": binder_sim.BINDER}
    rows = binder_sim.run_course(env, settings)
    with binder_sim.Confinement(binder_sim.BINDER) as box:
        enforced = box.describe()
    text = binder_sim.table(rows)
    (dest / "bench.json").write_text(json.dumps({"notes": env.notes, "enforced": enforced, "rows": rows}, indent=1))
    (dest / "bench.md").write_text(text + "\n")
    print("\n".join(f"note: {n}" for n in env.notes))
    print(f"binder limits: {enforced}")
    print(text)
    failed = [r["lesson"] for r in rows for s in settings if r[s]["returncode"] != 0]
    print(f"lessons that failed: {', '.join(failed) if failed else 'none'}")
    # one round each: the course is long, and its total is already a sum over 18 lessons
    limited = [r["binder limits"] for r in rows]
    goal("lesson_peak_memory_gb", [max(m["peak_pss_gb"] for m in limited)], "<=", 1.5)
    goal("lesson_peak_rss_sum_gb", [max(m["peak_gb"] for m in limited)], "<=", 1.5)
    goal("course_nbval_minutes", [sum(r["2 cores"]["wall_s"] for r in rows) / 60], "<=", 6)
    goal("course_nbval_minutes_binder_quota", [sum(m["wall_s"] for m in limited) / 60], "<=", 12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
