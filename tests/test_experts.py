"""Issue 29, begun: the mixture-of-experts layer on one process (distlab/experts/moe.py)."""
import math

import pytest
import torch

from distlab.experts.moe import MoE, MoEConfig, aux_loss, route
from distlab.predict import traffic
from distlab.predict.traffic import capacity


def test_the_capacity_is_the_factor_times_a_fair_share():
    assert capacity(64, MoEConfig(experts=4, top_k=1, capacity_factor=1.0)) == 16
    assert capacity(64, MoEConfig(experts=4, top_k=2, capacity_factor=1.25)) == 40
    assert capacity(10, MoEConfig(experts=4, top_k=1, capacity_factor=1.0)) == 3       # rounded up


def test_first_choices_are_served_first_then_in_token_order():
    """Four tokens all want expert 0 first and expert 1 second; a capacity of 2 keeps tokens 0 and 1
    at expert 0, and at expert 1 the second choices of tokens 0 and 1 (in token order)."""
    logits = torch.tensor([[3.0, 2.0, 0.0, 0.0]] * 4)
    cfg = MoEConfig(experts=4, top_k=2, capacity_factor=1.0)               # capacity 4 x 2 / 4 = 2
    r = route(logits, cfg)
    assert r.expert.tolist() == [[0, 1]] * 4
    assert r.slot.tolist() == [[0, 0], [1, 1], [2, 2], [3, 3]]
    assert r.kept.tolist() == [[True, True], [True, True], [False, False], [False, False]]
    assert torch.allclose(r.gate.sum(dim=-1), torch.ones(4))              # k = 2: renormalised over the two


def test_the_layer_equals_its_experts_weighted_by_the_gates_and_drops_what_does_not_fit():
    torch.manual_seed(0)
    cfg = MoEConfig(experts=4, top_k=2, capacity_factor=0.5)
    moe = MoE(8, 16, cfg)
    x = torch.randn(2, 12, 8)
    y = moe(x)
    flat, out = x.reshape(-1, 8), y.reshape(-1, 8)
    r = route(moe.router(flat), cfg)
    for t in range(flat.shape[0]):                                       # token by token, by the definition
        want = sum(r.gate[t, c] * moe.experts[int(r.expert[t, c])](flat[t]) for c in range(2) if r.kept[t, c])
        assert torch.allclose(out[t], want if torch.is_tensor(want) else torch.zeros(8), atol=1e-6)
    cap = capacity(24, cfg)
    assert moe.last["kept"] == [min(a, cap) for a in moe.last["asked"]]
    assert moe.last["dropped"] == sum(moe.last["asked"]) - sum(moe.last["kept"]) > 0
    y.sum().backward()
    assert moe.router.weight.grad.abs().sum() > 0                        # the router learns through the gates


def test_routing_in_groups_is_routing_each_group_alone():
    """Expert parallelism's reference: n ranks routing their own tokens equal one process routing n groups."""
    torch.manual_seed(1)
    moe = MoE(8, 16, MoEConfig(experts=4, top_k=1, capacity_factor=1.0), groups=2)
    x = torch.randn(20, 8)
    together = moe(x)
    moe.groups = 1
    apart = torch.cat([moe(half) for half in x.chunk(2)])
    assert torch.allclose(together, apart, atol=1e-6)


def test_the_balancing_loss_is_one_when_uniform_and_more_when_not():
    uniform = route(torch.zeros(8, 4) + torch.eye(4).repeat(2, 1) * 1e-3, MoEConfig(experts=4))
    assert math.isclose(aux_loss(uniform, 4).item(), 1.0, rel_tol=1e-3)
    skewed = route(torch.tensor([[5.0, 0, 0, 0]] * 8), MoEConfig(experts=4))
    assert aux_loss(skewed, 4).item() > 3.5                              # all on expert 0: close to E


def test_the_router_z_loss_is_the_squared_log_sum_exp_and_joins_the_layers_loss():
    """ST-MoE's z-loss: zero logits over 4 experts give (log 4)^2; the layer adds both losses, weighted."""
    from distlab.experts.moe import z_loss

    assert math.isclose(z_loss(torch.zeros(5, 4)).item(), math.log(4) ** 2, rel_tol=1e-6)
    torch.manual_seed(2)
    cfg = MoEConfig(experts=4, top_k=1, aux_weight=0.01, z_weight=0.001)
    moe = MoE(8, 16, cfg)
    x = torch.randn(12, 8)
    moe(x)
    logits = moe.router(x)
    want = 0.01 * aux_loss(route(logits, cfg), 4) + 0.001 * z_loss(logits)
    assert torch.allclose(moe.extra_loss, want)


@pytest.mark.parametrize("settings, match", [
    (dict(experts=2, top_k=3), "top_k=3 asks for more experts per token than the 2 there are"),
    (dict(capacity_factor=0), "capacity_factor must be a number above 0, got 0"),
    (dict(capacity_factor=-1.5), "capacity_factor must be a number above 0"),
    (dict(experts=0), "experts must be a positive integer"),
    (dict(aux_weight=-0.1), "aux_weight must be a number >= 0"),
])
def test_impossible_settings_are_refused(settings, match):
    with pytest.raises(ValueError, match=match):
        MoEConfig(**settings)


@pytest.mark.parametrize("backend, ranks, how", [("torchrun", 2, "by_hand"), ("torchrun", 4, "by_hand"),
                                                  ("torchrun", 2, "library"), ("torchrun", 4, "library"),
                                                  pytest.param("horovod", 2, "library", marks=pytest.mark.horovod)])
def test_experts_on_other_ranks_compute_what_one_process_computes(backend, ranks, how, warm_ranks):
    """Issue 29: tokens dispatched to their experts' ranks and combined back (send/recv by hand, or one
    all-to-all with split sizes), forward and backward: every output, input gradient, expert gradient
    and the summed router gradient equal one process routing the same tokens in one group a rank."""
    import distlab
    import workers

    experts = 4
    results = distlab.launch(workers.expert_layer, ranks, backend=backend, progress="none", how=how,
                             experts=experts)
    torch.manual_seed(0)
    moe = MoE(8, 16, MoEConfig(experts=experts, top_k=2, capacity_factor=1.0), groups=ranks)
    x = torch.randn(ranks * 24, 8, generator=torch.Generator().manual_seed(1)).requires_grad_()
    y = moe(x)
    (y.square().sum() + moe.extra_loss * ranks).backward()                   # every rank's loss, added up
    assert moe.last["dropped"] > 0                                      # the capacity is at work
    results = sorted(results, key=lambda r: r["rank"])
    assert torch.allclose(torch.cat([r["y"] for r in results]), y, atol=1e-5)
    assert torch.allclose(torch.cat([r["x_grad"] for r in results]), x.grad, atol=1e-5)
    assert torch.allclose(sum(r["router_grad"] for r in results), moe.router.weight.grad, atol=1e-5)
    for r in results:
        for e, grads in r["expert_grads"].items():
            for mine, theirs in zip(grads, (p.grad for p in moe.experts[e].parameters())):
                assert torch.allclose(mine, theirs, atol=1e-5)
    assert sorted(e for r in results for e in r["expert_grads"]) == list(range(experts))
    assert [sum(r["last"]["kept"][e] for r in results) for e in range(experts)] == moe.last["kept"]


def test_experts_that_do_not_spread_over_the_ranks_are_refused():
    from distlab.experts.expert_parallel import check_experts

    with pytest.raises(ValueError, match="3 experts cannot be spread over 4 expert-parallel ranks"):
        check_experts(3, 4)
    with pytest.raises(ValueError, match="6 experts do not spread evenly over 4 expert-parallel ranks"):
        check_experts(6, 4)


EP = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=20, experts=4, top_k=2,
          capacity_factor=1.0, optimizer="sgd", lr=0.1, data=1, expert=-1)


def kept_per_step(records) -> list:
    """Tokens each expert kept in each step, summed over the ranks that routed them."""
    return [[sum(sum(layer["kept"][e] for layer in r.routing[s]) for r in records) for e in range(EP["experts"])]
            for s in range(EP["steps"])]


@pytest.mark.parametrize("backend, ranks, settings", [
    ("torchrun", 2, dict(all_to_all="by_hand")), ("torchrun", 4, dict(all_to_all="library")),
    ("torchrun", 4, dict(data=2, expert=2, all_to_all="by_hand")),
    pytest.param("horovod", 2, dict(all_to_all="library"), marks=pytest.mark.horovod)],
    ids=["torchrun-2-by-hand", "torchrun-4-library", "torchrun-data2-expert2", "horovod-2-library"])
def test_the_reader_with_experts_on_ranks_trains_like_one_process(backend, ranks, settings, warm_ranks):
    """Issue 29: the line reader with 4 experts a block (top-2, capacity factor 1, tokens dropped), its
    experts spread over the ranks, alone and with data parallelism: after 20 steps every parameter
    equals one process's routing in one group a rank (within 1e-5), and every step kept the same
    tokens at every expert.  SGD: Adam divides each gradient by its own size, so the last bits of an
    expert's near-zero gradient (its tokens summed in another order) grow to 2e-5 after 20 steps."""
    import distlab
    from distlab.experts import measure
    from distlab.parallelize import trainer
    from helpers import once

    reference = once(trainer.train_single, world_size=ranks, **EP)    # the same reference for 4 ranks, twice
    records = distlab.launch(trainer.train, ranks, backend=backend, progress="none", **dict(EP, **settings))
    for r in records:                                   # a rank's record names its experts as one process does
        assert distlab.max_param_difference(r.params, {n: reference.params[n] for n in r.params}) <= 1e-5
    assert kept_per_step(records) == kept_per_step([reference])
    whole = measure.as_one_process(records)                     # the lesson's way of putting them together
    assert set(whole) == set(reference.params) and distlab.max_param_difference(whole, reference.params) <= 1e-5
    assert sum(layer["dropped"] for step in reference.routing for layer in step) > 0
    assert all(s["forward"] > 0 and s["backward"] > 0 for s in records[0].traffic_by_step)


@pytest.mark.parametrize("ranks, settings, match", [
    (4, dict(experts=2), "2 experts cannot be spread over 4 expert-parallel ranks"),
    (4, dict(experts=6), "6 experts do not spread evenly over 4 expert-parallel ranks"),
    (2, dict(top_k=5), "top_k=5 asks for more experts per token than the 4 there are"),
    (2, dict(capacity_factor=0), "capacity_factor must be a number above 0, got 0"),
    (4, dict(data=3), "does not divide the world size 4"),
    (2, dict(all_to_all="by_hand", backend="horovod"), "the all-to-all by hand is made of send/recv"),
    (2, dict(all_to_all="carrier pigeon"), "unknown all-to-all 'carrier pigeon'"),
    (4, dict(global_batch_size=18), "global_batch_size 18 does not divide into 4 shares"),
])
def test_experts_that_cannot_be_placed_are_refused_before_anything_starts(ranks, settings, match):
    import distlab
    from distlab.parallelize import trainer
    from helpers import children

    before = children()
    with pytest.raises(ValueError, match=match):
        distlab.launch(trainer.train, ranks, progress="none", **dict(EP, **settings))
    assert children() - before == set()


# ---- what lesson 13 measures (distlab/experts/measure.py) and draws (distlab/widgets/experts.py) ----------
LESSON = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=8, experts=4, top_k=2,
              capacity_factor=1.25, aux_weight=0.1, lr=1e-2, test_lines=32, data=1, expert=-1)


def lesson_records():
    """Lesson 13's run on 4 ranks, launched once for the tests that read it (helpers.launched)."""
    from distlab.parallelize import trainer
    from helpers import launched

    return launched(trainer.train, 4, all_to_all="library", **LESSON)


def test_the_formula_for_the_bytes_counts_kept_requests_that_leave_their_rank_four_times():
    from distlab.predict.traffic import all_to_all_bytes

    # 192 tokens a rank, k = 2, 4 experts: 96 requests an expert (capacity 120), 3/4 of them to other ranks
    assert all_to_all_bytes(192, 32, 2, 4, 1.25, 4, 2) == 2 * 4 * 4 * (384 * 3 / 4) * 32 * 4
    # a capacity of 48 keeps half of them
    assert all_to_all_bytes(192, 32, 2, 4, 0.5, 4, 2) == all_to_all_bytes(192, 32, 2, 4, 1.25, 4, 2) / 2
    assert all_to_all_bytes(192, 32, 2, 4, 1.25, 1, 2) == 0                # one rank: nothing crosses


def test_the_bytes_counted_on_the_ranks_are_the_matrix_off_its_diagonal(warm_ranks):
    """Issue 29: every kept request that leaves its rank crosses four times (dispatch, combine, forward and
    backward), a row of d_model float32 numbers each, and the count agrees with the formula."""
    from distlab.experts import measure

    lesson_run = lesson_records()

    row = LESSON["width"] * 4
    for step, counted in enumerate(measure.measured_bytes(lesson_run)):
        crossing = 0
        for block in range(LESSON["depth"]):
            m = measure.matrix(lesson_run, step, block)
            crossing += sum(m[i][j] for i in range(4) for j in range(4) if i != j)
        assert counted == 4 * crossing * row
    tokens = LESSON["global_batch_size"] // 4 * LESSON["digits"] * 16
    formula = traffic.all_to_all_bytes(tokens, LESSON["width"], 2, 4, 1.25, 4, LESSON["depth"])
    ratio = sum(measure.measured_bytes(lesson_run)) / len(lesson_run[0].traffic_by_step) / formula
    assert 0.8 <= ratio <= 1.1, ratio                  # below 1 where a busy expert dropped requests


def test_the_records_say_where_the_tokens_went_and_when(warm_ranks):
    from distlab.experts import measure
    from distlab.experts.expert_parallel import PHASES
    from distlab.parallelize.watch import EXAMPLES

    lesson_run = lesson_records()

    steps = LESSON["steps"]
    assert len(lesson_run[0].routing) == steps and all(len(r.traffic_by_step) == steps for r in lesson_run)
    for step in range(steps):
        for block in range(LESSON["depth"]):
            m = measure.matrix(lesson_run, step, block)
            kept = [sum(r.routing[step][block]["kept"][e] for r in lesson_run) for e in range(4)]
            assert [sum(row[j] for row in m) for j in range(4)] == kept      # one expert a rank
            asked = measure.asked(lesson_run, step, block)
            assert sum(asked) == 4 * tokens_per_rank() * 2 and sum(asked) - sum(kept) == sum(
                r.routing[step][block]["dropped"] for r in lesson_run)
        assert measure.rows_arrived(lesson_run, step) == [
            sum(sum(row[j] for row in measure.matrix(lesson_run, step, b)) for b in range(2)) for j in range(4)]
        # each rank's expert work: its blocks' CPU seconds in their experts, each no more than the wall time of
        # that block's "experts" part of the timeline (it is measured inside it; 0.1 ms for the two clocks)
        ranks = sorted(lesson_run, key=lambda r: r.rank)
        for block in range(LESSON["depth"]):
            for r, parts in zip(ranks, measure.timeline(lesson_run, step, block)):
                begin, end = parts["experts"]
                assert 0 < r.routing[step][block]["expert_cpu"] <= end - begin + 1e-4, (step, block, r.rank)
        assert measure.expert_work(lesson_run, step) == [
            sum(r.routing[step][b]["expert_cpu"] for b in range(LESSON["depth"])) for r in ranks]
        # the balance: the busiest expert's requests (all ranks' tokens, the routing counts) over the mean
        # request count, which is every token's k requests shared by the 4 experts; the worse block's
        busiest = [max(sum(r.routing[step][b]["asked"][e] for r in lesson_run) for e in range(4))
                   for b in range(LESSON["depth"])]
        fair = 4 * tokens_per_rank() * LESSON["top_k"] / LESSON["experts"]
        assert [measure.imbalance(lesson_run, block=b)[step] for b in range(LESSON["depth"])] == [
            n / fair for n in busiest]
        assert measure.imbalance(lesson_run)[step] == max(busiest) / fair
    assert len(measure.slowest_vs_mean(lesson_run)) == steps - 2
    assert measure.dropped(lesson_run) == [sum(b["dropped"] for r in lesson_run for b in r.routing[s])
                                           for s in range(steps)]
    for parts in measure.timeline(lesson_run, 3, 1):
        assert list(parts) == list(PHASES)
        ends = [b for _, b in parts.values()]
        assert all(a <= b for a, b in parts.values()) and ends == sorted(ends)
    for r in lesson_run:
        assert r.router["experts"] == 4 and len(r.router["choice"]) == LESSON["depth"]
        assert all(c.shape == (EXAMPLES, LESSON["digits"] * 16) and 0 <= c.min() and c.max() < 4
                   for c in r.router["choice"])
        assert torch.equal(r.router["choice"][0], lesson_run[0].router["choice"][0])     # every rank routes alike


def tokens_per_rank() -> int:
    return LESSON["global_batch_size"] // 4 * LESSON["digits"] * 16


def test_lesson_13s_pictures_are_drawn_from_the_records_and_move_with_their_controls(warm_ranks):
    from distlab.parallelize import trainer
    from distlab.widgets import experts as X
    from helpers import once

    lesson_run = lesson_records()
    single = [once(trainer.train_single, world_size=4, **LESSON)]
    views = [X.load_explorer({"with": lesson_run, "one process": single}), X.matrix_player(lesson_run),
             X.router_explorer(lesson_run[0].router), X.timeline_player(lesson_run)]
    for view in views:
        first = view.png()
        assert first[:4] == b"\x89PNG"
        for control in view.controls:
            old = control.value
            options = getattr(control, "options", None)
            control.value = options[1][1] if options else (control.max if old != control.max else control.min)
            assert view.png() != first, (type(view), control.description)
            control.value = old
        assert view._repr_mimebundle_()["text/plain"]
