"""Issue 37: distlab.course.build runs a function typed in a notebook cell on real ranks."""
import ast
import linecache
from pathlib import Path

import pytest

from distlab.course import build


def solution_cell(solution: str, name: str) -> str:
    """The text of function ``name`` as the course's solution ``solution`` (its text twin) defines it,
    with the imports at the top of that file: a test checks the stored solution, not a copy of it."""
    path = Path(__file__).resolve().parents[1] / "course" / "solutions_text" / f"{solution}.py"
    text = path.read_text()
    tree = ast.parse(text)
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    found = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return "\n".join(imports) + "\n\n\n" + ast.get_source_segment(text, found) + "\n"


def checked(checker, text: str, name: str, capsys, *args, **kwargs):
    """A checker's answer on function ``name`` of a cell's ``text``, and what it printed."""
    capsys.readouterr()
    answer = checker(from_cell(text, name), *args, **kwargs)
    return answer, capsys.readouterr().out


def from_cell(text: str, name: str):
    """A function as a notebook cell defines it: in __main__-like globals, its text in linecache."""
    filename = f"<ipython-input-{abs(hash(text))}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(text, filename, "exec"), namespace)
    return namespace[name]


SUM_RANKS = '''
def total(worker, scale):
    t = torch.tensor([float(worker.rank + 1)])
    dist.all_reduce(t)
    return scale * t.item()
'''


def test_a_cell_function_runs_on_real_ranks():
    fn = from_cell(SUM_RANKS, "total")
    assert build.run(fn, "distlab.course.build:call", world_size=2, scale=10.0) == [30.0, 30.0]


def test_placeholders_are_recognised():
    assert build.placeholder(...)
    assert build.placeholder(from_cell('def f(model, worker):\n    """Average."""\n    ...\n', "f"))
    assert not build.placeholder(from_cell(SUM_RANKS, "total"))


def test_what_the_ranks_cannot_rebuild_is_refused_before_any_process():
    with pytest.raises(build.NotBuildable, match="uses np from outside"):
        build.source_of(from_cell("def f(x):\n    return np.ones(x)\n", "f"))
    with pytest.raises(build.NotBuildable, match="lambda"):
        build.source_of(lambda x: x)
    k = 3

    def nested(x):
        return x * k
    with pytest.raises(build.NotBuildable, match="inside another function"):
        build.source_of(nested)
    # imports inside the function, the provided names and builtins are fine
    text = build.source_of(from_cell("def g(x):\n    import numpy as np\n    return len(np.ones(x)) + "
                                     "torch.ones(1).item() + math.pi\n", "g"))
    assert build.rebuild(text, "g")(2) == pytest.approx(3 + 3.141592653589793)


def test_an_error_on_a_rank_shows_the_learners_line(capsys):
    fn = from_cell("def broken(worker):\n    x = torch.ones(2)\n    return x @ torch.ones(3)\n", "broken")
    assert build.attempt("Exercise", fn, "distlab.course.build:call", world_size=2, warm=False) is False
    said = capsys.readouterr().out
    assert "your broken failed on rank" in said and "return x @ torch.ones(3)" in said, said
    assert build.attempt("Exercise", lambda w: 1, "distlab.course.build:call") is False
    assert "a lambda has no source" in capsys.readouterr().out
