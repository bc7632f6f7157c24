"""The course as a whole (course/README.md): every question of the original material is on the
concept map, and every link in the course's pages points at a notebook section or file that exists."""
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "course"
# the questions of Azure ML's module on distributed training that the course must answer by measuring
QUESTIONS = ["Data parallelism against model parallelism", "Multi-GPU against multi-node",
             "Data partitions and mini-batches", "Per-worker gradients averaged into one global update",
             "Parameter server against all-reduce", "Synchronisation", "Horovod", "DeepSpeed, ZeRO and 3D parallelism",
             "Speedup and overhead", "The drawbacks and the advantages of distributed training", "Monitoring a job",
             "What a job's configuration file is for", "Moving to a cluster or a cloud"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(notebook: Path) -> set[str]:
    """The anchors JupyterLab gives the notebook's markdown headings: the text, spaces as dashes."""
    found = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if (m := re.match(r"^#{1,6}\s+(.*\S)\s*$", line)):
                    found.add(m.group(1).replace(" ", "-"))
    return found


def concept_map() -> list[str]:
    text = (COURSE / "README.md").read_text()
    section = text.split("## Concept map", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Question")]


def test_every_question_of_the_original_material_is_on_the_map_with_a_place_to_measure_it():
    rows = concept_map()
    for question in QUESTIONS:
        row = [r for r in rows if r.startswith(f"| {question}")]
        assert row, f"the concept map has no row for {question!r}"
        assert LINK.search(row[0]), f"{question!r} does not link to the section where it is measured"


@pytest.mark.parametrize("page", sorted(p.relative_to(ROOT).as_posix() for p in COURSE.rglob("*.md")))
def test_every_link_points_at_something_that_exists(page):
    path = ROOT / page
    links = [t for t in LINK.findall(path.read_text()) if not t.startswith(("http://", "https://", "mailto:"))]
    for target in links:
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        assert where.exists(), f"{page} links to {target}: no such file"
        if anchor and where.suffix == ".ipynb":
            assert anchor in headings(where), (f"{page} links to {target}: {where.name} has no section "
                                               f"{anchor.replace('-', ' ')!r}")


LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))   # 05b (issue 37) sorts after 05


@pytest.mark.parametrize("index", range(len(LESSONS)), ids=[p.stem for p in LESSONS])
def test_every_lesson_ends_with_links_to_the_lessons_before_and_after_it(index):
    last = [c for c in nbformat.read(LESSONS[index], as_version=4).cells if c.cell_type == "markdown"][-1].source
    targets = LINK.findall(last)
    expected = [LESSONS[i].name for i in (index - 1, index + 1) if 0 <= i < len(LESSONS)] + ["../course/README.md"]
    assert targets == expected, f"{LESSONS[index].name}'s last cell links to {targets}, not {expected}"
    for target in targets:
        assert (LESSONS[index].parent / target).exists()


STRUCTURED = [p for p in LESSONS if p.stem != "11_knowledge_check"]


@pytest.mark.parametrize("lesson", STRUCTURED, ids=[p.stem for p in STRUCTURED])
def test_every_lesson_has_the_course_structure(lesson):
    """Goal, predict, run and look, explain, exercise: the same parts in every lesson (lesson 11 is
    the knowledge check itself, not the last lesson any more: lesson 12 follows it).  Exercises sit
    where they fit, each ending in a checker call."""
    cells = nbformat.read(lesson, as_version=4).cells
    first = cells[0].source
    assert first.startswith("# ") and ("Goal" in first or "goal" in first), f"{lesson.name}: no goal at the top"
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown").lower()
    assert "predict" in text, f"{lesson.name}: never asks the learner to predict before measuring"
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert "distlab.launch(" in code or "run.start(" in code or "launch(" in code, f"{lesson.name}: runs nothing"
    assert re.search(r"exercises(_\w+)?\.\w+\(", code), f"{lesson.name}: no checked exercise"
    assert any(o for c in cells if c.cell_type == "code" for o in c.get("outputs", [])), \
        f"{lesson.name}: no recorded output to look at"
