"""Execute the stored course in one sitting, in order (issue 37; lesson 11 quotes only one sitting).

    python tools/run_course.py                 # every lesson, then every solution
    python tools/run_course.py notebooks/05b_more_data.ipynb ...   # only these, in the order given

Lessons, then solutions, are one sitting with a fresh results file: lesson 11 (and its solution) read
what lessons 01-10 kept a few minutes earlier, never a run from another day.  Each
notebook is synced with its text twin first and after (jupytext), then executed in place (nbconvert).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(paths: list[str]) -> None:
    py = sys.executable
    name = time.strftime("%Y-%m-%d %H:%M:%S") + "-" + os.urandom(2).hex()
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "DISTLAB_SITTING": name, "DISTLAB_RESULTS": os.path.join(scratch, "results.json")}
        print(f"sitting {name}: {len(paths)} notebooks", flush=True)
        for path in paths:
            t0 = time.time()
            subprocess.run([py, "-m", "jupytext", "--sync", path], check=True, cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL)
            subprocess.run([py, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                            "--ExecutePreprocessor.timeout=600", path], check=True, cwd=ROOT, env=env,
                           stderr=subprocess.DEVNULL)
            subprocess.run([py, "-m", "jupytext", "--sync", path], check=True, cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL)
            print(f"  {path}: {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    given = sys.argv[1:]
    if given:
        run(given)
    else:
        run(sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
            + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "course" / "solutions").glob("*.ipynb")))
