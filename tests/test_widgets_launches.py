"""Lesson 09: one run launched three ways, read from records: the all-reduce alone, the steps' span, the picture."""
import pytest
import torch

from distlab.records import RankRecord, StepRecord
from distlab.widgets import launches
from distlab.widgets.display import figure_png


def records(arrive=(0.0, 0.004), leave=(0.010, 0.011), steps=5, comm=True):
    """Two ranks; at each step rank r enters the all-reduce ``arrive[r]`` s and leaves ``leave[r]`` s after 0.05."""
    out = []
    for rank in range(2):
        r = RankRecord(rank=rank, world_size=2, backend="gloo", method="fused", device="cpu", config={},
                       shard=torch.arange(4))
        for i in range(steps):
            t = 1000.0 + i
            r.steps.append(StepRecord(i, 2.0 - 0.1 * i, 0.5, t, t + 0.05,
                                      t + 0.05 + arrive[rank] if comm else None,
                                      t + 0.05 + leave[rank] if comm else None, t + 0.07))
        r.params = {"w": torch.zeros(1000), "b": torch.zeros(24)}
        out.append(r)
    return out


def test_the_all_reduce_alone_leaves_the_waiting_out():
    t = launches.all_reduce_seconds(records(), skip=2)
    # last in at 0.004, first out at 0.010: 6 ms of all-reduce; rank 0's span (10 ms) waited 4 ms of it
    assert t["alone"] == pytest.approx([0.006] * 3)
    assert t["span"] == pytest.approx(0.0085)          # the median of 10 ms (rank 0) and 7 ms (rank 1)
    assert t["bytes"] == 1024 * 4
    assert launches.steps_seconds(records()) == pytest.approx(4.07)


def test_runs_without_separate_all_reduce_times_are_refused():
    with pytest.raises(ValueError, match="method ddp overlaps it"):
        launches.all_reduce_seconds(records(comm=False))
    with pytest.raises(ValueError, match="nothing left after skipping 5"):
        launches.all_reduce_seconds(records(), skip=5)


def test_the_three_launches_draw_side_by_side():
    fig = launches.launches_figure({"notebook": (records(), 30.0), "terminal": (records(), 45.0),
                                    "two nodes": (records(), 50.0)})
    loss_ax, time_ax = fig.axes
    assert [t.get_text() for t in time_ax.get_yticklabels()] == ["notebook", "terminal", "two nodes"]
    assert len(loss_ax.get_lines()) == 3
    assert figure_png(fig)[:4] == b"\x89PNG"
