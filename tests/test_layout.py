"""The library's shape, as the style guide asks for it: no import cycles, short modules, and every
module's opening docstring naming the lesson that introduces it."""
import ast
import re
import sys
from pathlib import Path

import pytest

from helpers import ROOT

PACKAGE = Path(ROOT) / "distlab"
MODULES = sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The distlab modules that ``path`` imports, at its top or inside a function."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    known = {module_name(p) for p in MODULES}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:       # "from .x import y": y may be a module itself
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if m in known and m != name}


def test_no_import_cycles():
    graph = {module_name(p): imports(p) for p in MODULES}
    # a package's __init__ may import its own modules; a cycle through it is not a real one
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    refuse_cycles(graph, "import cycle")


def refuse_cycles(graph: dict[str, set[str]], what: str) -> None:
    """A depth-first walk of ``graph``; the first cycle it meets fails the test, named node by node."""
    state: dict[str, str] = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                raise AssertionError(f"{what}: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


DOORS = {"distlab", "distlab.cli", "distlab.doctor"}    # the public API and the commands: they use every package


def package_of(module: str) -> str:
    """``distlab.train.loop`` -> "train"; a module of the package root (the data, models, records) -> "core"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (PACKAGE / parts[-1] / "__init__.py").exists() else "core"


def test_no_import_cycle_between_packages():
    """Issue 36: the packages are layers: the core (data, models, records); then processes, long_runs, predict,
    comm, sequence; the engine (train); the axes (data_parallel, pipeline, tensor, context, experts, zero);
    parallelize; then measure, cluster, course, widgets.  An import in either direction between two packages,
    even one inside a function, would tie them into one: the check walks every import, wherever it is."""
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        name = module_name(path)
        if name in DOORS:
            continue
        mine = package_of(name)
        graph.setdefault(mine, set()).update(package_of(m) for m in imports(path) if m not in DOORS)
    graph = {p: deps - {p} for p, deps in graph.items()}
    assert not graph.get("core"), f"the core imports packages: {sorted(graph['core'])}"
    refuse_cycles(graph, "package cycle")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_are_short_and_name_their_lesson(path):
    lines = len(path.read_text().splitlines())
    assert lines <= 300, f"{path.name} has {lines} lines: split it by idea (the guide says ~300 at most)"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert re.search(r"[Ll]essons? \d\d", doc), f"{path.name}: its docstring does not name its lesson"


CORE = {"__init__", "checks", "cli", "data", "datasets", "distorted", "doctor", "models", "records", "stepwise",
        "verdict"}


def test_the_package_root_holds_only_the_core():
    """Issue 27: lesson 09's cluster code, lesson 10's long-run code and the course's exercises each
    have a subpackage; the root keeps the data, the models, the records, the doctor and the CLI."""
    assert {p.stem for p in PACKAGE.glob("*.py")} == CORE


@pytest.mark.parametrize("package", sorted(p.parent for p in PACKAGE.rglob("__init__.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_docstring_lists_what_is_inside(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    named = set(re.findall(r"``(\w+)(?:/|``)", doc))
    inside = {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        p.parent.name for p in package.glob("*/__init__.py")}
    assert inside <= named, f"{package.name}'s docstring does not list {sorted(inside - named)}"


TRAINING_PACKAGES = tuple(f"distlab.{p}" for p in ("processes", "train", "data_parallel", "pipeline", "tensor",
                                                    "context", "zero", "parallelize"))


def test_widgets_never_import_what_trains():
    for path in (PACKAGE / "widgets").glob("*.py"):
        trains = {m for m in imports(path)
                  if m.startswith(TRAINING_PACKAGES) or m in ("distlab.measure.scaling", "distlab.experts.moe",
                                                              "distlab.experts.expert_parallel")}
        trains.discard("distlab.pipeline.schedules")    # schedules as plain data: nothing there trains
        assert not trains, f"{path.name} imports {sorted(trains)}: widgets read records, they never train"


PREDICT_MAY_IMPORT = {"distlab.models", "distlab.data"}     # the core; the packages that train import predict


@pytest.mark.parametrize("path", sorted((PACKAGE / "predict").glob("*.py")), ids=lambda p: p.name)
def test_predict_depends_only_on_the_core(path):
    """Issue 36: the formulas live in ``distlab.predict``, which the lessons, widgets, benchmarks and the
    packages that train all read; so it imports nothing of theirs: the core, plain torch, the standard
    library."""
    outside = {m for m in imports(path) if not m.startswith("distlab.predict") and m not in PREDICT_MAY_IMPORT}
    assert not outside, f"predict/{path.name} imports {sorted(outside)}: predict depends only on the core"
    third = {alias.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Import) for alias in node.names}
    third |= {node.module.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.ImportFrom) and not node.level and node.module}
    assert third <= set(sys.stdlib_module_names) | {"torch"}, f"predict/{path.name} imports {sorted(third)}"
