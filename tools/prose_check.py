"""Issue 26: the lessons' prose states mechanisms and theory; measured numbers are printed by code.

A number a learner reads in a markdown cell ("53 to 45 ms", "1.04x", "about 6 GB/s", "32%") was
typed by hand from one run: the next run, or the learner's machine, prints another, and the prose
then says something its own outputs refute.  Measured numbers belong in code cells that print them
from the measurement, with their spread.  This module finds, in the markdown cells of every lesson
and solutions notebook:

* a number followed by a unit of time, size, rate, a percentage or a ratio (``ms``, ``s``, ``GB/s``,
  ``MB``, ``kB``, ``%``, ``x``, ``times``, ...), a range of them included ("53 to 45 ms");
* a fraction written as a decimal "of" something ("0.83 and 0.92 of torchrun's throughput");

except theory constants listed in ALLOWED: exact phrases, per notebook, each with its reason.
Inline code (`...`), fenced code and links' addresses are not prose and are not scanned.

It also finds markdown cells over MAX_WORDS words (a learner reads a long cell less than two short
ones).  ``python tools/prose_check.py [OUT]`` prints (or writes to OUT) every violation; the test
tests/test_lesson_prose.py fails on any.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 150

NUMBER = r"\d+(?:[.,]\d+)*"
# what may join the two ends of a range: "53 to 45 ms", "0.83 and 0.92", "2-3 s", "1.2 or 1.4x"
JOIN = r"\s*(?:to|and|or|-|–|—|/)\s*"
UNIT = (r"(?:ms|µs|us|ns|s|sec|secs|seconds?|milliseconds?|microseconds?|minutes?|mins?"
        r"|samples/s|steps/s|samples per second|[GMT]?FLOP/s"
        r"|[GMkK]i?B/s|[GMk]b/s|[GMkK]i?B|bytes/s|%|percent|times"
        # "1.04x" is a ratio; "2 x 4 ranks", "4 x P", "2 x (d + 1)" are products, arithmetic in the text
        r"|[x×](?!\s*(?:\d|\(|[A-Za-zα-ωΨ](?![A-Za-z]))))")
# a number (or a range of two) followed by a unit; the unit must end the word ("5 steps" is no "5 s")
MEASURE = re.compile(rf"(?<![\w.]){NUMBER}(?:{JOIN}{NUMBER})?\s*{UNIT}(?![\w/])")
# a decimal fraction of something: "0.83 and 0.92 of torchrun's throughput", "0.37 of the link"
FRACTION_OF = re.compile(rf"(?<![\w.])\d+\.\d+(?:{JOIN}\d+\.\d+)?\s+of\b")

# Theory constants, not measurements: (notebook path from the repository's root, exact phrase, why).
# Exact phrases only, so that a new number typed beside an allowed one is still found.
L02, L03 = "notebooks/02_horovod.ipynb", "notebooks/03_combining_gradients.ipynb"
L05, L08 = "notebooks/05_does_distributing_pay.ipynb", "notebooks/08_zero_sharding_what_every_worker_copied.ipynb"
L09, L10 = "notebooks/09_from_laptop_to_cluster.ipynb", "notebooks/10_failure_is_normal_at_scale.ipynb"
S08 = "course/solutions/08_zero_sharding_what_every_worker_copied.ipynb"
S09, S10 = "course/solutions/09_from_laptop_to_cluster.ipynb", "course/solutions/10_failure_is_normal_at_scale.ipynb"
ANY = "*"                # a phrase allowed in every notebook
ALLOWED: list[tuple[str, str, str]] = [
    ("notebooks/14_fitting_more.ipynb", "by over 90% (their", "quoted from Korthikanti et al. 2022's abstract"),
    ("notebooks/14_fitting_more.ipynb", "are 20 times the rest", "a setting: fp8_lab.outlier_activations' scale"),
    ("notebooks/14_fitting_more.ipynb", "fit an 80 GB GPU", "an 80 GB GPU's specification, the calculator's default"),
    (L02, "once per *cycle* (1 ms)", "Horovod's default HOROVOD_CYCLE_TIME, a setting"),
    (L03, "α = 5 µs, 1/β = 10 GB/s", "the exercise's hypothetical cluster, given to the learner"),
    (L08, "8 GPUs of 80 GB each", "the exercise's hypothetical machine (an 80 GB GPU's specification)"),
    (L09, "within 10% of 100", "the exercise's tolerance"),
    (L10, "takes 30 seconds to write", "the exercise's hypothetical checkpoint time"),
    (S08, "8 × 80 GB", "the exercise's hypothetical machine"),
    (S08, "16 bytes x 7e9 = 112 GB", "theory: 16 bytes per parameter (Adam, mixed precision)"),
    (S08, "(2 + 2 bytes, 28 GB)", "theory: the exercise's arithmetic"),
    (S08, "eight ways (10.5 GB): 38.5 GB", "theory: the exercise's arithmetic"),
    (S09, "within 10% of 100", "the exercise's tolerance"),
    ("notebooks/05b_more_data.ipynb", "from 1.6% test error to 0.7% (affine ones: 1.1%); their CNN reached 0.6% "
     "with affine and 0.4% with elastic distortions", "literature: Simard, Steinkraus and Platt 2003, Table 1"),
    ("notebooks/01_data_parallelism.ipynb", "(the first 1 MiB, then 25 MiB each)",
     "PyTorch's DDP defaults (first bucket, bucket_cap_mb)"),
    # the verdict rule's own constants (distlab/verdict.py), in every notebook
    (ANY, "99% confidence interval", "the rule's confidence, a setting"),
    (ANY, "99% interval", "the rule's confidence, a setting"),
    (ANY, "Student's t at 99%", "the rule's confidence, a setting"),
    (ANY, "2% of the larger mean", "the rule's margin, a setting"),
]


def _prose(source: str) -> str:
    """The text a learner reads as prose: fenced code, inline code and links' addresses removed."""
    source = re.sub(r"```.*?```", " ", source, flags=re.S)
    source = re.sub(r"`[^`]*`", " ", source)
    source = re.sub(r"\]\([^)]*\)", "]", source)            # [text](address): keep the text
    source = re.sub(r"<[^>]+>", " ", source)                 # html tags (img src=..., width=...)
    return " ".join(source.split())                          # one space between words: phrases match across lines


def measured_quantities(source: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """The hand-typed measured quantities in one markdown cell's source, each as a short excerpt.

    ``allowed``: exact phrases (theory constants) removed from the text before it is scanned."""
    text = _prose(source)
    for phrase in allowed:
        text = text.replace(phrase, " ")
    found = []
    for pattern in (MEASURE, FRACTION_OF):
        for m in pattern.finditer(text):
            start, end = max(0, m.start() - 40), min(len(text), m.end() + 25)
            found.append(f"{m.group(0)!r} in \"...{' '.join(text[start:end].split())}...\"")
    return found


def words(source: str) -> int:
    """Words a learner reads in a markdown cell: its text without markup, links' addresses and html."""
    text = re.sub(r"[#*_|>`\-]+", " ", _prose(source))
    return len(re.findall(r"\w[\w'.,:/()-]*", text))


def lessons() -> list[Path]:
    """Every lesson and solutions notebook, lessons first."""
    return sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("course/solutions/*.ipynb"))


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    """(0-based cell index, source) of each markdown cell of a stored notebook."""
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def allowed_for(path: Path) -> tuple[str, ...]:
    name = path.relative_to(ROOT).as_posix()
    # longer phrases first: "99% confidence interval" before "99% interval"
    return tuple(sorted((phrase for where, phrase, _ in ALLOWED if where in (name, ANY)), key=len, reverse=True))


def violations(paths: list[Path] | None = None) -> tuple[list[str], list[str]]:
    """(typed measurements, long cells), one line each, naming the notebook and its cell."""
    typed, long = [], []
    for path in paths if paths is not None else lessons():
        name = path.relative_to(ROOT).as_posix()
        for i, source in markdown_cells(path):
            typed += [f"{name} c{i}: {hit}" for hit in measured_quantities(source, allowed_for(path))]
            n = words(source)
            if n > MAX_WORDS:
                long.append(f"{name} c{i}: {n} words (at most {MAX_WORDS}): \"{' '.join(source.split()[:8])} ...\"")
    return typed, long


def unused_allowances(paths: list[Path] | None = None) -> list[str]:
    """Allow-list entries whose phrase no longer appears in their notebook's prose (stale: remove them)."""
    texts = {p.relative_to(ROOT).as_posix(): "\n".join(_prose(s) for _, s in markdown_cells(p))
             for p in (paths if paths is not None else lessons())}
    return [f"{where}: {phrase!r}" for where, phrase, _ in ALLOWED
            if where in texts and phrase not in texts[where]]


def main(argv: list[str]) -> int:
    typed, long = violations()
    stale = unused_allowances()
    report = (["# measured quantities typed into markdown (print them from code, or say 'the cell below prints')"]
              + typed + ["", f"# markdown cells over {MAX_WORDS} words (split them)"] + long
              + ["", "# allow-list entries no longer found (remove them from tools/prose_check.py)"] + stale)
    text = "\n".join(report) + "\n"
    if len(argv) > 1:
        Path(argv[1]).write_text(text)
    else:
        sys.stdout.write(text)
    print(f"{len(typed)} typed measurements, {len(long)} long cells, {len(stale)} stale allowances", file=sys.stderr)
    return 1 if typed or long else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
