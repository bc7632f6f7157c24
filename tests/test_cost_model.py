"""Lesson 03's alpha-beta model: exact bytes, the closed forms of its table, the fit, a real measurement."""
import math

import pytest
import torch

import distlab
from distlab.comm import cost_model as M
from distlab.comm import measure_costs as MC
from distlab.comm.collectives import ALGORITHMS
from distlab.predict import alpha_beta as A

CLUSTER = A.Link(alpha=5e-6, beta=1e-9, gamma=2e-10, lanes=None)    # one link per rank
ONE_LANE = A.Link(alpha=5e-6, beta=1e-9, gamma=2e-10, lanes=1)


def test_chunk_sizes_are_those_of_tensor_split():
    for n in range(0, 40):
        for world in range(1, 9):
            assert A.chunk_sizes(n, world) == [c.numel() for c in torch.arange(n).tensor_split(world)]


@pytest.mark.parametrize("world", [2, 3, 4, 5, 8, 16, 64])
def test_ring_sends_about_twice_the_tensor_per_rank_whatever_n(world):
    numel = 1_000_000
    n = 4 * numel
    ring = A.bytes_per_rank("ring", world, numel)
    assert max(ring) - min(ring) <= 2 * 4 * world            # within a float or so of each other
    assert abs(sum(ring) / world - 2 * (world - 1) / world * n) <= 8 * world
    assert max(ring) < 2 * n
    server = A.bytes_per_rank("parameter_server", world, numel)
    assert server == [(world - 1) * n] + [n] * (world - 1)   # grows with N
    tree = A.bytes_per_rank("tree", world, numel)
    assert max(tree) == math.ceil(math.log2(world)) * n


@pytest.mark.parametrize("world", [2, 3, 4, 5, 7, 8, 13, 16])
def test_predicted_times_are_the_closed_forms_of_the_docstring_table(world):
    a, b, g = CLUSTER.alpha, CLUSTER.beta, CLUSTER.gamma
    numel = 12_345
    n, c = 4 * numel, 4 * math.ceil(numel / world)
    levels = math.ceil(math.log2(world))
    expected = {"naive": 2 * (world - 1) * (a + n * b) + (world - 1) * n * g,
                "parameter_server": 2 * (world - 1) * (a + n * b) + (world - 1) * n * g,
                "ring": 2 * (world - 1) * (a + c * b) + (world - 1) * c * g,
                "tree": 2 * levels * (a + n * b) + levels * n * g}
    for name in ALGORITHMS:
        assert A.predict_time(name, world, numel, CLUSTER) == pytest.approx(expected[name], rel=1e-12), name


def test_one_lane_slows_the_ring_but_not_the_parameter_server():
    for world in (2, 4, 8):
        ring_here, ring_cluster = (A.predict_time("ring", world, 10**6, link) for link in (ONE_LANE, CLUSTER))
        assert ring_here > 1.5 * ring_cluster
        assert A.predict_time("parameter_server", world, 10**6, ONE_LANE) == pytest.approx(
            A.predict_time("parameter_server", world, 10**6, CLUSTER))
        assert A.predict_time("naive", world, 10**6, ONE_LANE) == pytest.approx(
            A.predict_time("naive", world, 10**6, CLUSTER))


def test_on_a_cluster_the_ring_wins_for_big_tensors_and_the_tree_for_small_ones():
    world = 16
    big = {name: A.predict_time(name, world, 10**7, CLUSTER) for name in ALGORITHMS}
    small = {name: A.predict_time(name, world, 10, CLUSTER) for name in ALGORITHMS}
    assert min(big, key=big.get) == "ring"
    assert min(small, key=small.get) == "tree"


def test_schedules_move_every_rank_s_numbers_to_every_rank():
    """Replay a schedule on sets of contributors: afterwards every rank has everyone's."""
    for name in ALGORITHMS:
        for world in range(1, 10):
            numel = 2 * world + 1
            have = [[{r} for _ in range(world)] for r in range(world)]   # have[rank][chunk]
            for step in A.schedule(name, world, numel):
                before = [[set(c) for c in row] for row in have]
                for m in step["messages"]:
                    chunks = range(world) if m["chunk"] is None else [m["chunk"]]
                    for c in chunks:
                        if step["phase"] in A.REDUCING:
                            have[m["dst"]][c] |= before[m["src"]][c]
                        else:
                            have[m["dst"]][c] = set(before[m["src"]][c])
            assert all(c == set(range(world)) for row in have for c in row), (name, world)


def test_fit_recovers_alpha_and_beta():
    sizes = [8, 800, 8_000, 80_000, 800_000, 8_000_000]
    alpha, beta = 40e-6, 1 / 3e9
    exact = [alpha + s * beta for s in sizes]
    assert M.fit_line(sizes, exact) == pytest.approx((alpha, beta), rel=1e-9)
    g = torch.Generator().manual_seed(0)
    noisy = [t * (1 + 0.05 * float(torch.randn(1, generator=g))) for t in exact]
    a, b = M.fit_line(sizes, noisy)
    assert a == pytest.approx(alpha, rel=0.15) and b == pytest.approx(beta, rel=0.15)
    with pytest.raises(ValueError):
        M.fit_line([8], [1e-5])
    with pytest.raises(ValueError):
        M.fit_line([8, 16], [1e-5, 0.0])


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="unknown algorithm"):
        A.predict_time("star", 4, 10, CLUSTER)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        distlab.launch(MC.measure, 1)
    with pytest.raises(ValueError, match="sizes must be positive"):
        distlab.launch(MC.measure, 2, sizes=(0,))
    with pytest.raises(ValueError, match="unknown algorithm"):
        distlab.launch(MC.measure, 2, algorithms=("ring", "star"))


def test_a_real_measurement_fits_a_link_and_times_every_algorithm():
    sizes = (1_000, 20_000)
    rec = distlab.launch(MC.measure, 2, progress="none", sizes=sizes, repeats=3,
                         ping_pong_bytes=(8, 8_000, 80_000, 800_000))
    assert rec[0]["times"] == rec[1]["times"]                  # the slowest rank's time, on both
    r = rec[0]
    assert r["world_size"] == 2 and set(r["times"]) == {*ALGORITHMS, MC.BASELINE}
    for name, by_size in r["times"].items():
        assert list(by_size) == list(sizes) and all(len(t) == 3 and min(t) > 0 for t in by_size.values())
    link = M.fit_link(r["ping_pong"], r["add"])
    assert 0 < link.alpha < 0.05 and 0 < link.beta < 1e-6 and link.gamma > 0
    assert len(r["ping_pong"]["exchange_seconds"]) == len(r["ping_pong"]["round_trip_seconds"]) == 1
    assert link.lanes in (1, 2, 3, 4)
    # the model orders what it must: a bigger tensor takes longer
    assert A.predict_time("ring", 2, sizes[1], link) > A.predict_time("ring", 2, sizes[0], link)


def test_lanes_come_from_two_messages_at_once():
    """Two messages at once against the same two one after the other, timed side by side."""
    alpha, beta = 50e-6, 1 / 3e9
    sizes = [8, 8_000, 800_000, 8_000_000]
    one = [alpha + b * beta for b in sizes]
    ping = {"bytes": sizes, "seconds": one, "exchange_bytes": sizes[2:],
            "round_trip_seconds": [2 * t for t in one[2:]]}
    for together, lanes in ((2.0, 1), (1.0, 2), (2.3, 1), (1.7, 1)):   # pair as slow as 2, 1, 2.3, 1.7 messages
        ping["exchange_seconds"] = [together * t for t in one[2:]]
        link = M.fit_link(ping)
        assert link.lanes == lanes
        # the model prices a step of the two messages at once at the round trip over the lanes
        step = A.schedule("ring", 2, 2 * sizes[-1], itemsize=1)[-1]        # all-gather: no adding
        assert A.step_time(step, link, 2) == pytest.approx(2 * one[-1] / lanes, rel=1e-6)
    del ping["exchange_seconds"], ping["exchange_bytes"], ping["round_trip_seconds"]
    assert M.fit_link(ping).lanes == 1


def test_large_messages_and_adds_fit_lines_of_their_own():
    """Lesson 03: data that no longer fits in the caches costs more per byte: a second line."""
    alpha, beta, gamma = 50e-6, 1 / 6e9, 1 / 15e9
    slow, slow_add = (-0.5e-3, 1 / 2.5e9), (-0.2e-3, 1 / 8e9)   # the large-data lines
    sizes = [8, 8_000, 800_000, 4_000_000, 8_000_000, 40_000_000]
    seconds = [max(alpha + b * beta, slow[0] + b * slow[1]) for b in sizes]
    added = [max(b * gamma, slow_add[0] + b * slow_add[1]) for b in sizes[1:]]
    link = M.fit_link({"bytes": sizes, "seconds": seconds}, {"bytes": sizes[1:], "seconds": added})
    assert link.alpha == pytest.approx(alpha, rel=1e-6) and link.beta == pytest.approx(beta, rel=1e-6)
    assert link.large == pytest.approx(slow, rel=1e-6) and link.large_add == pytest.approx(slow_add, rel=1e-6)
    for b, t in zip(sizes, seconds):                 # the model reproduces every measurement
        assert link.message_seconds(b) == pytest.approx(t, rel=1e-6)
    for b, t in zip(sizes[1:], added):
        assert link.add_seconds(b) == pytest.approx(t, rel=1e-6)
    # the knee: below it the small-message line, above it the large one
    assert link.copy_seconds(800_000) == pytest.approx(800_000 * beta)
    assert link.copy_seconds(40_000_000) > 40_000_000 * beta
    # a ring step is priced with both lines: 2 ranks, 40 MB, 20 MB chunks; one lane, so the
    # two messages of the step take turns
    step = A.schedule("ring", 2, 10_000_000)[0]
    assert A.step_time(step, link, 2) == pytest.approx(
        2 * alpha + 2 * link.copy_seconds(20_000_000) + link.add_seconds(20_000_000))
    # a large line that starts high (a fitting artefact) never prices a small message
    steep = A.Link(alpha, beta, gamma, 1, large=(400e-6, 1 / 2.5e9), large_add=(300e-6, 1 / 8e9))
    assert steep.message_seconds(8) == pytest.approx(alpha + 8 * beta)
    assert steep.add_seconds(800_000) == pytest.approx(800_000 * gamma)
    assert steep.message_seconds(A.LARGE) == pytest.approx(400e-6 + A.LARGE / 2.5e9)
    # with one large measurement only there is nothing to fit a second line to
    one = M.fit_link({"bytes": sizes[:4], "seconds": seconds[:4]})
    assert one.large is None and one.large_add is None


def _repeats(times: dict, world_size: int, spread=(1.0, 1.02, 0.98)) -> list[dict]:
    """Independent repeats of one measurement: every time scaled by a repeat's factor."""
    return [{"world_size": world_size, "dtype": "float32",
             "times": {a: {n: [t * f for t in ts] for n, ts in by.items()} for a, by in times.items()}}
            for f in spread]


def test_the_verdict_is_computed_from_the_measurement():
    """Lesson 03 prints this instead of asserting that the model is right: a disagreement shows."""
    link = A.Link(alpha=1e-4, beta=1e-9, gamma=0.0, lanes=1)
    times = {"ring": {1000: [3e-3, 3.1e-3, 3.2e-3]}, "tree": {1000: [1e-3, 1.05e-3, 1.1e-3]},
             "parameter_server": {1000: [2e-3, 2e-3, 2e-3]}, "naive": {1000: [5e-3, 5e-3, 5e-3]},
             "gloo": {1000: [1e-3]}}
    runs = _repeats(times, 4)
    rows = MC.compare(runs[0], link)
    said = MC.verdict(runs, rows)
    picked = MC.model_pick([r for r in rows if "predicted" in r])
    assert "tree lower: a clear difference" in said
    if {"tree", "parameter_server"} <= set(picked):
        assert "the tie disagrees" in said
    else:
        assert ("agrees" if picked == ["tree"] else "disagrees") in said
    # the same two algorithms, repeats that allow either order: no winner, nothing to agree with
    times["tree"][1000] = [2e-3, 2e-3, 2e-3]
    said = MC.verdict(_repeats(times, 4, spread=(1.0, 1.3, 0.8)), rows)
    assert "no clear difference: the runs allow either order" in said


def _two_ranks(fastest: str) -> list[dict]:
    """Repeats of a 2-rank measurement in which ``fastest`` won clearly; the others take turns behind it."""
    order = [fastest] + [a for a in ("tree", "parameter_server", "naive", "ring") if a != fastest]
    return _repeats({a: {1000: [1e-3 * (i + 1)] * 3} for i, a in enumerate(order)}, 2)


def test_a_predicted_tie_is_tested_as_a_tie():
    """At N = 2 naive, parameter server and tree send the same two messages: the model ties them,
    so a clear winner among them contradicts the tie, and no clear difference leaves it standing."""
    link = A.Link(alpha=1e-4, beta=1e-9, gamma=1e-10, lanes=1)
    runs = _two_ranks("tree")
    rows = MC.compare(runs[0], link)
    assert MC.model_pick([r for r in rows if "predicted" in r]) == ["naive", "parameter_server", "tree"]
    said = MC.verdict(runs, rows)
    assert "tree lower: a clear difference" in said
    assert ("the model predicts a tie between naive, parameter_server, tree, but the stopwatch separates "
            "tree and parameter_server: the tie disagrees") in said
    assert ": agrees" not in said and ": disagrees" not in said
    even = _repeats({a: {1000: [1e-3] * 3} for a in ("tree", "parameter_server", "naive", "ring")}, 2,
                    spread=(1.0, 1.3, 0.8))
    assert "tree: not contradicted" in MC.verdict(even, rows)


def test_the_verdict_says_disagrees_when_the_measured_winner_is_not_among_the_model_s_picks():
    link = A.Link(alpha=1e-4, beta=1e-9, gamma=1e-10, lanes=1)
    runs = _two_ranks("ring")                  # the model prices the ring slowest at N = 2
    said = MC.verdict(runs, MC.compare(runs[0], link))
    assert "ring lower: a clear difference" in said
    assert "the model picked naive, parameter_server, tree: disagrees" in said
