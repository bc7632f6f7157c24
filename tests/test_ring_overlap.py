"""Issue 39 (lesson 15, where the time goes): the ring's hops hidden behind its compute.

Ring attention's exchanges posted before each hop's compute (overlapped) or after it (serial) do the same
arithmetic: the same training, bit for bit, and one process's within 1e-5.  Every hop is timed; the
prediction of when a hop hides is plain arithmetic, checked by hand."""
import pytest
import torch

from test_sequence import SGD, TP, one_process

WAYS = ("overlapped", "serial")
STEPS = dict(steps=3)             # a few SGD steps: any difference in a gradient shows in the parameters


def both_ways(worker, settings):
    """Test worker: the same training twice, the ring's exchanges overlapped (``Piece``'s default) and serial:
    ``{way: (record, [piece.overlap of every piece made])}``.  No run setting picks the serial ring (the
    lesson times it with ``ring_overlap.time_ring``), so here ``parallelize`` is handed a ``split_line`` that
    asks for it."""
    from distlab.context import context_parallel as cp
    from distlab.parallelize import trainer

    split_line, runs = cp.split_line, {}
    try:
        for way in WAYS:
            made = []

            def split(*args, **kwargs):
                piece = split_line(*args, **kwargs, overlap=way == "overlapped")
                made.append(piece.overlap)
                return piece
            cp.split_line = split
            runs[way] = (trainer.train(worker, trainer.spec_of(**settings)), made)
    finally:
        cp.split_line = split_line
    return runs


RUNS = {"ring-2": (2, dict(context=2, attention="ring")),
        "ring-zigzag-causal-4": (4, dict(context=4, attention="ring", split="zigzag", causal=True))}


@pytest.mark.parametrize("name", RUNS)
def test_the_overlapped_ring_trains_as_the_serial_one_and_as_one_process(name, warm_ranks):
    """After 3 SGD steps (2 ranks; and 4 with the causal mask and zig-zag pieces, where a hop computes two
    blocks): the overlapped and the serial ring give the same losses and parameters bit for bit (the same
    arithmetic, only the waiting moved), and one process's parameters within 1e-5."""
    import distlab
    from helpers import launched

    ranks, split = RUNS[name]
    settings = dict(TP, **split, **SGD, **STEPS)
    runs = launched(both_ways, ranks, settings=settings)
    reference = one_process(split.get("causal", False), **SGD, **STEPS)
    for way in WAYS:
        records, made = [r[way][0] for r in runs], [r[way][1] for r in runs]
        assert made == [[way == "overlapped"]] * ranks                    # each rank's one piece, as asked
        difference = max(distlab.max_param_difference(r.params, reference.params) for r in records)
        print(f"\n{name} {way}: max |parameter difference| from one process = {difference:.2e}")
        assert difference <= 1e-5
    for overlapped, serial in ((r["overlapped"][0], r["serial"][0]) for r in runs):
        assert overlapped.losses == serial.losses
        assert all(torch.equal(p, serial.params[n]) for n, p in overlapped.params.items())
        assert overlapped.ring["log"] == serial.ring["log"] and overlapped.ring["bytes"] == serial.ring["bytes"]


TIMED = dict(tokens=16, heads=2, head_dim=8, repeats=2)


def test_every_hop_is_timed_on_every_rank(warm_ranks):
    """``time_ring`` on 2 real ranks: both ways agree bit for bit; each way's latest step has n hops forward
    and n backward, with non-negative compute and exposed wait (serial: the whole exchange, which holds the
    wait); the medians add up from them; a hop's bytes are K and V forward, with their gradients backward."""
    from distlab.context import ring_overlap as R
    from helpers import launched

    results = launched(R.time_ring, 2, **TIMED)
    block = TIMED["heads"] * TIMED["tokens"] * TIMED["head_dim"] * 4
    for r in results:
        assert r["identical"] and r["world_size"] == 2
        assert r["hop_bytes"] == {"forward": 2 * block, "backward": 4 * block}
        assert r["flops"] == 2 * (7 * 2 * TIMED["heads"] * TIMED["tokens"] ** 2 * TIMED["head_dim"])
        for way in ("serial", "overlapped"):
            hops = r[way]["hops"]
            assert [(h["phase"], h["hop"]) for h in hops] == [("forward", 0), ("forward", 1),
                                                              ("backward", 0), ("backward", 1)]
            assert all(h["overlap"] == (way == "overlapped") for h in hops)
            assert all(h["compute_s"] > 0 and h["wait_s"] >= 0 and h["post_s"] >= 0 for h in hops)
            assert all(h["seconds"] + 1e-6 >= h["post_s"] + h["compute_s"] + h["wait_s"] for h in hops)
            assert [h["post_s"] > 0 for h in hops] == [True, False, True, True]   # forward's last hop: no message
            assert all((h["transfer_s"] is None) == (way == "overlapped") for h in hops)
            assert all(h["transfer_s"] + 1e-6 >= h["post_s"] + h["wait_s"] for h in hops if way == "serial")
            assert [h["start"] for h in hops] == sorted(h["start"] for h in hops)
            assert r[way]["step_s"] > 0 and r[way]["compute_s"] > 0 and r[way]["wait_s"] >= 0 and r[way]["post_s"] > 0
        assert r["serial"]["transfer_s"] >= 0 and "transfer_s" not in r["overlapped"]


def test_a_hop_is_priced_by_hand():
    """A hop of 8 tokens, 2 heads of 4, fp32: a block of K is 2 x 8 x 4 x 4 = 256 bytes; forward passes K and
    V (512 bytes), backward also their gradients (1024, in two messages); a product is 2 x 2 x 8 x 8 x 4 =
    1024 FLOPs, two forward, five backward.  With alpha = 1 us, beta = 1 ns a byte, one link per rank, at
    1 GFLOP/s: forward 1 + 0.512 = 1.512 us of transfer under 2.048 us of compute (hidden); backward
    2 + 1.024 = 3.024 us under 5.12 us.  With one link for both ranks (``lanes=1``) the forward's two messages
    pass one after the other: 2 + 1.024 = 3.024 us, no longer hidden."""
    from distlab.context import ring_overlap as R
    from distlab.predict.alpha_beta import Link

    cluster, machine = Link(alpha=1e-6, beta=1e-9, lanes=None), Link(alpha=1e-6, beta=1e-9, lanes=1)
    assert R.hop_bytes(8, 2, 4) == {"forward": 512, "backward": 1024}
    assert R.hop_flops(8, 2, 4) == {"forward": 2048, "backward": 5120}
    hop = R.predict_hop(8, 2, 4, cluster, 1e9)
    assert hop["forward"]["transfer_s"] == pytest.approx(1.512e-6) and hop["forward"]["compute_s"] == 2.048e-6
    assert hop["backward"]["transfer_s"] == pytest.approx(3.024e-6) and hop["backward"]["compute_s"] == 5.12e-6
    assert hop["forward"]["hidden"] and hop["backward"]["hidden"]
    shared = R.predict_hop(8, 2, 4, machine, 1e9)["forward"]
    assert shared["transfer_s"] == pytest.approx(3.024e-6) and not shared["hidden"]
    # forward hides from 32 T^2 >= 1000 + 64 T (in ns): T >= 1 + sqrt(32.25) = 6.68, so 7 tokens;
    # backward from 80 T^2 >= 2000 + 128 T: T >= 0.8 + sqrt(25.64) = 5.86, so 6
    assert R.hiding_tokens(2, 4, cluster, 1e9) == {"forward": 7, "backward": 6, "both": 7}
    assert R.hiding_tokens(2, 4, cluster, 1e9, limit=4) == {"forward": None, "backward": None, "both": None}


def test_the_block_counts_agree_with_pytorchs_flop_counter():
    """The forward hop's two products, as ``FlopCounterMode`` counts them on one block of attention."""
    from torch.utils.flop_counter import FlopCounterMode

    from distlab.context import context_parallel as cp
    from distlab.context import ring_overlap as R

    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        cp.block_attention(q, k, v, 0, 0, causal=False)
    assert counter.get_total_flops() == R.hop_flops(8, 2, 4)["forward"]


@pytest.mark.parametrize("settings, match", [
    (dict(tokens=0), "tokens must be a positive integer, got 0"),
    (dict(heads=2.0), "heads must be a positive integer, got 2.0"),
    (dict(repeats=0), "repeats must be a positive integer, got 0"),
    (dict(causal="yes"), "causal must be True or False, got 'yes'"),
    (dict(world_size=1), "a ring needs at least 2 ranks to pass its blocks round, got world_size=1"),
])
def test_a_block_that_cannot_be_timed_is_refused_before_anything_starts(settings, match):
    from distlab.context import ring_overlap as R
    from helpers import children

    before = children()
    with pytest.raises(ValueError, match=match):
        R.measure(**settings)
    assert children() - before == set()


def test_bad_predictions_and_a_bad_way_are_refused():
    from distlab.context import context_parallel as cp
    from distlab.context import ring_overlap as R
    from distlab.predict.alpha_beta import Link
    from distlab.processes.worker import Group, Worker

    link = Link(alpha=1e-6, beta=1e-9)
    with pytest.raises(ValueError, match="flops_per_s must be a positive number of FLOP/s, got 0"):
        R.predict_hop(8, 2, 4, link, 0)
    with pytest.raises(ValueError, match="tokens must be a positive integer, got 0"):
        R.predict_hop(0, 2, 4, link, 1e9)
    alone = Worker(rank=0, world_size=2, local_rank=0, local_world_size=2, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="overlap must be True .* or False .*, got 'yes'"):
        cp.Piece(alone, Group((0, 1)), 8, overlap="yes")
