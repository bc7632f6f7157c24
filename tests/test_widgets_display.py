"""The widgets' one display layer (distlab/widgets/display.py), and the seam between showing and running.

Widgets read records; they never import what trains, launches or communicates (a "measure"
button calls a function the lesson hands it).  Colours, sizes, figure-to-PNG and the live
figure exist once, in display.py.
"""
import ast
import base64
import re
import struct
from pathlib import Path
from types import SimpleNamespace

import ipywidgets as W
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from helpers import ROOT
from distlab.widgets import display

WIDGETS = Path(ROOT) / "distlab" / "widgets"
MODULES = sorted(WIDGETS.glob("*.py"))
# what a widget may read: records and the data they describe, and pure analysis of them
ALLOWED = {"distlab.records", "distlab.data", "distlab.models", "distlab.comm.cost_model",
           "distlab.measure.speedup", "distlab.pipeline.schedules",   # schedules: plain data, nothing trains
           "distlab.predict",                                          # formulas only
           "distlab.experts.measure",               # reads the experts' records; its bytes formula is arithmetic
           "distlab.long_runs.monitor",             # reads the metrics files ranks write: records on disk
           "distlab.long_runs.horovod_timeline"}    # reads the trace Horovod's rank 0 writes: a record on disk
LAPTOP_NOTEBOOK_PX = 934     # a notebook output's width in JupyterLab on a 1366 px screen


def distlab_imports(path: Path) -> set[str]:
    """Every ``distlab`` name ``path`` imports, at its top or in a function, as "module.name"."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "distlab"}
        elif isinstance(node, ast.ImportFrom):
            base = ["distlab", "widgets"][:2 - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module.split(".")[0] == "distlab":
                found |= {f"{module}.{a.name}" for a in node.names}
    return found


def allowed(name: str) -> bool:
    """``name`` is an allowed module, a name inside one, or another widget module."""
    return name.startswith("distlab.widgets.") or any(name == m or name.startswith(m + ".")
                                                      for m in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_widgets_read_records_and_never_import_what_trains(path):
    wrong = sorted(n for n in distlab_imports(path) if not allowed(n))
    assert not wrong, (f"{path.name} imports {wrong}: widgets only read records (and analyse them); "
                       "a 'measure' button calls a function the lesson hands it")


def test_the_import_check_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..data_parallel import async_sgd\nfrom ..comm import collectives, cost_model\n"
                   "from .. import launch\ndef f():\n    from ..measure import scaling\n"
                   "import distlab.processes.launcher\nfrom ..measure.speedup import speedups\n")
    wrong = sorted(n for n in distlab_imports(bad) if not allowed(n))
    assert wrong == ["distlab.comm.collectives", "distlab.data_parallel.async_sgd", "distlab.launch",
                     "distlab.measure.scaling", "distlab.processes.launcher"]


def test_one_palette_every_colour_is_named_in_display():
    for path in MODULES:
        if path.name != "display.py":
            colours = re.findall(r"#[0-9A-Fa-f]{6}\b", path.read_text())
            assert not colours, f"{path.name} writes colours {colours}: name them in display.py"
    assert len(set(display.OKABE_ITO)) == 8
    for named in (display.PART_COLOURS, display.METHOD_COLOURS, display.BACKEND_COLOURS,
                  display.ALGORITHM_COLOURS):
        assert set(named.values()) <= set(display.OKABE_ITO) | {display.GREY}
        assert len(set(named.values())) == len(named), f"two meanings share a colour: {named}"


def test_rank_7_has_one_colour_in_every_picture():
    from distlab.data import load_digits, shard_indices
    from distlab.widgets import data_parallel, timeline

    assert display.rank_colour(7) == display.OKABE_ITO[7] and display.rank_colour(15) == display.rank_colour(7)
    digits = load_digits()
    fig = data_parallel.partition_figure(digits, [shard_indices(digits.n_train, r, 8) for r in range(8)])
    cmap = fig.axes[0].images[0].get_cmap()
    assert [to_hex(c) for c in cmap.colors] == [display.rank_colour(r).lower() for r in range(8)]
    updates = [SimpleNamespace(worker=w, staleness=s) for w in (1, 7) for s in (0, 1)]
    server = SimpleNamespace(updates=updates, staleness=[u.staleness for u in updates])
    bars = timeline.staleness_figure(server).axes[0].patches
    assert {to_hex(b.get_facecolor()) for b in bars} == {display.rank_colour(1).lower(),
                                                         display.rank_colour(7).lower()}


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def test_figure_png_gives_png_bytes_that_fit_a_laptop_notebook():
    fig = Figure(figsize=(display.WIDTH, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("x")
    width, height = png_size(display.figure_png(fig))
    assert 0.9 * display.WIDTH * display.DPI <= width <= LAPTOP_NOTEBOOK_PX
    assert png_size(display.figure_png(fig, dpi=2 * display.DPI))[0] > 1.8 * width


def test_show_puts_a_png_in_the_cell(monkeypatch):
    shown = []
    monkeypatch.setattr(display, "display", shown.append)
    display.show(Figure(figsize=(2, 1)))
    assert len(shown) == 1 and shown[0].data[:4] == b"\x89PNG"


def drawn_by(calls):
    """A draw function that records its arguments and draws them, so pictures differ by value."""
    def draw(n, label):
        calls.append((n, label))
        fig = Figure(figsize=(2, 1))
        fig.text(0.1, 0.5, f"{label} {n}")
        return fig
    return draw


def test_the_live_figure_redraws_when_a_control_moves_and_carries_a_static_picture():
    calls = []
    n = W.IntSlider(value=1, min=0, max=5, description="n")
    label = W.Dropdown(options=["a", "b"], value="a", description="label")
    status = W.Label("status")
    live = display.LiveFigure([n, label], drawn_by(calls), lambda n, label: f"<{label} {n}>",
                              caption=lambda n, label: f"caption {label}{n}", extra=[status])
    assert calls == [(1, "a")] and live.values == (1, "a")
    assert live.children[-1] is status and live.children[1] is live.image   # controls, picture, text, extra
    first = live.image.value
    n.value = 3
    assert calls[-1] == (3, "a") and live.image.value != first
    label.value = "b"
    assert calls[-1] == (3, "b") and "caption b3" in live.text.value
    bundle = live._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == "<b 3>" == repr(live)
    assert base64.b64decode(bundle["image/png"]) == live.image.value
    n.value, label.value = 1, "a"
    assert live.image.value == first                       # same values, same picture


def test_the_live_figure_caches_shows_a_storyboard_and_can_wait_for_its_first_picture():
    calls = []
    step = W.IntSlider(value=0, min=0, max=3, description="step")
    draw = drawn_by(calls)
    live = display.LiveFigure([step], lambda s: draw(s, "frame"), lambda s: "frames",
                              cache=True, static=lambda: b"\x89PNG storyboard")
    step.value = 2
    step.value = 0
    step.value = 2
    assert calls == [(0, "frame"), (2, "frame")]           # each frame drawn once
    assert base64.b64decode(live._repr_mimebundle_()["image/png"]) == b"\x89PNG storyboard"
    rows = []
    empty = display.LiveFigure([], lambda: draw(len(rows), "rows") if rows else None, lambda: "nothing yet")
    assert empty.image.value == b"" and "image/png" not in empty._repr_mimebundle_()
    rows.append(1)
    empty.redraw()
    assert empty.image.value[:4] == b"\x89PNG" and "image/png" in empty._repr_mimebundle_()
