"""Lesson 03's hand-written all-reduces against torch.distributed's own, on real processes.

One launch per world size runs every case (algorithm x op x dtype x shape), the demo trace
and, for 3 ranks, training with each collective; the tests below read its records.
"""
import time
from collections import Counter

import pytest
import torch

import distlab
from distlab.comm import collective_runs as R
from distlab.comm import collectives as C
from distlab.models import DTYPES
from distlab.comm import cost_model as M
from distlab.predict import alpha_beta as A
from distlab.data_parallel import data_parallel as dp

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

WORLD_SIZES = (2, 3, 4, 5)
TOLERANCE = {"float32": dict(rtol=1e-6, atol=1e-6), "float64": dict(rtol=1e-14, atol=1e-14)}
TRAIN = dict(method="by_hand", model="mlp", width=16, batch_size=8, steps=6, lr=0.2, seed=3,
             record_grads_at=())


def shapes_for(n):
    """Sizes that N divides and sizes it does not (1 < N leaves some chunks empty)."""
    return [(1,), (4 * n,), (4 * n + 1,), (3, 7), (1001,)]


def everything(worker, train_too=False):
    """Test worker: all comparisons, the demo trace, and (optionally) training per collective."""
    out = {"compare": R.compare_with_dist(worker, shapes=shapes_for(worker.world_size)),
           "trace": R.trace(worker, numel=min(9, 2 * worker.world_size))}
    if train_too:
        out["train"] = {}
        for dtype in ("float32", "float64"):
            for collective in ("dist", *C.ALGORITHMS):
                rec = dp.train(worker, collective=collective, dtype=dtype, **TRAIN)
                out["train"][collective, dtype] = rec.params
    return out


def absent_peer(worker, hold):
    """Test worker: rank 1 never joins the all-reduce (it sleeps), rank 0 calls the ring."""
    if worker.rank == 1:
        time.sleep(hold)
        return None
    C.ring_all_reduce(torch.ones(10))


_runs = {}


def records_for(n):
    """The records of one launch per world size, made once and shared by the tests."""
    if n not in _runs:
        _runs[n] = distlab.launch(everything, n, progress="none", train_too=(n == 3))
    return _runs[n]


@pytest.fixture(params=WORLD_SIZES, ids=lambda n: f"{n}ranks")
def run(request):
    return request.param, records_for(request.param)


def test_every_algorithm_equals_dist_all_reduce(run):
    n, records = run
    cases = records[0]["compare"]
    assert len(cases) == len(C.ALGORITHMS) * 2 * 2 * len(shapes_for(n))
    for i, case in enumerate(cases):
        for rank, rec in enumerate(records):
            got = rec["compare"][i]
            assert got["result"].shape == got["expected"].shape == case["shape"]
            assert got["result"].dtype == DTYPES[case["dtype"]]
            torch.testing.assert_close(got["result"], got["expected"], **TOLERANCE[case["dtype"]],
                                       msg=lambda m: f"{case['algorithm']} {case['op']} {case['dtype']} "
                                                     f"{case['shape']} on rank {rank} of {n}: {m}")


def test_every_rank_ends_with_bitwise_the_same_tensor(run):
    """What data parallelism needs: the replicas may not drift apart by even one rounding."""
    n, records = run
    for i, case in enumerate(records[0]["compare"]):
        first = records[0]["compare"][i]["result"]
        for rec in records[1:]:
            assert torch.equal(rec["compare"][i]["result"], first), (case["algorithm"], case["shape"])


def test_message_logs_are_the_cost_models_schedule(run):
    """Every message a rank received is one the model plans, with the same bytes, and no other."""
    n, records = run
    for i, case in enumerate(records[0]["compare"]):
        merged = M.merge_logs([rec["compare"][i]["log"] for rec in records])
        numel = torch.Size(case["shape"]).numel()
        itemsize = 4 if case["dtype"] == "float32" else 8
        plan = A.schedule(case["algorithm"], n, numel, itemsize)
        planned = Counter((s["phase"], s["step"], m["src"], m["dst"], m["chunk"], m["bytes"])
                          for s in plan for m in s["messages"])
        logged = Counter((m["phase"], m["step"], m["src"], m["dst"], m["chunk"], m["bytes"]) for m in merged)
        assert logged == planned, (case["algorithm"], n, numel)
        assert M.bytes_sent(merged, n) == A.bytes_per_rank(case["algorithm"], n, numel, itemsize)


def test_ring_sends_about_twice_the_tensor_per_rank_and_the_server_n_minus_1_times(run):
    n, records = run
    case = next(i for i, c in enumerate(records[0]["compare"])
                if c["algorithm"] == "ring" and c["shape"] == (4 * n,) and c["dtype"] == "float32")
    sent = M.bytes_sent(M.merge_logs([r["compare"][case]["log"] for r in records]), n)
    assert sent == [2 * (n - 1) * 4 * 4] * n            # 2(N-1) chunks of 4 floats each
    case = next(i for i, c in enumerate(records[0]["compare"])
                if c["algorithm"] == "parameter_server" and c["shape"] == (4 * n,))
    sent = M.bytes_sent(M.merge_logs([r["compare"][case]["log"] for r in records]), n)
    assert sent == [(n - 1) * 4 * n * 4] + [4 * n * 4] * (n - 1)


def test_trace_records_the_numbers_each_message_carried(run):
    n, records = run
    trace = R.merge_traces([r["trace"] for r in records])
    numel = min(9, 2 * n)
    total = [sum(R.demo_values(r, numel).tolist()[i] for r in range(n)) for i in range(numel)]
    for name, t in trace.items():
        assert t["world_size"] == n
        assert all(res == total for res in t["results"]), name       # e.g. 1111, 2222, ... for 4 ranks
        assert t["dist_results"] == t["results"], name
        for m in t["messages"]:
            assert m["bytes"] == 8 * len(m["values"])
            if m["phase"] in A.REDUCING:
                assert len(m["after"]) == len(m["values"])
            else:
                assert m["after"] == m["values"]                      # stored as it came
    # the ring: chunk c of rank r after reduce-scatter step s holds the digits of s+2 ranks
    sizes = A.chunk_sizes(numel, n)
    for m in trace["ring"]["messages"]:
        if m["phase"] == "reduce-scatter" and sizes[m["chunk"]]:
            contributors = sum(d != "0" for d in str(int(m["after"][0])))
            assert contributors == m["step"] + 2, m


def test_training_with_any_collective_gives_the_parameters_of_dist_all_reduce():
    n, records = 3, records_for(3)       # 3 ranks: chunks of uneven size
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
        reference = records[0]["train"]["dist", dtype]
        for collective in C.ALGORITHMS:
            for rec in records:
                diff = distlab.max_param_difference(rec["train"][collective, dtype], reference)
                assert diff < tol, (collective, dtype, diff)
        config = {k: v for k, v in TRAIN.items() if k != "method"}
        single = dp.train_single(world_size=n, dtype=dtype, **config)
        assert distlab.max_param_difference(records[0]["train"]["ring", dtype], single.params) < tol


def test_a_missing_peer_makes_the_collective_fail_after_the_timeout():
    t0 = time.time()
    with pytest.raises(distlab.WorkerError) as info:
        distlab.launch(absent_peer, 2, timeout=3, progress="none", hold=60.0)
    assert info.value.rank == 1                       # the absent one, named from rank 0's timeout (lesson 10)
    assert "stopped answering: rank 0 timed out waiting for it" in str(info.value)
    assert "Timed out" in str(info.value) or "timeout" in str(info.value).lower()
    assert time.time() - t0 < 55                      # the other rank would still be asleep


# -- bad input fails before any process starts ---------------------------------------------------
def test_bad_arguments_are_refused_before_start():
    with pytest.raises(ValueError, match="unknown algorithm 'star'"):
        distlab.launch(R.compare_with_dist, 2, algorithms=("ring", "star"))
    with pytest.raises(ValueError, match="op must be"):
        distlab.launch(R.compare_with_dist, 2, ops=("max",))
    with pytest.raises(ValueError, match="numel must be 1..9"):
        distlab.launch(R.trace, 2, numel=20)
    with pytest.raises(ValueError, match="unknown collective 'star'"):
        distlab.bind_arguments(dp.train, 2, dict(collective="star", batch_size=8))
    with pytest.raises(ValueError, match="method='by_hand'"):
        distlab.bind_arguments(dp.train, 2, dict(method="ddp", collective="ring", batch_size=8))
    with pytest.raises(ValueError, match="unknown algorithm"):
        C.all_reduce(torch.ones(3), algorithm="star")
    with pytest.raises(ValueError, match="op must be"):
        C.ring_all_reduce(torch.ones(3), op="max")
    with pytest.raises(RuntimeError, match="no torch.distributed process group"):
        C.ring_all_reduce(torch.ones(3))


@pytest.fixture
def one_rank_group(tmp_path):
    """A real one-process gloo group in the test process itself."""
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_one_rank_returns_its_own_tensor_and_refuses_non_contiguous(one_rank_group):
    for name, fn in C.ALGORITHMS.items():
        x = torch.arange(6.0).reshape(2, 3)
        out, log = fn(x, "avg")
        assert out is x and torch.equal(x, torch.arange(6.0).reshape(2, 3)) and log == [], name
        with pytest.raises(ValueError, match="contiguous"):
            fn(torch.ones(3, 4).t())


# -- the pictures read the real logs ---------------------------------------------------------------
def test_animation_colours_exactly_the_ranks_whose_digits_are_in_each_number(run):
    """The colours come from replaying the log; the digits from the numbers the ranks held."""
    from distlab.widgets import collectives as V

    n, records = run
    for name, trace in R.merge_traces([r["trace"] for r in records]).items():
        frames = V.frames(trace)
        assert len(frames) == 1 + len({(m["phase"], m["step"]) for m in trace["messages"]})
        for f in frames:
            for r in range(n):
                for value, who in zip(f["values"][r], f["who"][r]):
                    digits = {k for k, d in enumerate(reversed(str(int(value)))) if d != "0"}
                    assert digits == who, (name, f["phase"], f["step"], r, value)
        assert all(w == set(range(n)) for row in frames[-1]["who"] for w in row), name


def test_widgets_show_a_picture_and_text_without_a_widget_manager():
    import base64

    from distlab.widgets import collectives as V, costs

    traces = R.merge_traces([r["trace"] for r in records_for(4)])
    bundle = V.animation(traces["ring"])._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "application/vnd.jupyter.widget-view+json" in bundle
    text = bundle["text/plain"]
    assert text.startswith("ring all-reduce on 4 ranks: 24 messages")
    assert text.rstrip().endswith("rank 3: 1111 2222 | 3333 4444 | 5555 6666 | 7777 8888")
    link = A.Link(alpha=50e-6, beta=1 / 3e9, gamma=1 / 10e9, lanes=1)
    explorer = costs.cost_explorer(link, world_size=4, numel=1_000_000)
    bundle = explorer._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"])[:4] == b"\x89PNG"
    assert "ring" in bundle["text/plain"] and "1.50 x the tensor" in bundle["text/plain"]
    explorer.hardware.value = "a cluster"                  # the picture follows the controls
    assert explorer.link.lanes is None and "a cluster" in repr(explorer)
    with pytest.raises(ValueError, match="no values"):
        V.animation({**traces["ring"], "messages": [{k: v for k, v in m.items() if k != "after"}
                                                    for m in traces["ring"]["messages"]]})
