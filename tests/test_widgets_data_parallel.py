"""Lesson 01's widgets, built from the records of a real (small) two-rank run.

One launch for the whole module (start-up costs seconds); everything else reads its records.
"""
import pytest
import torch
from helpers import launched, once

from distlab.data_parallel import data_parallel as dp
from distlab.data import load_digits, shard_indices
from distlab.widgets import data_parallel as w

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

CONFIG = dict(width=16, global_batch_size=16, steps=3, lr=0.5, seed=3, record_grads_at=(0, 2))


@pytest.fixture
def run():
    """The two-rank run and its one-process reference, each run once (helpers.launched, helpers.once)."""
    return launched(dp.train, 2, method="by_hand", **CONFIG), once(dp.train_single, world_size=2, **CONFIG)


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def control(widget, description):
    """The control with this description, found anywhere inside the widget."""
    stack = [widget]
    while stack:
        x = stack.pop()
        if getattr(x, "description", None) == description:
            return x
        stack.extend(getattr(x, "children", ()))
    raise LookupError(description)


def shown_png(widget) -> str:
    """The PNG the widget's Image currently shows (base64), exactly one picture."""
    import base64

    from ipywidgets import Image

    images = [c for c in widget.children if isinstance(c, Image)]
    assert len(images) == 1 and images[0].value[:4] == b"\x89PNG", "expected one Image showing a PNG"
    return base64.b64encode(images[0].value).decode()


def test_partition_widget_draws_what_the_ranks_recorded(run, digits):
    records, _ = run
    for r in records:   # the widget computes shards the way the ranks do: same indices
        assert torch.equal(r.shard, shard_indices(digits.n_train, r.rank, 2, seed=CONFIG["seed"]))
    widget = w.partition_widget(digits, world_size=2, seed=CONFIG["seed"])
    before = shown_png(widget)
    control(widget, "workers N").value = 3
    after_n = shown_png(widget)
    assert after_n != before
    control(widget, "epoch").value = 1
    assert shown_png(widget) not in (before, after_n)
    control(widget, "workers N").value, control(widget, "epoch").value = 2, 0
    assert shown_png(widget) == before   # same controls, same picture: it is drawn from data only
    # the static figure accepts the recorded shards directly
    fig = w.partition_figure(digits, [r.shard for r in records], title="recorded")
    assert len(fig.axes) == 3


def test_gradient_widget_controls_change_the_picture(run):
    records, reference = run
    widget = w.gradient_widget(records, reference)
    first = shown_png(widget)
    text = widget.children[-1].value
    assert "|average - one process|" in text
    control(widget, "step").value = 2
    second = shown_png(widget)
    assert second != first and widget.children[-1].value != text
    control(widget, "layer").value = "out.bias"
    assert shown_png(widget) not in (first, second)
    assert list(control(widget, "step").options) == [0, 2]
    # without a widget front-end (nbval, a static viewer) the cell shows the current picture
    bundle = widget._repr_mimebundle_()
    assert bundle["image/png"] == shown_png(widget)
    assert bundle["text/plain"].startswith("gradient widget: 2 ranks")


def test_gradients_shown_are_the_recorded_ones(run):
    records, reference = run
    g = w.gradients_at(records, reference, 2, "fc2.weight")
    assert set(g) == {"rank 0", "rank 1", "average", "single"}
    assert torch.equal(g["rank 1"], records[1].grads[2]["fc2.weight"]["local"])
    assert not torch.allclose(g["rank 0"], g["rank 1"])          # the ranks really disagree
    mean = (g["rank 0"] + g["rank 1"]) / 2
    assert (mean - g["average"]).abs().max() <= 1e-6
    assert (g["average"] - g["single"]).abs().max() <= 1e-6     # ... and their average is exact
    without_reference = w.gradients_at(records, None, 0, "out.bias")
    assert "single" not in without_reference


def test_bad_input_gives_clear_errors(run, digits):
    records, reference = run
    with pytest.raises(ValueError, match=r"layer 'fc9.weight' was not recorded; recorded layers: \['fc1"):
        w.gradient_widget(records, reference, layer="fc9.weight")
    with pytest.raises(ValueError, match=r"step 1 was not recorded; recorded steps: \[0, 2\]"):
        w.gradient_widget(records, reference, step=1)
    with pytest.raises(ValueError, match="step 7 was not recorded"):
        w.gradient_figure(records, reference, 7, "fc1.weight")
    with pytest.raises(ValueError, match="no recorded gradients"):
        w.gradient_widget([])
    single_rank = dp.train_single(world_size=1, **{**CONFIG, "global_batch_size": 8})
    with pytest.raises(ValueError, match=r"imitates 1 rank\(s\) but there are 2 records"):
        w.gradient_widget(records, single_rank)
    with pytest.raises(ValueError, match="different jobs"):
        w.gradients_at([records[0], single_rank], None, 0, "fc1.weight")
    with pytest.raises(ValueError, match=r"world_size must be in 1..8"):
        w.partition_widget(digits, world_size=0)
