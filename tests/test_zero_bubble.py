"""Lesson 15 (issue 39, "Where the time goes"): zero-bubble pipelines.

The backward split into B (the input's gradient) and W (the parameters'), checked in one process against
the fused backward; ZB-H1 as plain data (every pass once, W after its B, the held activations, the
paper's bubble in the simulation, the message cost's arithmetic); then one launch on 2 ranks trains
ZB-H1 by hand and PyTorch's four zero-bubble schedules, each to the parameters of one process, and
the runs' own events give the measured bubble and message time.
"""
import itertools

import pytest
import torch
import workers
from helpers import launched, once, trained
from torch import nn

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.parallelize import trainer
from distlab.pipeline import pipeline, schedules, torch_pipeline, zero_bubble
from distlab.pipeline.schedules import Op
from distlab.predict import bubbles
from distlab.train import step as micro

pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS, LR, BATCH = 20, 0.2, 48          # as tests/test_pipeline.py: the one-process reference is shared
TOLERANCE = 1e-6


# -------------------------------------------------------------------------------------------
# B and W in one process: together they are the fused backward
# -------------------------------------------------------------------------------------------
class Penalised(nn.Linear):
    """A layer that adds a loss of its own (as the experts' balancing loss does), from its input and weights."""

    def forward(self, x):
        out = super().forward(x)
        self.extra_loss = 0.1 * self.weight.square().sum() + 0.3 * x.tanh().mean()
        return out


@pytest.mark.parametrize("last", [False, True], ids=["middle stage", "last stage"])
def test_b_then_w_adds_what_the_fused_backward_adds(last):
    torch.manual_seed(0)
    part = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), Penalised(8, 8), nn.ReLU(), nn.Linear(8, 5))
    x, grad, share = torch.randn(4, 6), torch.randn(4, 5), 3
    y = torch.tensor([0, 1, 2, 3])

    def run(split: bool):
        for q in part.parameters():
            q.grad = torch.full_like(q, 0.5)            # gradients of earlier micro-batches are added to
        inp = x.clone().requires_grad_()
        with micro.piece_outputs(part) as kept:
            out = part(inp)
            extra = micro.extra_losses(part)
            if last:                                    # the last stage's out is its (shared) loss
                out = (nn.functional.cross_entropy(out, y) + extra) / share
        if not split:
            if last:
                out.backward()
            else:
                micro.stage_backward(out, grad, extra, share=share)
            return inp.grad, [q.grad.clone() for q in part.parameters()]
        assert all(q.grad.eq(0.5).all() for q in part.parameters())
        inp_grad, pending = micro.input_backward(out, None if last else grad, inp, kept,
                                                 None if last else extra, share=share)
        assert all(q.grad.eq(0.5).all() for q in part.parameters())     # B touched no parameter
        micro.weight_backward(pending, share=share)
        return inp_grad, [q.grad.clone() for q in part.parameters()]

    (fused_inp, fused), (split_inp, split) = run(False), run(True)
    assert torch.allclose(split_inp, fused_inp, atol=1e-7)
    for a, b in zip(split, fused):
        assert torch.allclose(a, b, atol=1e-7)


# -------------------------------------------------------------------------------------------
# ZB-H1 as plain data
# -------------------------------------------------------------------------------------------
PM = [(p, m) for p in (1, 2, 3, 4, 5) for m in range(p, 10)]


@pytest.mark.parametrize("p,m", PM)
def test_zb_h1_runs_every_pass_once_w_after_its_b_and_holds_1f1b_peak(p, m):
    ops = schedules.schedule("zb_h1", p, m)
    for s, stage_ops in enumerate(ops):
        assert sorted(stage_ops) == sorted(Op(k, i) for k in "FBW" for i in range(m))
        at = {op: i for i, op in enumerate(stage_ops)}
        assert all(at[Op("F", i)] < at[Op("B", i)] < at[Op("W", i)] for i in range(m))
        assert schedules.held_activations(stage_ops) == bubbles.held_micro_batches("zb_h1", p, m, s) == p
    # the same peak as 1F1B's (stage 0 holds p micro-batches under both)
    assert max(schedules.held_activations(o) for o in ops) == max(
        schedules.held_activations(o) for o in schedules.schedule("1f1b", p, m))
    # without W passes, and B as the whole backward, it is 1F1B's order
    assert [[op for op in o if op.kind != "W"] for o in ops] == schedules.schedule("1f1b", p, m)


def test_zb_h1_reads_like_its_phases():
    """Warm-up as 1F1B, steady state F B W (stage s holding back its first s W's), the held W's at the end."""
    assert " ".join(map(str, schedules.zb_h1(4, 6, 0))) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5"
    assert " ".join(map(str, schedules.zb_h1(4, 6, 3))) == "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5"


@pytest.mark.parametrize("p,m", [(p, m) for p, m in PM if p > 1])
def test_simulated_bubble_is_the_papers(p, m):
    """Qi et al. 2023: idle (p-1)(T_F+T_B-T_W) for ZB-H1 against 1F1B's (p-1)(T_F+T_B+T_W): a third at equal passes."""
    zb = schedules.simulate(schedules.schedule("zb_h1", p, m), forward=1, backward=1, weight=1)
    one = schedules.simulate(schedules.schedule("1f1b", p, m), forward=1, backward=1, weight=1)   # B = 2
    assert schedules.bubble(zb) == pytest.approx(bubbles.zb_h1_bubble_fraction(p, m))
    assert schedules.bubble(zb) == pytest.approx((p - 1) / (3 * m + p - 1))
    assert schedules.bubble(one) == pytest.approx(bubbles.bubble_fraction(p, m))
    span = [max(t["end"] for row in tl for t in row) for tl in (zb, one)]
    assert [s - 3 * m for s in span] == pytest.approx([p - 1, 3 * (p - 1)])     # idle time per stage
    for f, b, w in ((1.0, 2.0, 1.0), (2.0, 1.0, 0.5), (1.5, 1.5, 1.5)):         # unequal passes, T_W <= min
        got = schedules.bubble(schedules.simulate(schedules.schedule("zb_h1", p, m), f, b, w))
        assert got == pytest.approx(bubbles.zb_h1_bubble_fraction(p, m, f, b, w))


def test_the_formula_says_where_it_stops_holding():
    with pytest.raises(ValueError, match="m >= p and T_W <= min"):
        bubbles.zb_h1_bubble_fraction(2, 4, forward=1, backward=1, weight=1.5)
    with pytest.raises(ValueError, match="m >= p"):
        bubbles.zb_h1_bubble_fraction(4, 2)
    # and indeed: a W longer than F and B no longer fits the gaps (the simulation idles more)
    zb = schedules.bubble(schedules.simulate(schedules.schedule("zb_h1", 2, 4), 1, 1, 1.5))
    assert zb > (1 * 0.5) / (4 * 3.5 + 0.5) + 0.01


def test_the_message_cost_arithmetic():
    for p, m, f, b, c in itertools.product((2, 3, 4), (1, 4, 8), (1.0, 0.7), (2.0, 1.3), (0.0, 0.25, 1.5)):
        got = schedules.bubble(schedules.simulate(schedules.schedule("gpipe", p, m), f, b, message=c))
        assert got == pytest.approx(bubbles.gpipe_bubble_with_messages(p, m, f, b, c))
        assert bubbles.gpipe_bubble_with_messages(p, m, f, b, c) == pytest.approx(
            (p - 1) * (f + b + 2 * c) / (m * (f + b) + (p - 1) * (f + b + 2 * c)))
    # every schedule of the course: free messages give the textbook, and every message only adds
    for name, p, m, v in (("gpipe", 2, 4, 1), ("1f1b", 3, 6, 1), ("interleaved", 2, 4, 2), ("zb_h1", 3, 6, 1)):
        w = 1.0 if name == "zb_h1" else 0.0
        costs = dict(forward=1 / v, backward=(1 if w else 2) / v, weight=w / v)
        free = zero_bubble.predicted(name, p, m, v, **costs)
        assert free == pytest.approx(zero_bubble.textbook(name, p, m, v))
        paid = [zero_bubble.predicted(name, p, m, v, **costs, message=c) for c in (0.05, 0.2, 1.0)]
        assert free < paid[0] < paid[1] < paid[2] < 1
    # 1F1B has no slack in its steady state: on 2 stages a round trip (two messages) per two micro-batches
    # in flight, so each micro-batch pays one message time; GPipe pays its messages once, filling and draining
    for m in (4, 8):
        spans = [max(t["end"] for row in schedules.simulate(schedules.schedule(name, 2, m), 1, 2, message=c)
                     for t in row) for name in ("1f1b", "gpipe") for c in (0.0, 0.5)]
        assert [spans[1] - spans[0], spans[3] - spans[2]] == pytest.approx([0.5 * m, 2 * 0.5])


def test_a_receive_is_paid_from_the_later_of_send_and_receive_and_overhead_idles():
    """Lesson 15: ``receive`` is a rendezvous (paid even when the message was sent long before), ``message`` is
    time in flight (hidden when the receiver comes late); ``overhead`` after every pass is idle time."""
    f, b, c, o = 1.0, 2.0, 0.25, 0.1
    for m in (1, 4, 8):
        ops = schedules.schedule("gpipe", 2, m)
        span = [max(t["end"] for row in schedules.simulate(ops, f, b, **kw) for t in row)
                for kw in ({}, dict(message=c), dict(receive=c))]
        # GPipe's stage 1 is free before each forward arrives, and stage 0 before each gradient: as a
        # message, only the first of each way costs; as a receive, all 2m do
        assert [span[1] - span[0], span[2] - span[0]] == pytest.approx([2 * c, 2 * m * c])
        one = schedules.simulate(schedules.schedule("gpipe", 1, m), f, b, overhead=o)
        assert schedules.bubble(one) == pytest.approx((2 * m - 1) * o / (m * (f + b) + (2 * m - 1) * o))
    for name, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb_h1", 1)):
        ops, w = schedules.schedule(name, 2, 4, v), 0.5 if name == "zb_h1" else 0.0
        costs = {"F": 1.0, "B": 2.0, "W": w, "receive": c, "overhead": o}
        drawn = schedules.simulate(ops, draw=lambda what, virtual: costs[what])
        assert drawn == schedules.simulate(ops, 1.0, 2.0, w, receive=c, overhead=o)


def fake_run(name: str, p: int, m: int, chunks: int, costs: dict, receive: float, overhead: float, steps: int = 4):
    """Records as ``pipeline.train`` writes them, of ranks that ran exactly as ``simulate`` says: each receive
    posted when its stage is free, each send at its pass's end."""
    from types import SimpleNamespace

    ops = schedules.schedule(name, p, m, chunks)
    line = schedules.simulate(ops, **costs, receive=receive, overhead=overhead)
    last, events = p * chunks - 1, [[] for _ in range(p)]
    for step in range(steps):
        t0 = 1000.0 * step
        for s, row in enumerate(line):
            free = t0
            for t in row:
                op, v = t["op"], t["op"].chunk * p + s
                note = dict(step=step, micro=op.micro, chunk=op.chunk, **{"pass": op.kind})
                came = (op.kind == "F" and v > 0) or (op.kind == "B" and v < last)
                if came:
                    events[s].append(dict(note, kind="recv", start=free, end=t0 + t["start"]))
                events[s].append(dict(note, kind=op.kind, start=t0 + t["start"], end=t0 + t["end"]))
                if (op.kind == "F" and v < last) or (op.kind == "B" and v > 0):
                    events[s].append(dict(note, kind="send", start=t0 + t["end"], end=t0 + t["end"]))
                free = t0 + t["end"] + overhead
    return [SimpleNamespace(rank=s, events=events[s], steps=[None] * steps,
                            config=dict(schedule=name, micro_batches=m, chunks=chunks, stage=s)) for s in range(p)]


@pytest.mark.parametrize("name,chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb_h1", 1)])
def test_measured_and_predicted_count_the_same_costs(name, chunks):
    """A run that went exactly as the simulation with a receive and an overhead: the events give back those
    costs, and the prediction with them is its measured bubble (so what is left on real ranks is real)."""
    costs = dict(forward=0.7, backward=1.3, weight=0.6 if name == "zb_h1" else 0.0)
    records = fake_run(name, 2, 4, chunks, costs, receive=0.2, overhead=0.05)
    got = zero_bubble.compare(records, skip=1)
    assert zero_bubble.message_times(records, 1) == pytest.approx([0.2] * len(zero_bubble.message_times(records, 1)))
    assert zero_bubble.pass_overheads(records, 1) == pytest.approx([0.05] * len(zero_bubble.pass_overheads(records, 1)))
    assert got["message_s"] == pytest.approx(0.2) and got["overhead_s"] == pytest.approx(0.05)
    assert got["measured"] == pytest.approx(zero_bubble.predicted(name, 2, 4, chunks, **costs, receive=0.2,
                                                                  overhead=0.05))
    assert got["with_messages"] == pytest.approx(got["measured"]) == pytest.approx(got["with_mean_costs"])
    assert got["simulated"] < got["measured"]


def test_the_spread_of_the_costs_adds_to_the_bubble():
    """Lesson 15: passes drawn from {0.5, 1.5} idle more, on average, than passes of 1.0 each: a slow pass on one
    stage is a wait on the other."""
    even = {("F", v): [1.0] for v in (0, 1)} | {("B", v): [2.0] for v in (0, 1)} | dict(receive=[0.1], overhead=[0.0])
    spread = dict(even) | {("F", v): [0.5, 1.5] for v in (0, 1)} | {("B", v): [1.0, 3.0] for v in (0, 1)}
    fixed = zero_bubble.predicted("1f1b", 2, 8, forward=1.0, backward=2.0, receive=0.1)
    assert zero_bubble.expected("1f1b", 2, 8, costs=even, draws=5) == pytest.approx(fixed)
    assert zero_bubble.expected("1f1b", 2, 8, costs=spread) > fixed + 0.02


@pytest.mark.parametrize("args,message", [
    (("zb_h1", 4, 3), "zb_h1 needs micro_batches >= stages"),
    (("zb_h1", 2, 4, 2), "chunks=2 needs schedule='interleaved'"),
])
def test_bad_zb_h1_schedules_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        schedules.schedule(*args)


def test_a_hand_written_order_with_w_needs_every_w():
    order = [[("F", 0), ("B", 0), ("W", 0), ("F", 1), ("B", 1)], [("F", 0), ("B", 0), ("W", 0), ("F", 1), ("B", 1)]]
    with pytest.raises(ValueError, match="missing W1"):
        schedules.check_order(order, 2, 2)
    assert schedules.check_order([o + [("W", 1)] for o in order], 2, 2)[0][-1] == Op("W", 1)


@pytest.mark.parametrize("fn,kwargs,message", [
    (pipeline.train, dict(schedule="zb_h1", micro_batches=1), "zb_h1 needs micro_batches >= stages"),
    (torch_pipeline.train, dict(schedule="zb_h1", micro_batches=1), "zb_h1 needs micro_batches >= stages"),
    # measured on 2 gloo ranks: PyTorch raises this on every rank, after start-up; refused here first
    (torch_pipeline.train, dict(schedule="dualpipev", micro_batches=2, depth=3),
     "ScheduleDualPipeV needs at least as many micro-batches as stages: 2 ranks x 2 chunks = 4"),
    (torch_pipeline.train, dict(schedule="interleaved_zb", micro_batches=5, depth=3, global_batch_size=40),
     "micro_batches=5 must be a multiple of 2"),
    (torch_pipeline.train, dict(schedule="zbv", micro_batches=4, depth=2), "4 stages but the model has only 3"),
    (torch_pipeline.train, dict(schedule="1f1b", micro_batches=1), "Schedule1F1B needs micro_batches >= stages"),
    (torch_pipeline.train, dict(schedule="zb2p"), "got 'zb2p'"),
])
def test_bad_zero_bubble_jobs_fail_before_any_process_starts(fn, kwargs, message, monkeypatch):
    from distlab.processes import pool

    def never(*args, **kw):
        raise AssertionError("ranks were asked for")

    monkeypatch.setattr(pool, "Pool", never)
    monkeypatch.setattr(pool, "get", never)
    with pytest.raises(ValueError, match=message):
        distlab.launch(fn, world_size=2, progress="none", **kwargs)


# -------------------------------------------------------------------------------------------
# real ranks: one launch of 2 ranks trains them all
# -------------------------------------------------------------------------------------------
def case(module="pipeline", **kwargs):
    return module, dict(dict(model="mlp", depth=3, global_batch_size=BATCH, steps=STEPS, lr=LR), **kwargs)


RUNS = {"zb_h1": case(schedule="zb_h1", micro_batches=4), "1f1b": case(schedule="1f1b", micro_batches=4),
        "zb_h1 cnn": case(model="cnn", depth=2, schedule="zb_h1", micro_batches=2),
        "torch zb_h1": case("torch_pipeline", schedule="zb_h1", micro_batches=4),
        "torch interleaved_zb": case("torch_pipeline", schedule="interleaved_zb", micro_batches=4),
        "torch zbv": case("torch_pipeline", schedule="zbv", micro_batches=4),
        "torch dualpipev": case("torch_pipeline", schedule="dualpipev", micro_batches=4)}


def runs() -> dict:
    return trained(2, RUNS, timeout=120)       # a hang (gloo's batched send/recv) fails, never waits


def reference(model: str, depth: int):
    return once(dp.train_single, model=model, depth=depth, global_batch_size=BATCH, steps=STEPS, lr=LR,
                record_grads_at=())


@pytest.mark.parametrize("name", list(RUNS))
def test_zero_bubble_schedules_train_to_the_parameters_of_one_process(name):
    records, kwargs = runs()[name], RUNS[name][1]
    ref = reference(kwargs["model"], kwargs["depth"])
    merged = pipeline.merge_params(records)
    assert sorted(merged) == sorted(ref.params) and sum(len(r.params) for r in records) == len(ref.params)
    assert distlab.max_param_difference(merged, ref.params) <= TOLERANCE
    if RUNS[name][0] == "pipeline":
        assert records[-1].losses == pytest.approx(ref.losses, abs=1e-5)


def test_zb_h1_gives_1f1bs_parameters():
    got = runs()
    assert distlab.max_param_difference(pipeline.merge_params(got["zb_h1"]),
                                        pipeline.merge_params(got["1f1b"])) <= TOLERANCE
    assert got["zb_h1"][-1].losses == pytest.approx(got["1f1b"][-1].losses, abs=1e-6)


def test_each_rank_ran_zb_h1_and_held_what_it_says():
    ops = schedules.schedule("zb_h1", 2, 4)
    for rank, record in enumerate(runs()["zb_h1"]):
        for step in (0, STEPS - 1):
            passes = [e for e in record.events if e["step"] == step and e["kind"] in ("F", "B", "W")]
            assert [Op(e["kind"], e["micro"], e["chunk"]) for e in passes] == ops[rank]
            assert max(e["held"] for e in passes) == schedules.held_activations(ops[rank]) == 2


def test_pytorchs_zb1p_is_zb_h1_written_by_hand():
    """PyTorch's ScheduleInterleavedZeroBubble with one stage a rank plans the very passes of schedules.zb_h1."""
    kinds = {"F": "F", "I": "B", "W": "W"}
    for rank, record in enumerate(runs()["torch zb_h1"]):
        planned = [Op(kinds[a[1]], int(a[2:])) for a in record.config["order"]]
        assert planned == schedules.schedule("zb_h1", 2, 4)[rank]
    assert [r.config["virtual_stages"] for r in runs()["torch zbv"]] == [[0, 3], [1, 2]]
    assert [r.config["virtual_stages"] for r in runs()["torch interleaved_zb"]] == [[0, 2], [1, 3]]


@pytest.mark.parametrize("name", ["zb_h1", "1f1b"])
def test_the_measured_bubble_and_message_time_come_from_the_events(name):
    records = runs()[name]
    got = zero_bubble.compare(records)
    assert 0 < got["measured"] < 1
    assert got["measured"] == pytest.approx(zero_bubble.measured_bubble(records))
    assert got["textbook"] == pytest.approx(1 / 13 if name == "zb_h1" else 1 / 5)   # p = 2, m = 4
    assert 0 <= got["simulated"] <= got["with_messages"] < 1
    times = zero_bubble.message_times(records)
    assert len(times) == 2 * 4 * (STEPS - 2)        # each step: 4 activations forward, 4 gradients back
    assert all(t >= 0 for t in times) and got["message_s"] > 0
    assert all(t > 0 for t in got["times"]["F"] + got["times"]["B"])
    assert any(got["times"]["W"]) == (name == "zb_h1")
    gaps = zero_bubble.pass_overheads(records)      # between a stage's passes: 7 a step (11 with W) on each
    assert len(gaps) == 2 * (4 * (3 if name == "zb_h1" else 2) - 1) * (STEPS - 2) and got["overhead_s"] > 0
    assert 0 < got["with_mean_costs"] < 1 and sorted(zero_bubble.samples(records), key=str) == sorted(
        [(k, v) for k in ("FBW" if name == "zb_h1" else "FB") for v in (0, 1)] + ["overhead", "receive"], key=str)


def test_zb_h1_on_the_transformer_with_experts_equals_one_process():
    """Lesson 12's line reader with experts in every block (their balancing losses reach W once), cut into
    2 stages through the five-axes trainer: ZB-H1 trains it to one process's parameters, as 1F1B does."""
    model = dict(width=32, heads=4, depth=2, digits=3, experts=4, top_k=2, capacity_factor=1.0, aux_weight=0.01)
    settings = dict(model, global_batch_size=16, steps=6, lr=0.05, optimizer="sgd", seed=0, test_lines=32,
                    data=1, pipeline=2, expert=1, context=1, tensor=1, micro_batches=2, schedule="zb_h1")
    ranks = launched(workers.five_axes, 2, cases={"zb_h1": settings}, timeout=120)
    reference = trainer.train_single(world_size=2, **settings)
    assert distlab.max_param_difference(trainer.assemble([r["zb_h1"] for r in ranks]), reference.params) <= 1e-5
