"""Lesson 15 (Where the time goes), issue 39: two more "hidden or exposed" measurements read from real ranks:
FSDP2's all-gathers traced on every rank with its prefetch switched (``fsdp.PREFETCH``), and the experts'
all-to-all timed against the experts' compute (``experts.measure.exchange_vs_experts``)."""
import pytest

import distlab
from distlab.measure import traces

pytestmark = pytest.mark.usefixtures("warm_ranks")

STEP = 2
FSDP = dict(model="mlp", width=512, depth=4, batch_size=32, steps=3, lr=0.01, seed=0, progress="none")
LAYERS = ("fc1", "fc2", "fc3", "fc4", "out")


@pytest.fixture(scope="module", params=["default", "next", "next_async"])
def fsdp_traced(request, warm_ranks, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(f"fsdp_{request.param}"))
    records = distlab.launch(traces.train, world_size=2, trainer="fsdp", prefetch=request.param, trace_step=STEP,
                             trace_dir=folder, **FSDP)
    return request.param, records, [traces.read_trace(traces.trace_path(folder, r)) for r in range(2)]


def _first(t, name: str) -> float:
    return min(i["start"] for i in t.intervals if i["name"].startswith(name) and i["thread"] == "main")


def test_fsdp2_gathers_each_layer_twice_and_reduce_scatters_it_once_on_both_ranks(fsdp_traced):
    prefetch, records, got = fsdp_traced
    assert all(r.config["prefetch"] == prefetch and r.config["trainer"] == "fsdp" for r in records)
    for t in got:
        comm = [i for i in t.intervals if i["kind"] == "communication"]
        on_gloo = [i["name"] for i in comm if i["thread"] != "main"]
        assert on_gloo.count("gloo:all_gather") == 2 * len(LAYERS)     # forward and backward (freed between)
        assert on_gloo.count("gloo:all_reduce") == len(LAYERS)         # gloo's reduce-scatter is an all-reduce
        assert {f"FSDP::all_gather ({n})" for n in LAYERS} <= {i["name"] for i in comm}
        exposed = traces.exposed_communication(t.intervals)
        assert 0 < exposed <= t.seconds
        print(f"{prefetch} rank {t.rank}: step {t.seconds * 1e3:.1f} ms, exposed {exposed * 1e3:.1f} ms")


def test_an_explicit_prefetch_gathers_the_next_layer_before_this_one_computes(fsdp_traced):
    """FSDP2's default on a CPU rank gathers a layer when it is about to run (its "implicit" prefetch is a
    CUDA stream); ``next`` gathers fc2 as soon as fc1's parameters have arrived, before fc1 computes."""
    prefetch, _, got = fsdp_traced
    for t in got:
        fc2, linear = _first(t, "FSDP::all_gather (fc2)"), _first(t, "aten::linear")
        assert (fc2 < linear) == (prefetch != "default"), (prefetch, fc2, linear)


@pytest.mark.parametrize("settings, match", [
    (dict(trainer="fsdp", prefetch="sometimes"), "fsdp.train takes prefetch 'default', 'next', 'next_async'"),
    (dict(trainer="deepspeed"), "traces trainer 'data_parallel', 'fsdp', got 'deepspeed'"),
    (dict(trainer="fsdp", around_step=None), "sets around_step itself"),
])
def test_bad_settings_are_refused_before_any_process_starts(settings, match, tmp_path):
    from helpers import children

    before = children()
    with pytest.raises(ValueError, match=match):
        distlab.launch(traces.train, world_size=2, trace_step=STEP, trace_dir=str(tmp_path), **dict(FSDP, **settings))
    assert children() - before == set()


EXPERTS = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=3, experts=4, top_k=2,
               capacity_factor=1.25, aux_weight=0.1, lr=1e-2, test_lines=32, data=1, expert=2)


def test_the_experts_all_to_all_is_timed_against_their_compute(warm_ranks):
    from distlab.experts import measure
    from distlab.parallelize import trainer

    records = distlab.launch(trainer.train, 2, progress="none", all_to_all="library", **EXPERTS)
    table = measure.exchange_vs_experts(records)
    assert len(table) == EXPERTS["steps"] and all([d["rank"] for d in row] == [0, 1] for row in table)
    for step, row in enumerate(table):
        for d, r in zip(row, sorted(records, key=lambda r: r.rank)):
            assert 0 < d["all_to_all_forward"] <= d["all_to_all"] and d["experts"] > 0 and d["exposed"]
            assert d["experts_cpu"] <= d["experts"] + 1e-4
            assert d["ratio"] == pytest.approx(d["all_to_all_forward"] / d["experts"])
            moved = r.traffic_by_step[step]
            assert d["bytes"] == moved["forward"] + moved["backward"] > 0
            # the forward's exchange sits inside the timeline's dispatch and combine (0.1 ms for the two clocks)
            parts = [r.routing[step][b]["times"] for b in range(EXPERTS["depth"])]
            wall = sum(p[k][1] - p[k][0] for p in parts for k in ("dispatch", "combine"))
            assert d["all_to_all_forward"] <= wall + 1e-4
    assert sum(measure.measured_bytes(records)) == sum(d["bytes"] for row in table for d in row)
