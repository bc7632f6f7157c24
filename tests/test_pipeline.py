"""Lesson 06: model parallelism on real ranks (stages, pipeline schedules, PyTorch's pipelining).

The schedules are plain data: they are checked without processes (every pass exactly once,
no deadlock, the bubble and the held activations of the textbook).  Then one launch per
world size trains every schedule and the library's pipelining on the same cut of the model;
each must end with the parameters of one process training the whole model on the whole
batch (``train_single``), and each rank's timeline must follow its schedule.
"""
import math
import statistics

import pytest
import torch
from helpers import once, trained

import distlab
from distlab.models import build_model
from distlab.data_parallel import data_parallel as dp
from distlab.pipeline import pipeline, schedules, stages
from distlab.pipeline.schedules import Op
from distlab.predict import bubbles, traffic
from distlab.predict.flops import layer_costs
from distlab.verdict import verdict

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS, LR, BATCH = 20, 0.2, 48
TOLERANCE = 1e-6


# -------------------------------------------------------------------------------------------
# schedules, without processes
# -------------------------------------------------------------------------------------------
CASES = [(name, p, m, v) for p in (2, 3, 4) for m in (1, 2, 3, 4, 8)
         for name, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 3))
         if name != "interleaved" or m % p == 0]


@pytest.mark.parametrize("name,p,m,v", CASES)
def test_every_pass_once_and_the_textbook_bubble(name, p, m, v):
    ops = schedules.schedule(name, p, m, v)
    for stage_ops in ops:
        assert sorted(stage_ops) == sorted(Op(k, i, c) for k in "FB" for i in range(m) for c in range(v))
    timeline = schedules.simulate(ops, forward=1 / v, backward=2 / v)
    assert schedules.bubble(timeline) == pytest.approx(bubbles.bubble_fraction(p, m, v))
    # the closed form of the activations each stage holds is what the op lists hold
    assert [schedules.held_activations(o) for o in ops] == [bubbles.held_micro_batches(name, p, m, s, v)
                                                            for s in range(p)]


@pytest.mark.parametrize("p", (2, 3, 4))
@pytest.mark.parametrize("m", (1, 2, 4, 8))
def test_held_activations_gpipe_all_1f1b_at_most_p_minus_s(p, m):
    assert [schedules.held_activations(o) for o in schedules.schedule("gpipe", p, m)] == [m] * p
    assert [schedules.held_activations(o) for o in schedules.schedule("1f1b", p, m)] == [min(p - s, m)
                                                                                        for s in range(p)]


def test_one_f_one_b_reads_like_its_diagram():
    assert " ".join(map(str, schedules.one_f_one_b(4, 6, 0))) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"
    assert " ".join(map(str, schedules.one_f_one_b(4, 6, 3))) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"


def test_a_schedule_that_cannot_run_is_a_deadlock():
    bad = [[Op("F", 0), Op("B", 0)], [Op("B", 0), Op("F", 0)]]     # stage 1 wants to go backward first
    with pytest.raises(ValueError, match="deadlock"):
        schedules.simulate(bad)


@pytest.mark.parametrize("args,message", [
    (("zigzag", 2, 4), "unknown schedule 'zigzag'"),
    (("gpipe", 2, 0), "micro_batches must be a positive integer"),
    (("interleaved", 2, 4, 1), "needs chunks >= 2"),
    (("interleaved", 3, 4, 2), "must be a multiple of 3"),
    (("1f1b", 2, 4, 2), "chunks=2 needs schedule='interleaved'"),
])
def test_bad_schedules_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        schedules.schedule(*args)


# -------------------------------------------------------------------------------------------
# cutting the model
# -------------------------------------------------------------------------------------------
def test_cuts_balance_the_work_and_keep_every_layer():
    sample = torch.zeros(1, 1, 8, 8)
    mlp = build_model("mlp", 64, depth=3)          # fc1 64x64, fc2 64x64, fc3 64x64, out 64x10
    parts = stages.split(mlp, 2, sample)
    assert [list(dict(p.named_children())) for p in parts] == [
        ["flatten", "fc1", "relu1", "fc2", "relu2"], ["fc3", "relu3", "out"]]
    cnn = build_model("cnn", 16)                   # the second convolution does most of the work
    assert [list(dict(p.named_children())) for p in stages.split(cnn, 2, sample)] == [
        ["conv1", "relu1"], ["conv2", "relu2", "pool", "flatten", "out"]]
    assert layer_costs(cnn, sample)[2] == 16 * 32 * 9 * 64
    assert stages.boundary_shapes(parts, sample) == [(64,), (10,)]
    owned = stages.owned_names(mlp, parts[1])
    assert sorted(owned) == ["fc3.bias", "fc3.weight", "out.bias", "out.weight"]


def test_more_stages_than_layers_is_refused():
    with pytest.raises(ValueError, match="4 stages but the model has only 3 layers with weights"):
        stages.split(build_model("mlp", 8), 4, torch.zeros(1, 1, 8, 8))


@pytest.mark.parametrize("kwargs,message", [
    (dict(world_size=4), "4 stages but the model has only 3 layers"),
    (dict(world_size=2, micro_batches=5), "5 micro-batches do not divide the batch of 64"),
    (dict(world_size=2, schedule="zb"), "unknown schedule 'zb'"),
    (dict(world_size=2, schedule="interleaved", chunks=2, micro_batches=4), "4 stages but the model"),
    (dict(world_size=2, depth=0), "depth must be a positive integer"),
    (dict(world_size=2, global_batch_size=5000), "larger than the 1438 training samples"),
])
def test_bad_pipeline_jobs_fail_before_any_process_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        distlab.launch(pipeline.train, progress="none", **kwargs)


# -------------------------------------------------------------------------------------------
# real ranks
# -------------------------------------------------------------------------------------------
def case(module="pipeline", **kwargs):
    return module, dict(dict(model="mlp", depth=3, global_batch_size=BATCH, steps=STEPS, lr=LR), **kwargs)


RUNS = {
    # one stage is both the first and the last (the H200 check of issue 37 found PyTorch's schedule fed no labels)
    1: {"1f1b": case(schedule="1f1b", micro_batches=4),
        "torch 1f1b": case("torch_pipeline", schedule="1f1b", micro_batches=4)},
    2: {"naive mlp": case(micro_batches=1), "naive cnn": case(model="cnn", depth=2, micro_batches=1),
        "gpipe": case(schedule="gpipe", micro_batches=4), "1f1b": case(schedule="1f1b", micro_batches=4),
        "1f1b cnn": case(model="cnn", depth=2, schedule="1f1b", micro_batches=8),
        "interleaved": case(schedule="interleaved", chunks=2, micro_batches=4),
        "torch gpipe": case("torch_pipeline", schedule="gpipe", micro_batches=4),
        "torch 1f1b": case("torch_pipeline", schedule="1f1b", micro_batches=4)},
    3: {"gpipe": case(schedule="gpipe", micro_batches=3), "1f1b": case(schedule="1f1b", micro_batches=6),
        "interleaved": case(depth=5, schedule="interleaved", chunks=2, micro_batches=6)},
    4: {"1f1b": case(schedule="1f1b", micro_batches=8), "gpipe": case(schedule="gpipe", micro_batches=4),
        "torch 1f1b": case("torch_pipeline", schedule="1f1b", micro_batches=4)},
}


def runs(p: int) -> dict:
    """``{case: each rank's record}`` of RUNS[p], all trained in one launch on ``p`` ranks, launched once
    whichever test asks first (helpers.trained)."""
    return trained(p, RUNS[p], timeout=120)


def reference(model: str, depth: int):
    """One process training the whole model on the whole batch (helpers.once)."""
    return once(dp.train_single, model=model, depth=depth, global_batch_size=BATCH, steps=STEPS, lr=LR,
                record_grads_at=())


ALL = [(p, name) for p, cases in RUNS.items() for name in cases]


@pytest.mark.parametrize("p,name", ALL, ids=[f"{p}ranks-{n}" for p, n in ALL])
def test_every_schedule_trains_to_the_parameters_of_one_process(p, name):
    records = runs(p)[name]
    kwargs = RUNS[p][name][1]
    ref = reference(kwargs["model"], kwargs["depth"])
    merged = pipeline.merge_params(records)
    assert sorted(merged) == sorted(ref.params)                # every parameter on exactly one rank
    assert sum(len(r.params) for r in records) == len(ref.params)
    for r in records:                     # and each rank kept only its own part of the model
        assert r.config.get("parameters_held", sum(q.numel() for q in r.params.values())) == sum(
            q.numel() for q in r.params.values())
    assert distlab.max_param_difference(merged, ref.params) <= TOLERANCE
    assert records[-1].losses == pytest.approx(ref.losses, abs=1e-5)    # the last stage computes the loss


@pytest.mark.parametrize("p,name", [(p, n) for p, n in ALL if RUNS[p][n][0] == "pipeline"])
def test_each_rank_ran_its_schedule_and_held_what_it_says(p, name):
    kwargs = RUNS[p][name][1]
    m, v = kwargs["micro_batches"], kwargs.get("chunks", 1)
    ops = schedules.schedule(kwargs.get("schedule", "gpipe"), p, m, v)
    for rank, record in enumerate(runs(p)[name]):
        for step in (0, STEPS - 1):
            passes = [e for e in record.events if e["step"] == step and e["kind"] in "FB"]
            assert [Op(e["kind"], e["micro"], e["chunk"]) for e in passes] == ops[rank]
            assert max(e["held"] for e in passes) == schedules.held_activations(ops[rank])
            # a message for every pass but the first stage's forwards and the last one's backwards
            kinds = [e["kind"] for e in record.events if e["step"] == step]
            mine = [c * p + rank for c in range(v)]
            expected = m * sum(x != 0 for x in mine) + m * sum(x != p * v - 1 for x in mine)
            assert kinds.count("recv") == kinds.count("send") == expected
    if kwargs.get("schedule") == "1f1b":
        assert [max(e["held"] for e in r.events) for r in runs(p)[name]] == [min(p - s, m) for s in range(p)]
    # the bytes each rank sent per step: its stages' outputs forward, their inputs' gradients backward
    config = runs(p)[name][0].config
    model = build_model(config["model"], config["width"], depth=config["depth"])
    sample = torch.zeros(1, 1, 8, 8)
    numbers = [math.prod(s) for s in stages.boundary_shapes(stages.split(model, p * v, sample), sample)]
    assert [r.traffic["pipeline"] for r in runs(p)[name]] == [traffic.pipeline_bytes(BATCH, numbers, rank, p)
                                                             for rank in range(p)]


def test_naive_model_parallelism_one_stage_works_at_a_time():
    """With one micro-batch, stage 1's forward starts only after stage 0's has ended."""
    r0, r1 = runs(2)["naive mlp"]
    for step in range(STEPS):
        f0 = next(e for e in r0.events if e["step"] == step and e["kind"] == "F")
        f1 = next(e for e in r1.events if e["step"] == step and e["kind"] == "F")
        b1 = next(e for e in r1.events if e["step"] == step and e["kind"] == "B")
        b0 = next(e for e in r0.events if e["step"] == step and e["kind"] == "B")
        assert f0["end"] <= f1["start"] <= f1["end"] <= b1["start"] <= b1["end"] <= b0["start"]


def test_the_test_accuracy_is_the_whole_models():
    ref = reference("mlp", 3)
    for record in runs(2)["1f1b"]:
        assert record.test_accuracy == pytest.approx(ref.test_accuracy)


def test_the_measured_timeline_has_a_bubble_near_the_textbook():
    """Timings swing on a shared machine: the measured bubble must be what the step's own passes say
    (1 - their busy time / (2 stages x the step's span), from the events the ranks recorded, that step's
    only), and messages only add to the textbook's bubble."""
    for name, m in (("gpipe", 4), ("1f1b", 4)):
        records = runs(2)[name]
        for step in (STEPS - 2, STEPS - 1):
            measured = schedules.bubble(pipeline.timeline(records, step))
            passes = [e for r in records for e in r.events if e["step"] == step and e["kind"] in ("F", "B")]
            assert len(passes) == 2 * 2 * m                     # each stage's forward and backward of each micro
            span = max(e["end"] for e in passes) - min(e["start"] for e in passes)
            busy = sum(e["end"] - e["start"] for e in passes)
            assert measured == pytest.approx(1 - busy / (2 * span), abs=1e-12)
            assert bubbles.bubble_fraction(2, m) * 0.5 < measured


def test_the_pipeline_pictures_are_drawn_from_the_runs():
    from distlab.widgets import display
    from distlab.widgets import pipeline as P

    picked = {("gpipe", 4): runs(2)["gpipe"], ("1f1b", 4): runs(2)["1f1b"], ("gpipe", 1): runs(2)["naive mlp"]}
    rows = P.bubble_rows(picked)
    assert [(r["schedule"], r["m"]) for r in rows] == [("1f1b", 4), ("gpipe", 1), ("gpipe", 4)]
    assert [r["held"] for r in rows] == [[2, 1], [1, 1], [4, 4]]         # counted on the ranks
    assert rows[1]["predicted"] == 0.5
    for figure in (P.bubble_figure(rows), P.timeline_figure(pipeline.timeline(runs(2)["1f1b"], 3), "1f1b", 4),
                   P.timeline_figure(None, "interleaved", 4, 2)):
        assert display.figure_png(figure).startswith(b"\x89PNG")
    explorer = P.pipeline_explorer(picked)
    assert explorer.describe("gpipe", 4).startswith("gpipe, m = 4: predicted bubble 20%, measured ")
    assert explorer.describe("1f1b", 1) == "1f1b, m = 1: predicted bubble 50% (not run)"
    assert explorer.png().startswith(b"\x89PNG")


def test_the_idle_time_of_a_real_step_is_split_into_its_causes():
    """Lesson 06: compute + recv + other is each stage's whole step, and compute is the bubble's complement."""
    from distlab.widgets import pipeline as P

    for name in ("gpipe", "1f1b"):
        records = runs(2)[name]
        rows = P.idle_breakdown(records, skip=STEPS - 1)             # the last step only: no medians mixed
        assert [r["compute"] + r["recv"] + r["other"] for r in rows] == pytest.approx([1.0, 1.0])
        bubble = schedules.bubble(pipeline.timeline(records, STEPS - 1))
        assert 1 - sum(r["compute"] for r in rows) / 2 == pytest.approx(bubble)
        assert all(r["recv"] > 0 and r["busy_s"] > 0 for r in rows)   # both stages receive, both compute
    for name in ("gpipe", "1f1b"):        # one run, one number: the median bubble of steps 2 on
        steps = [schedules.bubble(pipeline.timeline(runs(2)[name], s)) for s in range(2, STEPS)]
        assert P.run_bubble(runs(2)[name]) == pytest.approx(statistics.median(steps), abs=1e-12)


def test_at_one_micro_batch_the_one_rule_finds_no_clear_difference_between_gpipe_and_1f1b():
    """Lesson 06: at m = 1 GPipe and 1F1B are the very same passes, so the course's one rule, over
    repeated real runs (one number each, the schedules taking turns), must say "no clear difference";
    the old rule over the steps of one run named a winner here ("gpipe idles less")."""
    from distlab.widgets import pipeline as P

    assert schedules.schedule("gpipe", 2, 1) == schedules.schedule("1f1b", 2, 1)
    got = {"gpipe": [], "1f1b": []}
    for repeat in range(3):
        for name in (("gpipe", "1f1b") if repeat % 2 == 0 else ("1f1b", "gpipe")):
            records = distlab.launch(pipeline.train, world_size=2, schedule=name, micro_batches=1, steps=8,
                                     model="mlp", width=256, depth=3, global_batch_size=128, lr=LR, seed=0,
                                     progress="none")
            got[name].append(P.run_bubble(records))
    said = verdict(got["gpipe"], got["1f1b"], names=("gpipe", "1f1b"), better="lower")
    assert said.winner is None and str(said).startswith("no clear difference"), said


def test_the_compute_ceiling_runs_ranks_that_never_talk(monkeypatch):
    """distlab.measure.ceiling: 1 rank, then 2 at once, multiplying matrices; the ratio is the work per second
    of the two over the one's, from the times the ranks measured: 2 x alone / the slower of the two.
    (How large it is depends on the machine: a speed, never asserted.)"""
    from distlab.measure import ceiling
    from distlab.processes import launcher

    launches, real = [], launcher.launch

    def watched(fn, world_size, **kwargs):         # the real launches, and what their ranks measured
        launches.append((fn, world_size, kwargs, real(fn, world_size, **kwargs)))
        return launches[-1][-1]

    monkeypatch.setattr(launcher, "launch", watched)
    ratio = ceiling.ceiling(2, rows=8, width=64, repeats=20)
    assert [(fn, world, kw["rows"], kw["width"], kw["repeats"]) for fn, world, kw, _ in launches] == [
        (ceiling.compute_alone, 1, 8, 64, 20), (ceiling.compute_alone, 2, 8, 64, 20)]
    (alone,), together = launches[0][-1], launches[1][-1]
    assert len(together) == 2 and all(t > 0 for t in (alone, *together))
    assert ratio == 2 * alone / max(together)


def test_unequal_chunks_cost_interleaving_its_promise():
    """Lesson 06: with a cost per virtual stage, the simulation prices a real, uneven cut; equal costs
    given per stage give the textbook's bubble, and lesson 06's uneven four chunks give a larger one."""
    ops = schedules.schedule("interleaved", 2, 4, 2)
    equal = schedules.simulate(ops, forward=[0.5] * 4, backward=[1.0] * 4)
    assert schedules.bubble(equal) == pytest.approx(bubbles.bubble_fraction(2, 4, 2))
    work = [32_768, 262_144, 262_144, 5_120]                 # lesson 06's chunks, multiply-adds a sample
    uneven = schedules.simulate(ops, forward=work, backward=[2 * w for w in work])
    assert schedules.bubble(uneven) > bubbles.bubble_fraction(2, 4, 2) + 0.05
