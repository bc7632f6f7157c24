"""Every lesson is a pair, notebooks/NN_name.ipynb (with outputs) and its text twin
notebooks_text/NN_name.py, and the two hold the same cells; the solutions likewise
(course/solutions/ and course/solutions_text/).  An edit on one side that was never synced fails
here with the command that syncs it.  jupytext.toml (and course/jupytext.toml) declare the pairing;
the twins live in folders of their own so that the folders a learner opens hold notebooks only
(issue 26)."""
from pathlib import Path

import jupytext
import pytest
from jupytext.config import find_jupytext_configuration_file, load_jupytext_configuration_file
from jupytext.paired_paths import paired_paths

from helpers import ROOT

NOTEBOOKS, TEXTS = Path(ROOT) / "notebooks", Path(ROOT) / "notebooks_text"
SOLUTIONS, SOLUTION_TEXTS = Path(ROOT) / "course" / "solutions", Path(ROOT) / "course" / "solutions_text"
FOLDERS = [(NOTEBOOKS, TEXTS), (SOLUTIONS, SOLUTION_TEXTS)]


def stems(notebooks: Path, texts: Path) -> list[str]:
    return sorted({p.stem for p in notebooks.glob("*.ipynb")} | {p.stem for p in texts.glob("[0-9]*.py")})


STEMS, SOLVED = stems(NOTEBOOKS, TEXTS), stems(SOLUTIONS, SOLUTION_TEXTS)


def cells(path: Path) -> list[tuple]:
    """What the pair must agree on: each cell's type, source and tags."""
    nb = jupytext.read(path)
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def test_there_are_lessons_and_their_solutions():
    assert len(STEMS) >= 6, STEMS
    assert SOLVED == STEMS, "every lesson has a solutions notebook in course/solutions/"


PAIRS = [(NOTEBOOKS / f"{s}.ipynb", TEXTS / f"{s}.py") for s in STEMS] + \
    [(SOLUTIONS / f"{s}.ipynb", SOLUTION_TEXTS / f"{s}.py") for s in SOLVED]


@pytest.mark.parametrize("notebook, text", PAIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_lesson_is_a_pair_with_the_same_cells(notebook, text):
    stem = notebook.stem
    assert text.exists() and notebook.exists(), (
        f"{stem}: only one side of the pair exists ({notebook.relative_to(ROOT)}, {text.relative_to(ROOT)}); "
        f"run `.venv/bin/jupytext --sync` on the side that exists")
    a, b = cells(text), cells(notebook)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert a == b, (f"{text.relative_to(ROOT)} and {notebook.relative_to(ROOT)} differ from cell {first} on "
                    f"({len(a)} vs {len(b)} cells): run `make notebooks` (or `.venv/bin/jupytext --sync` on the "
                    "side you edited)")


@pytest.mark.parametrize("notebook, text", PAIRS[:1] + PAIRS[len(STEMS):len(STEMS) + 1],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_jupytext_pairs_each_side_with_the_other(notebook, text):
    """What JupyterLab and `jupytext --sync` will do: the configuration nearest each file pairs it with its twin."""
    for path, twin in ((notebook, text), (text, notebook)):
        config = load_jupytext_configuration_file(find_jupytext_configuration_file(str(path.parent)))
        fmt = config.default_formats(str(path))
        assert fmt, f"no jupytext configuration pairs {path.relative_to(ROOT)}"
        paths = [Path(p).resolve() for p, _ in paired_paths(str(path), {"extension": path.suffix}, fmt)]
        assert twin.resolve() in paths, (path, paths)


@pytest.mark.parametrize("notebooks, texts", FOLDERS, ids=lambda p: p.name)
def test_the_folders_a_learner_opens_hold_notebooks_only(notebooks, texts):
    strays = sorted(p.name for p in notebooks.glob("*.py"))
    assert not strays, (f"text twins in {notebooks.relative_to(ROOT)}/: {strays}; they belong in "
                        f"{texts.relative_to(ROOT)}/ (`git mv`), where jupytext.toml pairs them")
    assert not list(texts.glob("*.ipynb")), f"notebooks in {texts.relative_to(ROOT)}/: they belong in {notebooks.name}/"
