"""Every lesson is a pair, notebooks/NN_name.py (text) and notebooks/NN_name.ipynb (with outputs),
and the two hold the same cells.  An edit on one side that was never synced fails here with the
command that syncs it (jupytext.toml at the repository's root declares the pairing)."""
from pathlib import Path

import jupytext
import pytest

from helpers import ROOT

NOTEBOOKS = Path(ROOT) / "notebooks"
SOLUTIONS = Path(ROOT) / "course" / "solutions"
STEMS = sorted({p.stem for p in NOTEBOOKS.glob("*.ipynb")} | {p.stem for p in NOTEBOOKS.glob("[0-9]*.py")})
SOLVED = sorted({p.stem for p in SOLUTIONS.glob("*.ipynb")} | {p.stem for p in SOLUTIONS.glob("[0-9]*.py")})


def cells(path: Path) -> list[tuple]:
    """What the pair must agree on: each cell's type, source and tags."""
    nb = jupytext.read(path)
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def test_there_are_lessons_and_their_solutions():
    assert len(STEMS) >= 6, STEMS
    assert SOLVED == STEMS, "every lesson has a solutions notebook in course/solutions/"


PAIRS = [NOTEBOOKS / stem for stem in STEMS] + [SOLUTIONS / stem for stem in SOLVED]


@pytest.mark.parametrize("path", PAIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_lesson_is_a_pair_with_the_same_cells(path):
    stem, text, notebook = path.name, path.with_suffix(".py"), path.with_suffix(".ipynb")
    assert text.exists() and notebook.exists(), (
        f"{stem}: only one side of the pair exists; run `.venv/bin/jupytext --sync {path}.*`")
    a, b = cells(text), cells(notebook)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert a == b, (f"{stem}.py and {stem}.ipynb differ from cell {first} on ({len(a)} vs {len(b)} cells): "
                    "run `make notebooks` (or `.venv/bin/jupytext --sync` on the side you edited)")


def test_the_pairing_is_declared_for_jupyterlab():
    config = (Path(ROOT) / "jupytext.toml").read_text()
    assert 'formats = "ipynb,py:percent"' in config
