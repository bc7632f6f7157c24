"""Issue 26: course/README.md states the course's reading and run time as computed from the stored
lessons (tools/course_time.py), not as a guess; re-executing or rewriting a lesson without
regenerating the table fails here."""
import json
import sys
from pathlib import Path

import nbformat
import pytest

from helpers import ROOT

sys.path.insert(0, str(Path(ROOT) / "tools"))
import course_time  # noqa: E402


def test_the_readme_table_is_what_the_stored_lessons_give():
    text = course_time.README.read_text()
    assert course_time.rewrite(text, course_time.table()) == text, (
        "course/README.md's table of reading and run times is out of date: run "
        "`.venv/bin/python tools/course_time.py` (after `make notebooks`)")


def test_the_table_covers_every_lesson_and_the_core_path():
    table = course_time.table()
    for number, lesson, _ in course_time.lessons():
        assert f"\n| {number} |" in table, lesson
    assert "**core path**" in table and "**all lessons**" in table


def _notebook(tmp_path, cells) -> Path:
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / "00_x.ipynb"
    path.write_text(nbformat.writes(nb))
    return path


def test_run_time_is_the_sum_of_the_cells_stored_timestamps(tmp_path):
    def timed(start, end):
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["execution"] = {"iopub.status.busy": f"2026-12-01T03:13:{start:02d}.000000Z",
                                      "iopub.execute_input": f"2026-12-01T03:13:{start:02d}.100000Z",
                                      "shell.execute_reply": f"2026-12-01T03:13:{end:02d}.000000Z",
                                      "iopub.status.idle": f"2026-12-01T03:13:{end:02d}.000000Z"}
        return cell
    path = _notebook(tmp_path, [nbformat.v4.new_markdown_cell("One two [three](https://a.b/c) `four` <b>five</b>"),
                                timed(0, 2), timed(10, 13), nbformat.v4.new_code_cell("y = 2"),
                                nbformat.v4.new_code_cell("")])
    m = course_time.measure(path)
    assert m["words"] == 5                   # the link's address and the html tag are not read
    assert m["seconds"] == pytest.approx(5.0)   # 2 s + 3 s: the gap between cells is not a cell's time
    assert (m["timed"], m["untimed"], m["days"]) == (2, 1, ["2026-12-01"])
    assert m["code_words"] == 6              # x = 1, x = 1, y = 2: the code is read too


def test_reading_counts_the_code_and_what_it_printed(tmp_path):
    """Issue 37: a lesson is read with its code and its outputs; counting its prose alone halved the time."""
    cell = nbformat.v4.new_code_cell("print('two words')")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="two words\n"),
                    nbformat.v4.new_output("display_data", data={"image/png": "", "text/plain": "<Figure size 10x10>"})]
    m = course_time.measure(_notebook(tmp_path, [nbformat.v4.new_markdown_cell("one"), cell]))
    assert (m["words"], m["code_words"]) == (1, 4)     # the picture's placeholder text is not read


def test_the_stored_lessons_keep_their_timestamps():
    """nbconvert stores them and jupytext's sync keeps them: a lesson with none was never executed."""
    for number, lesson, _ in course_time.lessons():
        assert course_time.measure(lesson)["timed"] > 0, f"{lesson.name} stores no execution times: run make notebooks"
    nb = json.loads(course_time.lessons()[0][1].read_text())
    assert any("execution" in c.get("metadata", {}) for c in nb["cells"])


def test_missing_markers_are_a_clear_error():
    with pytest.raises(SystemExit, match="markers"):
        course_time.rewrite("no table here", course_time.table())
