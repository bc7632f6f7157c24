"""Issue 36: the course's formulas, in ``distlab.predict``, each held to a ground truth: a count on a
real model (PyTorch's FLOP counter, the parameters the real cut and the real slices hold, the
schedules' own op lists), or a published figure.  Nothing here starts a process."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from distlab.models import build_model, count_parameters
from distlab.pipeline import schedules, stages
from distlab.tensor import tensor_parallel as mlp_tp
from distlab.predict import alpha_beta, bubbles, flops, memory, stage_cut, traffic

SAMPLE = torch.zeros(1, 1, 8, 8)


# ---------------------------------------------------------------------------------------------
# FLOPs per training step, against torch.utils.flop_counter on a real forward and backward
# ---------------------------------------------------------------------------------------------
def counted_flops(model, inputs, loss) -> int:
    with FlopCounterMode(display=False) as counter:
        loss(model(inputs)).backward()
    return counter.get_total_flops()


# the stated tolerance of the 3 x forward rule: it counts the first layer's input gradient, which no one
# computes; that is most of the gap for a small MLP whose first layer is as big as the rest
@pytest.mark.parametrize("model, width, depth, tolerance", [("mlp", 64, 2, 0.20), ("mlp", 1024, 2, 0.02),
                                                             ("mlp", 256, 3, 0.05), ("cnn", 16, 2, 0.02)])
def test_training_flops_are_what_pytorch_counts(model, width, depth, tolerance):
    batch = 32
    net = build_model(model, width, depth=depth)
    y = torch.randint(0, 10, (batch,))
    counted = counted_flops(net, torch.randn(batch, 1, 8, 8), lambda out: F.cross_entropy(out, y))
    assert flops.training_flops(model, width, batch, depth, exact=True) == counted
    rule = flops.training_flops(model, width, batch, depth)
    assert counted < rule <= counted * (1 + tolerance)
    assert rule == 3 * flops.flops_per_sample(model, width, depth) * batch


@pytest.mark.parametrize("causal", [False, True])
def test_the_transformers_training_flops_are_what_pytorch_counts(causal):
    """Lesson 12's line reader: projections, the scores and the weighted values (s^2 h each), the MLP,
    the embedding and the read-out; the causal model computes every score too."""
    from distlab.sequence.transformer import TransformerConfig, build_transformer

    cfg = TransformerConfig(d_model=32, heads=4, layers=2, causal=causal)
    batch, tokens = 3, 4 * 16
    counted = counted_flops(build_transformer(cfg), torch.randn(batch, tokens, 4),
                            lambda out: out[0].sum() + out[1].sum())
    assert flops.transformer_training_flops(cfg, batch, tokens, exact=True) == counted
    assert abs(flops.transformer_training_flops(cfg, batch, tokens) / counted - 1) < 0.01   # the rule, within 1%
    shape = flops.TransformerShape(d_model=32, heads=4, layers=2, causal=causal)       # plain numbers, same count
    assert flops.transformer_training_flops(shape, batch, tokens, exact=True) == counted


def test_layer_costs_are_one_multiply_add_per_weight_and_position():
    assert flops.layer_costs(build_model("mlp", 32), SAMPLE) == [0, 64 * 32, 0, 32 * 32, 0, 32 * 10]
    assert flops.layer_costs(build_model("cnn", 16), SAMPLE)[2] == 16 * 32 * 9 * 64


# ---------------------------------------------------------------------------------------------
# the stage cut and what each stage holds: against the real cut and the real slices
# ---------------------------------------------------------------------------------------------
def test_the_balanced_cut_minimises_the_busiest_stage():
    assert stage_cut.balanced_starts([1, 1, 1, 1], 2) == [0, 2]
    assert stage_cut.balanced_starts([1, 100, 1], 2) == [0, 1]            # ties: the first cut found
    assert stage_cut.balanced_starts([3, 1, 1, 1, 1, 1], 3) == [0, 1, 3]
    assert stage_cut.stage_of([0, 1, 3], 6) == [0, 1, 1, 2, 2, 2]
    with pytest.raises(ValueError, match="3 stages but only 2 layers"):
        stage_cut.balanced_starts([1, 2], 3)


@pytest.mark.parametrize("model, width, depth, pipeline", [("mlp", 2048, 2, 2), ("mlp", 64, 3, 2), ("mlp", 64, 3, 4),
                                                            ("mlp", 96, 4, 3), ("cnn", 16, 2, 2), ("cnn", 8, 2, 3)])
def test_each_stage_holds_the_parameters_of_the_real_cut(model, width, depth, pipeline):
    net = build_model(model, width, depth=depth)
    parts = stages.split(net, pipeline, SAMPLE)
    held = memory.held(memory.layers(net, SAMPLE), pipeline)
    assert [dense for dense, _ in held] == [count_parameters(part) for part in parts]


def _fake(rank: int):
    """A rank for building the real slices in one process: they read only the rank and the group."""
    return SimpleNamespace(rank=rank)


def test_a_tensor_rank_holds_the_real_slices_and_the_rest_whole():
    for depth, width in ((3, 64), (2, 2048)):
        net = build_model("mlp", width, depth=depth)
        mine = dict(net.named_children())
        mine["fc2"] = mlp_tp.ColumnParallelLinear(net.fc2, _fake(0), [0, 1], mlp_tp.Traffic())
        if depth == 3:
            mine["fc3"] = mlp_tp.RowParallelLinear(net.fc3, _fake(0), [0, 1], mlp_tp.Traffic())
        real = sum(count_parameters(m) for m in mine.values())
        assert memory.held(memory.layers(net, SAMPLE, tensor=mlp_tp.SPLIT), tensor=2) == [(real, 0.0)]


def test_lesson_12s_tensor_and_lesson_13s_expert_ranks_hold_what_the_model_says():
    from distlab.experts.expert_parallel import ExpertParallelMoE
    from distlab.experts.moe import MoEConfig, add_experts
    from distlab.tensor import heads_split as heads
    from distlab.sequence.transformer import TransformerConfig, build_transformer

    cfg = TransformerConfig(d_model=32, heads=4, layers=2)
    whole = build_transformer(cfg)
    split = heads.split_model(build_transformer(cfg), _fake(1), [0, 1], mlp_tp.Traffic())
    assert memory.held(memory.layers(whole, tensor=heads.SPLIT), tensor=2) == [(count_parameters(split), 0.0)]
    moe = add_experts(build_transformer(cfg), MoEConfig(experts=4), seed=0)
    spread = add_experts(build_transformer(cfg), MoEConfig(experts=4), seed=0)
    for block in spread.blocks:
        block.mlp = ExpertParallelMoE(block.mlp, _fake(1), [0, 1])
    (dense, experts), = memory.held(memory.layers(moe, expert=(".experts.",)), expert=2)
    assert dense + experts == count_parameters(spread)
    assert experts == sum(p.numel() for n, p in spread.named_parameters() if ".experts." in n)


def test_lesson_08s_width_2048_mlp_on_8_ranks():
    """Issue 36: fc2 holds 96.5% of the parameters and does as much of the work, so the stage that holds
    it holds nearly everything: about 42 MB per rank for 2 stages and 25 MB for 2 x 2 x 2 at ZeRO-1, Adam
    in fp32 (an even cut, the old figure, said 21.7 and 13.0)."""
    layers = memory.layers(build_model("mlp", 2048), SAMPLE, tensor=mlp_tp.SPLIT)
    setting = dict(stage=1, optimizer="adam", precision="fp32")
    fullest = {(p, t): memory.per_rank(layers, 8, pipeline=p, tensor=t, **setting).total / 1e6
               for p, t in ((1, 1), (2, 1), (1, 2), (2, 2))}
    assert {k: round(v, 1) for k, v in fullest.items()} == {(1, 1): 39.1, (2, 1): 42.2, (1, 2): 22.5, (2, 2): 25.4}
    even = memory.per_rank(count_parameters(build_model("mlp", 2048)), 8, pipeline=2, tensor=2, **setting)
    assert round(even.total / 1e6, 1) == 13.0
    stages_2 = memory.per_stage(layers, 8, pipeline=2, **setting)
    assert stages_2[0].total < stages_2[1].total / 20                     # fc1 alone, against fc2 and out


def test_zero_shards_each_part_over_the_ranks_that_hold_a_copy_of_it():
    layers = [memory.Layer("dense", 100.0), memory.Layer("moe", 400.0, expert_split=400.0)]
    # 8 ranks, 2 expert ranks: the dense part has 8 copies, each expert 4; ZeRO-3 divides each by its copies
    m = memory.per_rank(layers, 8, stage=3, expert=2, optimizer="sgd", precision="fp32")
    assert m.params == pytest.approx(4 * (100 / 8 + 400 / 2 / 4))
    with_context = memory.per_rank(layers, 8, stage=0, context=2, expert=2, optimizer="sgd", precision="fp32")
    assert with_context.params == 4 * (100 + 200)                        # context ranks hold it all
    with pytest.raises(ValueError, match="pipeline x tensor x context x expert = 16"):
        memory.per_rank(layers, 8, context=4, expert=4)


# ---------------------------------------------------------------------------------------------
# bytes, bubbles
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_the_ring_closed_forms_come_from_the_ring_schedule(world):
    numel = 1_000 * world
    sent = alpha_beta.bytes_per_rank("ring", world, numel)
    assert alpha_beta.ring_bytes(4 * numel, world) == sent[0] == pytest.approx(2 * (world - 1) / world * 4 * numel)
    halves = alpha_beta.ring_bytes(4 * numel, world, "reduce_scatter") + alpha_beta.ring_bytes(4 * numel, world,
                                                                                              "all_gather")
    assert halves == pytest.approx(sent[0])
    link = alpha_beta.Link(alpha=30e-6, beta=1 / 3e9, gamma=0.0, lanes=None)
    assert alpha_beta.all_reduce_seconds(4 * numel, world, link.alpha, link.beta) == pytest.approx(
        alpha_beta.predict_time("ring", world, numel, link), rel=1e-12)


def test_pipeline_bytes_are_each_stages_output_forward_and_input_gradient_backward():
    # 4 virtual stages on 2 ranks (interleaved): rank 0 holds stages 0 and 2, rank 1 stages 1 and 3
    assert traffic.pipeline_bytes(8, [5, 6, 7, 10], 0, 2) == 8 * (5 + (7 + 6)) * 4
    assert traffic.pipeline_bytes(8, [5, 6, 7, 10], 1, 2) == 8 * ((6 + 5) + 7) * 4
    assert traffic.pipeline_bytes(8, [64, 10], 1) == 8 * 64 * 4          # the last stage: gradients only


def test_context_parallel_bytes_count_the_ring_hops():
    piece = 8 * (512 // 4) * 64 * 4                      # K or V of one rank's piece, 4 ranks
    ring = traffic.context_parallel_bytes(8, 512, 64, 4, layers=2)
    assert ring == {"forward": 2 * 2 * 3 * piece, "backward": 2 * (4 * 3 + 2) * piece}
    gathered = traffic.context_parallel_bytes(8, 512, 64, 4, attention="all_gather")
    assert gathered == {"forward": 2 * 8 * 512 * 64 * 4, "backward": 2 * 8 * 512 * 64 * 4}
    assert traffic.context_parallel_bytes(8, 512, 64, 1) == {"forward": 0, "backward": 0}


def test_sequence_parallelism_sends_what_tensor_parallelism_sends_plus_the_gather():
    b, s, h, L, n = 4, 64, 32, 2, 4
    tp = traffic.tensor_parallel_wire_bytes(b, s, h, L, n)
    assert tp == 4 * L * 2 * (n - 1) / n * b * s * h * 4
    assert traffic.tensor_parallel_wire_bytes(b, s, h, L, n, sequence_parallel=True) == tp + (n - 1) / n * b * s * h * 4
    assert traffic.tensor_parallel_bytes(b, h, tokens=s, regions=2 * L, sequence_parallel=True) == {
        k: 2 * v for k, v in traffic.tensor_parallel_bytes(b, h, tokens=s, regions=2 * L).items()}


def test_the_bubble_formulas_name_every_schedule_the_course_writes():
    assert bubbles.SCHEDULES == tuple(schedules.SCHEDULES)
    assert bubbles.bubble_fraction(4, 8) == 3 / 11 and bubbles.bubble_fraction(4, 8, 2) == 3 / 19
    with pytest.raises(ValueError, match="unknown schedule"):
        bubbles.held_micro_batches("zigzag", 2, 4, 0)


def test_the_ring_sends_more_than_the_all_gather_by_3n_minus_2_over_2n_minus_2():
    """Issue 37: backward, K, V, dK and dV travel each hop, and the gradients one more: 5/3 at 4 ranks."""
    for n in (2, 4, 8):
        ring = traffic.context_parallel_wire_bytes(8, 512, 64, n, layers=2)
        gathered = traffic.context_parallel_wire_bytes(8, 512, 64, n, layers=2, attention="all_gather")
        assert abs(ring / gathered - (3 * n - 2) / (2 * (n - 1))) < 1e-9


def test_the_ring_builds_a_block_of_scores_each_hop():
    """Issue 37: at 8,192 tokens on 4 ranks, 8 lines of 4 heads, one (s/c)^2 block is 512 MiB."""
    from distlab.predict.activations import korthikanti_layer_bytes, score_block_bytes
    from distlab.sequence.transformer import TransformerConfig

    cfg = TransformerConfig(d_model=32, heads=4, layers=2, max_digits=512, causal=True)
    assert score_block_bytes(cfg, 8, 8192, context=4) == 512 * 2**20
    assert score_block_bytes(cfg, 8, 8192, context=4, split="zigzag") == 128 * 2**20
    assert score_block_bytes(cfg, 8, 8192) == 4 * 8 * 8192 ** 2 * 4
    s, b, h, a = 2048, 1, 4096, 32              # Korthikanti's equations: SP divides the whole by t
    assert korthikanti_layer_bytes(s, b, h, a) == s * b * h * (34 + 5 * a * s / h)
    assert korthikanti_layer_bytes(s, b, h, a, tensor=8, sequence_parallel=True) == \
        korthikanti_layer_bytes(s, b, h, a) / 8


def test_korthikantis_count_under_recomputation():
    """Lesson 14: their table 2: selective recomputation drops the 5as/h term, full keeps 2sbh a layer."""
    from distlab.predict.activations import korthikanti_layer_bytes

    s, b, h, a = 2048, 1, 4096, 32
    assert korthikanti_layer_bytes(s, b, h, a, recompute="selective") == 34 * s * b * h
    assert korthikanti_layer_bytes(s, b, h, a, tensor=8, recompute="selective") == s * b * h * (10 + 24 / 8)
    assert korthikanti_layer_bytes(s, b, h, a, tensor=8, sequence_parallel=True, recompute="selective") == \
        34 * s * b * h / 8
    assert korthikanti_layer_bytes(s, b, h, a, recompute="full") == 2 * s * b * h
    assert korthikanti_layer_bytes(s, b, h, a, tensor=8, sequence_parallel=True, recompute="full") == 2 * s * b * h / 8
    with pytest.raises(ValueError, match="recompute must be"):
        korthikanti_layer_bytes(s, b, h, a, recompute="some")


def test_offload_moves_the_zero_offload_papers_bytes_to_the_host():
    """Lesson 14: Ren et al. 2021 (ZeRO-Offload, section 4.1): on one GPU with Adam in mixed precision the
    GPU keeps the 16-bit parameters (2 Psi), the host the gradients and the optimizer's 12 Psi, and each
    step moves 4 Psi bytes (the gradients down, the parameters up)."""
    from distlab.predict import memory

    psi = 1e9
    got = memory.offload_bytes(psi, 1, "optimizer", stage=0, optimizer="adam")
    assert got == {"device": 2 * psi, "host": 14 * psi, "traffic": 4 * psi}
    assert memory.offload_bytes(psi, 1, "none")["host"] == 0
    sharded = memory.offload_bytes(psi, 8, "optimizer", stage=2)     # ZeRO-2: this rank's shard goes and comes
    assert sharded["traffic"] == pytest.approx(4 * psi / 8)
    assert memory.offload_bytes(psi, 8, "params", stage=3)["device"] == 0
    with pytest.raises(ValueError, match="offload must be one of"):
        memory.offload_bytes(psi, 1, "disk")


def test_bytes_per_parameter_of_each_precision_policy():
    from distlab.predict import memory

    adam = {name: sum(memory.bytes_per_parameter(name, "adam").values()) for name in memory.POLICY_ACCOUNTING}
    assert adam == {"fp32": 16, "bf16": 16, "fp16": 16, "fp16_unscaled": 16, "bf16_master": 16}
    assert memory.bytes_per_parameter("bf16_master", "adam") == {"params": 2, "grads": 2, "master": 4, "optimizer": 8}
    with pytest.raises(ValueError, match="policy must be one of"):
        memory.bytes_per_parameter("fp8")
