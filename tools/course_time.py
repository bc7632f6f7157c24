"""Issue 26: how long the course takes, computed from the stored lessons, not guessed.

For every lesson (notebooks/NN_*.ipynb) and its solutions notebook:

* reading time: the words a learner reads at READING_SPEED words a minute: its markdown cells'
  (links' addresses and html tags are not read; inline code is), and its code cells' and their stored
  text outputs' (a lesson is read with its code and what the code printed, not its prose alone);
* run time: the sum, over its code cells, of the time each took when the notebook was last executed
  (``make notebooks``).  nbconvert's executor stores it in each code cell's metadata:
  ``execution["iopub.status.busy"]`` (the kernel started the cell) to
  ``execution["iopub.status.idle"]`` (it finished, outputs sent).  jupytext's pairing keeps them
  (jupytext.toml filters only the text twin's metadata).  The kernel's start is not counted; a code
  cell with no timestamps (edited or added after the last execution) counts as not timed, and the
  table says how many.

``python tools/course_time.py`` rewrites the table between the markers in course/README.md;
``--check`` exits 1 (and prints the table) when the README's table is not what the stored lessons
give.  tests/test_course_time.py runs the check.
"""
import json
import re
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "course" / "README.md"
READING_SPEED = 180                                   # words a minute
CORE = ("00", "01", "02", "03", "04", "05", "05b", "11")     # the core path (course/README.md, "The path")
BEGIN = "<!-- course_time.py: table begin (generated: python tools/course_time.py) -->"
END = "<!-- course_time.py: table end -->"


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def reading_words(markdown: str) -> int:
    """Words a learner reads in markdown: links' addresses and html tags left out, inline code counted."""
    text = re.sub(r"\]\([^)]*\)", "]", markdown)
    text = re.sub(r"<[^>]+>", " ", text)
    return sum(1 for token in text.split() if re.search(r"\w", token))


PICTURES = {"image/png", "application/vnd.jupyter.widget-view+json"}     # their text/plain is a placeholder


def _output_text(cell) -> str:
    """What a code cell printed, as stored: streams, results and errors (text only; pictures are looked at)."""
    out = []
    for o in cell.get("outputs", []):
        if "text" in o:
            out.append(o["text"] if isinstance(o["text"], str) else "".join(o["text"]))
        elif "text/plain" in o.get("data", {}) and not PICTURES & set(o["data"]):
            plain = o["data"]["text/plain"]
            out.append(plain if isinstance(plain, str) else "".join(plain))
        elif "evalue" in o:
            out.append(o["evalue"])
    return "\n".join(out)


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def measure(path: Path) -> dict:
    """Words (prose; code and outputs), run seconds, timed/untimed code cells and the day it ran, for one
    stored notebook."""
    cells = json.loads(path.read_text())["cells"]
    words = sum(reading_words(_source(c)) for c in cells if c["cell_type"] == "markdown")
    code_words = sum(reading_words(_source(c)) + reading_words(_output_text(c)) for c in cells
                     if c["cell_type"] == "code")
    seconds, timed, untimed, days = 0.0, 0, 0, set()
    for c in cells:
        if c["cell_type"] != "code" or not _source(c).strip():
            continue
        stamps = c.get("metadata", {}).get("execution", {})
        if "iopub.status.busy" in stamps and "iopub.status.idle" in stamps:
            start, end = _when(stamps["iopub.status.busy"]), _when(stamps["iopub.status.idle"])
            seconds += (end - start).total_seconds()
            timed += 1
            days.add(start.date().isoformat())
        else:
            untimed += 1
    return {"words": words, "code_words": code_words, "seconds": seconds, "timed": timed, "untimed": untimed,
            "days": sorted(days)}


def lessons() -> list[tuple[str, Path, Path]]:
    """(number, lesson, solutions) for every lesson."""
    out = []
    for lesson in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")):      # 05b sorts after 05
        out.append((lesson.name.split("_")[0], lesson, ROOT / "course" / "solutions" / lesson.name))
    return out


def _minutes(words: int) -> str:
    return f"{words / READING_SPEED:.0f}"


def _row(label: str, m: dict, s: dict) -> str:
    note = f" ({m['untimed']} not timed)" if m["untimed"] else ""
    return (f"| {label} | {m['words']:,} | {m['code_words']:,} | {_minutes(m['words'] + m['code_words'])} "
            f"| {m['seconds']:.0f}{note} "
            f"| {s['words']:,} | {s['seconds']:.0f}{' (' + str(s['untimed']) + ' not timed)' if s['untimed'] else ''} "
            f"| {', '.join(m['days']) or '-'} |")


def _add(a: dict, b: dict) -> dict:
    return {"words": a["words"] + b["words"], "code_words": a["code_words"] + b["code_words"],
            "seconds": a["seconds"] + b["seconds"],
            "timed": a["timed"] + b["timed"], "untimed": a["untimed"] + b["untimed"],
            "days": sorted(set(a["days"]) | set(b["days"]))}


def table() -> str:
    """The markdown table (with its markers) that course/README.md must hold."""
    zero = {"words": 0, "code_words": 0, "seconds": 0.0, "timed": 0, "untimed": 0, "days": []}
    rows, core, core_s, total, total_s = [], dict(zero), dict(zero), dict(zero), dict(zero)
    for number, lesson, solution in lessons():
        m = measure(lesson)
        s = measure(solution) if solution.exists() else dict(zero)
        rows.append(_row(number, m, s))
        total, total_s = _add(total, m), _add(total_s, s)
        if number in CORE:
            core, core_s = _add(core, m), _add(core_s, s)
    lines = [BEGIN,
             f"| Lesson | prose words | code and output words | reading (min, at {READING_SPEED} words a minute) "
             "| run (s, measured) | solutions: prose words | solutions: run (s) | executed on |",
             "|---|---|---|---|---|---|---|---|", *rows,
             _row("**core path** (" + ", ".join(CORE) + ")", core, core_s),
             _row("**all lessons**", total, total_s),
             "",
             f"Reading: the words of the lesson's markdown cells, of its code cells and of the text they printed "
             f"(as stored), at {READING_SPEED} a minute; code is often read slower, pictures and widgets take "
             "time of their own, so take it as a floor. Run: the sum of "
             "its code cells' times as the last `make notebooks` stored them (each cell's execution "
             "timestamps), on the machine that ran it, without the kernel's start; Binder's single "
             "shared core is slower. Exercises come on top. Regenerate: `python tools/course_time.py`.",
             END]
    return "\n".join(lines)


def rewrite(text: str, new_table: str) -> str:
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"{README}: the table's markers are missing or repeated; put these two lines where "
                         f"the table goes:\n{BEGIN}\n{END}")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + new_table + text[end:]


def main(argv: list[str]) -> int:
    text, new = README.read_text(), table()
    updated = rewrite(text, new)
    if "--check" in argv:
        if updated != text:
            print(f"{README.relative_to(ROOT)}'s course-time table is not what the stored lessons give; "
                  f"run `python tools/course_time.py`. It should read:\n{new}")
            return 1
        return 0
    README.write_text(updated)
    print(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
