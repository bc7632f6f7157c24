"""Issue 37: the build-it exercises of lessons 12 and 13 run the learner's function on real ranks; a correct
answer passes, and a planted mistake is caught and named (the rank, the hop or what arrived, and why)."""
import torch

from distlab.course import exercises_experts, exercises_long_lines


def merge(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * torch.exp(lse_a - lse) + out_b * torch.exp(lse_b - lse), lse


def merge_by_mean(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def merge_keeping_the_larger_lse(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * torch.exp(lse_a - lse) + out_b * torch.exp(lse_b - lse), torch.maximum(lse_a, lse_b)


def merge_unanswered(out_a, lse_a, out_b, lse_b):
    ...


def dispatch(expert, experts, ranks):
    order = torch.argsort(expert, stable=True)
    return order, torch.bincount(expert, minlength=experts).view(ranks, -1).sum(1).tolist()


def dispatch_unsorted(expert, experts, ranks):
    return torch.arange(len(expert)), torch.bincount(expert, minlength=experts).view(ranks, -1).sum(1).tolist()


def dispatch_by_rank_only(expert, experts, ranks):
    """Right ranks, but each rank's requests in reverse token order: its experts' rows interleaved wrongly."""
    key = (expert // (experts // ranks)) * len(expert) - torch.arange(len(expert))
    return torch.argsort(key), torch.bincount(expert, minlength=experts).view(ranks, -1).sum(1).tolist()


def dispatch_counts_per_expert(expert, experts, ranks):
    return torch.argsort(expert, stable=True), torch.bincount(expert, minlength=experts).tolist()


def test_the_merge_checker_passes_a_right_merge_and_names_the_mistakes(warm_ranks, capsys):
    assert exercises_long_lines.merge_partials(merge_unanswered) is None
    assert "not answered yet" in capsys.readouterr().out
    assert exercises_long_lines.merge_partials(merge) is True
    assert exercises_long_lines.merge_partials(merge_by_mean) is False
    said = capsys.readouterr().out
    assert "at hop 1 the output differs" in said and "exp(its log-sum-exp - the total's)" in said
    assert exercises_long_lines.merge_partials(merge_keeping_the_larger_lse) is False
    said = capsys.readouterr().out
    assert "at hop 1 the log-sum-exp differs" in said and "The output is right at hop 1" in said


def test_the_ring_reference_is_plain_softmax_over_the_whole_line_at_the_last_hop():
    ring = exercises_long_lines.RING
    q, k, v = exercises_long_lines._line(ring["lines"], ring["tokens"], ring["dim"], ring["seed"])
    whole = torch.softmax(q @ k.transpose(-2, -1) / ring["dim"] ** 0.5, -1) @ v
    for rank in range(4):
        last = exercises_long_lines.reference_ring(rank, 4, **ring)[-1]["output"]
        assert torch.allclose(last, whole.chunk(4, dim=1)[rank])


def test_the_dispatch_checker_passes_a_right_dispatch_and_names_the_mistakes(warm_ranks, capsys):
    assert exercises_experts.all_to_all_dispatch(...) is None
    assert exercises_experts.all_to_all_dispatch(dispatch) is True
    capsys.readouterr()
    assert exercises_experts.all_to_all_dispatch(dispatch_unsorted) is False
    assert "which it does not hold" in capsys.readouterr().out
    assert exercises_experts.all_to_all_dispatch(dispatch_by_rank_only) is False
    assert "the right requests in another order" in capsys.readouterr().out
    assert exercises_experts.all_to_all_dispatch(dispatch_counts_per_expert) is False
    assert "one count a rank (4)" in capsys.readouterr().out


def test_the_library_plan_is_what_the_expert_layer_sends():
    """The checker's reference is expert_parallel.plan_dispatch, the function the MoE layer itself uses."""
    from distlab.experts import expert_parallel

    expert = torch.tensor([3, 0, 2, 0, 1, 3])
    slot = torch.tensor([0, 0, 0, 1, 0, 1])
    order, counts = expert_parallel.plan_dispatch(expert, slot, 4, 2)
    assert order.tolist() == [1, 3, 4, 2, 0, 5]
    assert counts.tolist() == [[2, 1], [1, 2]]
