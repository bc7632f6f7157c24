"""Issue 39: lesson 15's sweep of the ways to send gradients (``measure.exposed``), its pictures
(``widgets.time_levers``) and a run placed on the measured roofline (``measure.roofline``)."""
import pytest
from matplotlib.figure import Figure

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.measure import exposed
from distlab.measure import roofline as R
from distlab.widgets import time_levers as pictures

pytestmark = pytest.mark.usefixtures("warm_ranks")

SMALL = dict(width=64, depth=3, batch_size=16)
WAYS = {"by_hand": dict(method="by_hand"), "buckets": dict(method="buckets", bucket_mb=0.01),
        "reduce-scatter": dict(method="reduce_scatter", bucket_mb=0.01), "ddp": dict(method="ddp")}


@pytest.fixture(scope="module")
def sweep():
    return distlab.launch(exposed.sweep, world_size=2, config=SMALL, ways=WAYS, rounds=2, steps=4, skip=1,
                          progress="none")


def test_every_way_gives_one_step_time_a_round_and_ddp_no_exposed_time(sweep):
    summary = exposed.summarise(sweep)
    assert list(summary) == list(WAYS)
    for name, row in summary.items():
        assert len(row["step"]) == 2 and all(t > 0 for t in row["step"])
        if name == "ddp":
            assert row["exposed"] is None
        else:
            assert len(row["exposed"]) == 2 and all(0 <= e <= s for e, s in zip(row["exposed"], row["step"]))


def test_the_timeline_comes_from_the_ranks_records(sweep):
    timeline = exposed.bucket_timeline(sweep, "buckets")
    assert [r["rank"] for r in timeline] == [0, 1]
    for r in timeline:
        assert r["compute"][0] == 0 < r["compute"][1] <= r["wait"][0] <= r["wait"][1]
        assert len(r["buckets"]) >= 3 and all(launched <= done for _, launched, done, _ in r["buckets"])
        assert r["buckets"][0][1] < r["compute"][1]                 # the first bucket left during backward
    assert 0 < exposed.overlapped_share(timeline) <= 1
    assert exposed.bucket_timeline(sweep, "by_hand")[0]["buckets"] == []
    assert exposed.overlapped_share(exposed.bucket_timeline(sweep, "by_hand")) == 0


def test_the_pictures_draw_and_the_menu_changes_the_picture(sweep):
    summary = exposed.summarise(sweep)
    assert isinstance(pictures.sweep_figure(summary), Figure)
    timelines = {name: exposed.bucket_timeline(sweep, name) for name in ("buckets", "reduce-scatter")}
    explorer = pictures.timeline_explorer(timelines)
    first = explorer.image.value
    explorer.controls[0].value = "reduce-scatter"
    assert explorer.image.value != first and "backward ended" in repr(explorer)


def test_a_run_is_placed_on_the_measured_roofline():
    record = dp.train_single(global_batch_size=32, steps=6)
    point = R.place_on_roofline(record, peak=1e11, bandwidth=1e10)
    assert point["intensity"] == record.flops_per_step / (2 * sum(record.memory.values()))
    assert point["bound"] == min(1e11, point["intensity"] * 1e10)
    assert point["memory_bound"] == (point["intensity"] < 10)
    assert 0 < point["mfu"] == point["achieved"] / 1e11
    assert isinstance(pictures.roofline_figure(1e11, 1e10, {"MLP": point}), Figure)


@pytest.mark.parametrize("settings,message", [
    (dict(ways={}), "ways is empty"),
    (dict(ways=WAYS, steps=2, skip=2), "steps must be"),
    (dict(ways={"zero": dict(method="buckets", bucket_mb=0)}), "bucket_mb must be a positive number"),
])
def test_a_sweep_that_cannot_run_is_refused_before_start(settings, message):
    with pytest.raises(ValueError, match=message):
        distlab.launch(exposed.sweep, world_size=2, progress="none", **settings)
