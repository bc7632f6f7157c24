"""Issue 25: the browser's Run All is also the suite's nbval check (tests/browser/stored_outputs.py).

The comparison must find what nbval finds, and only that: a changed printed fact in a compared cell,
a missing output; not a timing in a cell tagged ``nbval-ignore-output``, nor a stream JupyterLab
split in two where nbval merges them."""
import copy
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "browser"))

from stored_outputs import compared, differences  # noqa: E402

LESSON = ROOT / "notebooks" / "01_data_parallelism.ipynb"


@pytest.fixture
def stored():
    return nbformat.read(LESSON, as_version=4)


def first_cell(nb, want_compared: bool, with_stream: bool = True):
    for cell in nb.cells:
        if cell.cell_type == "code" and compared(cell) == want_compared and any(
                o.output_type == "stream" for o in cell.outputs) == with_stream:
            return cell
    raise AssertionError("the lesson has no such cell")


def test_every_lesson_equals_itself():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert differences(nb, copy.deepcopy(nb)) == [], path.name
        assert any(compared(c) and c.outputs for c in nb.cells if c.cell_type == "code"), (
            f"{path.name}: no compared cell has an output, the comparison would check nothing")


def test_a_changed_fact_in_a_compared_cell_is_found(stored):
    run = copy.deepcopy(stored)
    cell = first_cell(run, want_compared=True)
    stream = next(o for o in cell.outputs if o.output_type == "stream")
    stream.text = stream.text + "one more line\n"
    found = differences(stored, run)
    assert len(found) == 1 and "'stdout' differs" in found[0] and "one more line" in found[0]


def test_a_missing_output_is_found(stored):
    run = copy.deepcopy(stored)
    first_cell(run, want_compared=True).outputs = []
    assert differences(stored, run)


def test_an_ignored_cell_may_print_anything(stored):
    run = copy.deepcopy(stored)
    cell = first_cell(run, want_compared=False)
    next(o for o in cell.outputs if o.output_type == "stream").text = "0.123 s, another machine\n"
    assert differences(stored, run) == []


def test_a_stream_split_in_two_is_the_same_stream(stored):
    run = copy.deepcopy(stored)
    cell = first_cell(run, want_compared=True)
    k, stream = next((k, o) for k, o in enumerate(cell.outputs) if o.output_type == "stream")
    cut = len(stream.text) // 2
    second = copy.deepcopy(stream)
    stream.text, second.text = stream.text[:cut], stream.text[cut:]
    cell.outputs.insert(k + 1, second)
    assert differences(stored, run) == []
