"""How every widget shows a picture: one palette, one set of sizes, one figure-to-PNG, one live figure.

Introduced with lesson 01's widgets (``notebooks/01_data_parallelism.ipynb``); every later
lesson's pictures use it, so a change here changes all of them at once.  Why each piece exists:

- **one palette**: Okabe & Ito's eight colours stay distinct for the common colour-vision
  deficiencies.  Rank r has one colour in every picture, and each recurring meaning
  ("waiting", "ring", "horovod") has one colour wherever it appears.
- **one set of sizes**: a picture wider than the notebook is shrunk by the browser, and its
  labels with it.  ``WIDTH`` at ``DPI`` fits the 934 px a notebook's output gets on a 1366 px
  laptop screen (JupyterLab with its file browser open).
- ``figure_png``: figures are ``matplotlib.figure.Figure`` objects (no pyplot state, so
  nothing leaks into a cell as ``<Figure ...>`` text); a PNG is what a widget, a saved
  notebook and a test can all hold and compare.
- ``LiveFigure``: controls above a picture that is redrawn whenever one of them moves.  Its
  cell output carries the live widget *and* the current picture with a line of text, so a
  viewer without a widget manager (GitHub, nbviewer, nbval) still shows something true.
"""
from __future__ import annotations

import base64
import html
import io

import ipywidgets as W
from IPython.display import Image, display
from matplotlib.figure import Figure

# Okabe & Ito's eight colours, by name; grey for what is neither data nor a highlighted part
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"]
ORANGE, SKY_BLUE, GREEN, YELLOW, BLUE, VERMILLION, PURPLE, BLACK = OKABE_ITO
GREY = "#999999"
DIVERGING = "PuOr"       # colour map for signed numbers (gradients): the sign is the hue, the size the depth

# the recurring meanings, one colour each in every lesson
PART_COLOURS = {"compute": BLUE, "communication": GREEN, "waiting": VERMILLION, "rest": GREY,
                "server exchange": PURPLE}                      # where a step's time goes (02, 04, 05)
METHOD_COLOURS = {"by_hand": BLUE, "fused": SKY_BLUE, "ddp": GREEN, "local_sgd": PURPLE,
                  "async": VERMILLION}                          # how the ranks combine (04)
BACKEND_COLOURS = {"torchrun": SKY_BLUE, "horovod": ORANGE}     # lesson 02
ALGORITHM_COLOURS = {"naive": VERMILLION, "parameter_server": PURPLE, "ring": BLUE, "tree": GREEN,
                     "gloo": BLACK}                             # all-reduces (03); gloo: PyTorch's own

DPI = 80                 # pixels per inch of every picture: 10-point labels are 11 px tall
WIDTH = 11.0             # inches (880 px): a picture as wide as the notebook
NARROW = 7.0             # inches (560 px): one small chart


def rank_colour(rank: int) -> str:
    """Lesson 01: the colour of rank ``rank`` in every picture (lesson 04's workers are ranks too)."""
    return OKABE_ITO[rank % len(OKABE_ITO)]


def figure_png(fig: Figure, dpi: int = DPI) -> bytes:
    """Lesson 01: the figure as PNG bytes, trimmed to what is drawn (what widgets show, tests compare)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def show(fig: Figure) -> None:
    """Lesson 00: display a figure in the notebook as a PNG image (a picture without controls)."""
    display(Image(figure_png(fig), format="png"))


class LiveFigure(W.VBox):
    """Lesson 01: controls above a picture, redrawn whenever one of them moves.

    ``draw(*values)`` gets the controls' current values and returns a figure, or None when
    there is nothing to show yet; ``describe(*values)`` the line of text a viewer without
    widgets shows.  Optional: ``caption(*values)``, text under the picture; ``extra``,
    widgets in rows under it (a status line, a button); ``static()``, the PNG such a viewer
    gets instead of the current picture (the animation's storyboard); ``cache=True`` keeps
    every picture once drawn (an animation's frames are visited again and again).
    """

    def __init__(self, controls, draw, describe, *, caption=None, extra=(), static=None,
                 cache: bool = False):
        self.controls, self.draw, self.describe = list(controls), draw, describe
        self.caption, self.static = caption, static
        self._cache = {} if cache else None
        self.image = W.Image(format="png")
        self.text = W.HTML()
        rows = [W.HBox(self.controls, layout=W.Layout(flex_flow="row wrap"))] if self.controls else []
        super().__init__(rows + [self.image] + ([self.text] if caption else []) + list(extra))
        for control in self.controls:
            control.layout.flex = control.layout.flex or "0 0 auto"   # too wide: wrap, never squeeze
            control.observe(self.redraw, names="value")
        self.redraw()

    @property
    def values(self) -> tuple:
        return tuple(control.value for control in self.controls)

    def png(self) -> bytes:
        """The picture for the current values, as PNG bytes (empty when there is none yet)."""
        if self._cache is not None and self.values in self._cache:
            return self._cache[self.values]
        fig = self.draw(*self.values)
        png = b"" if fig is None else figure_png(fig)
        if self._cache is not None:
            self._cache[self.values] = png
        return png

    def redraw(self, _change=None) -> None:
        """Draw again from the current values (a widget calls it itself after new records arrive)."""
        self.image.value = self.png()
        if self.caption:
            self.text.value = f"<pre>{html.escape(self.caption(*self.values))}</pre>"

    def __repr__(self) -> str:
        return self.describe(*self.values)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        png = self.static() if self.static else self.image.value
        if png:
            bundle["image/png"] = base64.b64encode(png).decode()
        return bundle
