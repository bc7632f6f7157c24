"""Issue 37: the stored course is one sitting, and lesson 11 quotes it exactly.

Every ``remember`` leaves the values it kept in its cell's output (a JSON part, ``results.MIMETYPE``), and
lesson 11 leaves the values it read.  So the stored notebooks themselves show whether lesson 11's numbers
are the earlier lessons' numbers, from the same sitting; nbval cannot, because those cells' outputs are
ignored (they hold timings).  The sitting mechanism itself is checked on a scratch results file."""
import json

import pytest

from pathlib import Path

from helpers import ROOT as _ROOT
from distlab.course import results

ROOT = Path(_ROOT)
SETS = {"lessons": ROOT / "notebooks"}    # the solutions are a sitting of their own (tools/run_course.py)


def kept_in(path) -> list[dict]:
    """The results parts of a stored notebook's outputs, in order (with the sitting, kept in the output's metadata)."""
    nb = json.loads(path.read_text())
    return [{**out["data"][results.MIMETYPE], **out.get("metadata", {}).get(results.MIMETYPE, {})}
            for cell in nb["cells"] if cell["cell_type"] == "code"
            for out in cell.get("outputs", []) if results.MIMETYPE in out.get("data", {})]


@pytest.mark.parametrize("which", SETS)
def test_lesson_11_quotes_the_stored_lessons_of_its_own_sitting(which):
    folder = SETS[which]
    read = [part for part in kept_in(next(folder.glob("11_*.ipynb"))) if part["lesson"] == "11 reads"]
    assert len(read) == 1, "lesson 11 must read this sitting's results once (course_results.this_sitting())"
    sitting, quoted = read[0]["sitting"], read[0]["values"]
    assert set(quoted) >= {"01", "04", "05", "08", "10"}, f"lesson 11 read only {sorted(quoted)}"
    for lesson, values in quoted.items():
        stored = {}
        for part in kept_in(next(folder.glob(f"{lesson}_*.ipynb"))):
            assert part["sitting"] == sitting, (f"{which}: lesson {lesson} was stored in sitting {part['sitting']}, "
                                                f"lesson 11 in {sitting}: re-run the course (tools/run_course.py)")
            stored.update(part["values"])
        assert stored == values, f"{which}: lesson 11 quotes values of lesson {lesson} its stored output does not show"


def test_a_sitting_keeps_its_own_results_and_names_the_others(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DISTLAB_RESULTS", str(tmp_path / "results.json"))
    monkeypatch.delenv("DISTLAB_SITTING", raising=False)
    results.remember("05", speedup=1.5)
    first = results.sitting()
    assert results.recall("05")["speedup"] == 1.5
    results.new_sitting()
    assert results.sitting() != first
    assert results.recall("05") is None
    assert "another sitting" in capsys.readouterr().out and results.this_sitting() == {}
    results.remember("05", other=2)                       # a new sitting's entry starts afresh
    assert results.recall("05") == {**results.recall("05"), "other": 2} and "speedup" not in results.recall("05")


def test_an_execution_of_the_course_names_its_sitting(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTLAB_RESULTS", str(tmp_path / "results.json"))
    monkeypatch.setenv("DISTLAB_SITTING", "2026-12-03 21:00:00-abcd")
    results.remember("01", world_size=2)
    assert results.this_sitting()["01"]["sitting"] == "2026-12-03 21:00:00-abcd"
