"""Issue 39 (lesson 15): the overlap conditions of ``distlab.predict.overlap_conditions``, each held to numbers
computed by hand, to the closed forms of the Ultra-Scale Playbook's appendix A3, and to the scaling-book's
TPU v5p figure.  Pure arithmetic: nothing here starts a process."""
import pytest

from distlab.measure.roofline import HARDWARE
from distlab.models import build_model, count_parameters
from distlab.predict.alpha_beta import Link
from distlab.predict.overlap_conditions import (NETWORK_ALPHA, NVLINK_ALPHA, amortizing_bytes, collective_seconds,
                                                data_parallel_overlap, datasheet_link, min_tokens_data_parallel,
                                                tensor_parallel_overlap, where_it_hides, zero3_overlap)

# a cluster link with no latency: the closed forms hold exactly
PLAIN = Link(alpha=0.0, beta=1e-9, lanes=None)
# H100 SXM datasheet (NVIDIA, 2023): NVLink 900 GB/s in total, both directions, so 450 GB/s each way;
# DGX H100: one 400 Gb/s NDR InfiniBand port per GPU, 50 GB/s each way; dense bf16 989 TFLOP/s
H100 = HARDWARE["H100 SXM"]
NVLINK, INFINIBAND = 450e9, 400e9 / 8
# the model of lesson 15's sweep (measure.exposed.MODEL): an MLP of width 512 and 6 hidden layers, fp32
MLP_PARAMS = count_parameters(build_model("mlp", 512, depth=6))
MLP_LAYER = 512 * 512 + 512
# a 7B transformer, LLaMA 7B's shape (Touvron et al. 2023, "LLaMA: open and efficient foundation language models",
# table 2: d_model 4096, 32 layers; section 2.2: a SwiGLU MLP of width 2/3 x 4d, 11008 in the released code;
# a vocabulary of 32,000), 6.74 B parameters
D, LAYERS, FF, VOCAB = 4096, 32, 11008, 32000
LAYER_7B = 4 * D * D + 3 * D * FF + 2 * D
PARAMS_7B = LAYERS * LAYER_7B + 2 * VOCAB * D + D


# ---------------------------------------------------------------------------------------------
# the collectives' time, by hand
# ---------------------------------------------------------------------------------------------
def test_ring_collectives_by_hand():
    link = Link(alpha=1e-5, beta=1e-9, lanes=None)
    # all-reduce of 8 MB over 8 ranks: 2(N-1) = 14 steps of alpha, 2(N-1)/N of the bytes
    assert collective_seconds(link, 8e6, 8) == pytest.approx(14e-5 + 1.75 * 8e6 * 1e-9)
    # an all-gather is half of it: N-1 steps, (N-1)/N of the bytes
    assert collective_seconds(link, 8e6, 8, "all_gather") == pytest.approx(7e-5 + 0.875 * 8e6 * 1e-9)
    # in 4 buckets: four times the latency, the same bytes
    assert collective_seconds(link, 8e6, 8, messages=4) == pytest.approx(4 * 14e-5 + 1.75 * 8e6 * 1e-9)
    # one rank sends nothing
    assert collective_seconds(link, 8e6, 1) == 0


def test_this_machine_link_serialises_its_two_ranks():
    # lesson 03's link of this machine (lanes = 1): the two ranks' messages of a step pass one after the other
    here = Link(alpha=50e-6, beta=1e-9)
    assert collective_seconds(here, 1e6, 2) == pytest.approx(2 * (2 * 50e-6 + 2 * 0.5e6 * 1e-9))


# ---------------------------------------------------------------------------------------------
# the three conditions, by hand and against the Playbook's closed forms (appendix A3)
# ---------------------------------------------------------------------------------------------
def test_data_parallel_by_hand():
    # 1 M parameters in fp32, 2,000 tokens, 1 TFLOP/s, 1 GB/s, 2 ranks:
    # backward 4 x 1e6 x 2000 / 1e12 = 8 ms; all-reduce 2 x 1/2 x 4 MB x 1 ns = 4 ms
    v = data_parallel_overlap(1e6, 2000, 2, PLAIN, 1e12, itemsize=4)
    assert v["compute_s"] == pytest.approx(8e-3)
    assert v["comm_s"] == pytest.approx(4e-3)
    assert v["ratio"] == pytest.approx(0.5) and v["hidden"]


@pytest.mark.parametrize("world_size", [2, 4, 8])
@pytest.mark.parametrize("params", [1e6, 7e9])
def test_data_parallel_closed_form(world_size, params):
    # (N-1)/N x b x FLOP/s x beta / (2 x tokens): the parameters cancel
    v = data_parallel_overlap(params, 512, world_size, PLAIN, 1e12, itemsize=2)
    assert v["ratio"] == pytest.approx((world_size - 1) / world_size * 2 * 1e12 * 1e-9 / (2 * 512))


def test_data_parallel_buckets_pay_latency():
    link = Link(alpha=1e-5, beta=1e-9, lanes=None)
    one = data_parallel_overlap(1e6, 100, 4, link, 1e12, itemsize=4)
    four = data_parallel_overlap(1e6, 100, 4, link, 1e12, itemsize=4, bucket_bytes=1e6)   # 4 MB in 4 buckets
    assert four["comm_s"] - one["comm_s"] == pytest.approx(3 * 2 * 3 * 1e-5)          # 3 more all-reduces of 6 steps
    assert four["compute_s"] == one["compute_s"]


@pytest.mark.parametrize("world_size", [2, 8])
def test_zero3_closed_form_and_by_hand(world_size):
    # (N-1)/N x b x FLOP/s x beta / (2 x tokens), whatever the layer's size
    ratios = [zero3_overlap(layer, 1024, world_size, PLAIN, 1e12, itemsize=2)["ratio"] for layer in (1e5, 2e8)]
    assert ratios == pytest.approx([(world_size - 1) / world_size * 2 * 1e12 * 1e-9 / (2 * 1024)] * 2)
    # by hand, 2 ranks: a 1 M-parameter bf16 layer gathers 1 MB in 1 ms; its forward on 1,000 tokens, 2 ms
    v = zero3_overlap(1e6, 1000, 2, PLAIN, 1e12, itemsize=2)
    assert (v["comm_s"], v["compute_s"], v["hidden"]) == (pytest.approx(1e-3), pytest.approx(2e-3), True)


def test_tensor_parallel_closed_form_ignores_tokens():
    # (TP-1) x b x FLOP/s x beta / (2 x d_out): the tokens cancel
    ratios = [tensor_parallel_overlap(t, 4096, 8, PLAIN, 1e12, itemsize=2)["ratio"] for t in (128, 4096, 65536)]
    assert ratios == pytest.approx([7 * 2 * 1e12 * 1e-9 / (2 * 4096)] * 3)
    # a wider linear (the MLP's up-projection, d_out = 4 d_model) hides four times as easily
    wide = tensor_parallel_overlap(1024, 4096, 8, PLAIN, 1e12, itemsize=2, d_out=4 * 4096)["ratio"]
    assert wide == pytest.approx(ratios[0] / 4)
    # with latency, few tokens are worse: alpha does not shrink with them
    link = Link(alpha=1e-5, beta=1e-9, lanes=None)
    few, many = (tensor_parallel_overlap(t, 4096, 8, link, 1e12, itemsize=2)["ratio"] for t in (16, 4096))
    assert few > many > ratios[0]
    # one rank: nothing to gather
    assert tensor_parallel_overlap(64, 512, 1, link, 1e9)["comm_s"] == 0


def test_more_tokens_and_more_bandwidth_hide_more():
    ratios = [data_parallel_overlap(1e8, t, 8, datasheet_link(50e9, 1e-5), 1e15, itemsize=2)["ratio"]
              for t in (256, 1024, 4096, 16384)]
    assert ratios == sorted(ratios, reverse=True)
    for fn in (lambda lk: data_parallel_overlap(1e8, 4096, 8, lk, 1e15, itemsize=2),
               lambda lk: zero3_overlap(1e7, 4096, 8, lk, 1e15, itemsize=2),
               lambda lk: tensor_parallel_overlap(4096, 4096, 8, lk, 1e15, itemsize=2)):
        ratios = [fn(datasheet_link(bw, 1e-5))["ratio"] for bw in (25e9, 50e9, 450e9)]
        assert ratios == sorted(ratios, reverse=True)


# ---------------------------------------------------------------------------------------------
# the fewest tokens per device, and the scaling-book's figure
# ---------------------------------------------------------------------------------------------
def test_min_tokens_is_where_the_ratio_reaches_one():
    link = datasheet_link(INFINIBAND, NETWORK_ALPHA)
    tokens = min_tokens_data_parallel(PARAMS_7B, 16, link, H100.bf16_flops, itemsize=2)
    assert data_parallel_overlap(PARAMS_7B, tokens, 16, link, H100.bf16_flops, itemsize=2)["ratio"] == (
        pytest.approx(1.0))
    assert not data_parallel_overlap(PARAMS_7B, 0.9 * tokens, 16, link, H100.bf16_flops, itemsize=2)["hidden"]
    assert data_parallel_overlap(PARAMS_7B, 1.1 * tokens, 16, link, H100.bf16_flops, itemsize=2)["hidden"]


def test_scaling_book_tpu_v5p_2550_tokens_per_chip():
    """Austin et al. 2025, "How to Scale Your Model", "How to Parallelize a Transformer for Training", section
    "Data Parallelism": compute-bound when B / X > C / W; for a TPU v5p, C = 4.6e14 FLOP/s (bf16) and W = 2 x
    9e10 bytes/s for 1D data parallelism over ICI, "at least 2,550" tokens per chip.  The book's all-reduce
    costs 2 x bytes / W: a ring that moves its bytes at W, both directions at once; its ranks are many, so
    (N-1)/N ~ 1."""
    C, W = 4.6e14, 2 * 9e10
    assert C / W == pytest.approx(2550, rel=0.003)
    ici = Link(alpha=0.0, beta=1 / W, lanes=None)
    assert min_tokens_data_parallel(1e9, 16, ici, C, itemsize=2) == pytest.approx(15 / 16 * C / W)
    assert min_tokens_data_parallel(1e9, 128, ici, C, itemsize=2) == pytest.approx(2550, rel=0.01)


# ---------------------------------------------------------------------------------------------
# the latency amortised: Hockney's n_1/2
# ---------------------------------------------------------------------------------------------
def test_amortizing_bytes_by_hand():
    link = Link(alpha=50e-6, beta=1e-9, lanes=None)
    # 2 ranks: a bucket cut in 2 chunks, each must carry alpha / beta = 50 kB
    assert amortizing_bytes(link, 2) == pytest.approx(100_000)
    assert amortizing_bytes(link, 8) == pytest.approx(8 * 50_000)
    # at that size the latency is exactly half of the collective's time
    n = amortizing_bytes(link, 8)
    assert collective_seconds(link, n, 8) == pytest.approx(2 * collective_seconds(link, 0, 8))
    # a tenth of the time on latency needs nine times the bytes of a half
    assert amortizing_bytes(link, 8, latency_share=0.1) == pytest.approx(9 * n)
    assert amortizing_bytes(link, 1) == 0
    # NVLink on an H100 node: 8 x 3.4 us x 450 GB/s, about 12 MB (DDP's buckets are 25 MB)
    assert amortizing_bytes(datasheet_link(NVLINK, NVLINK_ALPHA), 8) == pytest.approx(12.24e6)


# ---------------------------------------------------------------------------------------------
# the lesson's table
# ---------------------------------------------------------------------------------------------
PLACES = ("this machine", "an H100 node", "across H100 nodes")


def test_where_it_hides_the_course_mlp():
    # this machine: alpha 50 us, 1 GB/s, 100 GFLOP/s fp32 on one core per rank; 64 samples per rank, 2 ranks
    rows = where_it_hides(Link(alpha=50e-6, beta=1e-9), 100e9, params=MLP_PARAMS, layer_params=MLP_LAYER,
                          d_model=512, tokens=64, degree=2, gpu=H100, itemsize=4)
    assert [r["parallelism"] for r in rows] == ["data parallel", "ZeRO-3", "tensor parallel"]
    # too little compute per byte anywhere: here the bytes are slow, on the GPUs the compute is too fast
    assert not any(r[p] for r in rows for p in PLACES)
    dp = rows[0]["ratio"]
    assert dp["this machine"] == pytest.approx((4 * 50e-6 + 2 * MLP_PARAMS * 4 * 1e-9) / (4 * MLP_PARAMS * 64 / 100e9))
    assert dp["this machine"] < dp["an H100 node"] < dp["across H100 nodes"]


def test_where_it_hides_a_7b_transformer_on_h100s():
    rows = {r["parallelism"]: r for r in where_it_hides(
        Link(alpha=50e-6, beta=1e-9), 100e9, params=PARAMS_7B, layer_params=LAYER_7B, d_model=D, tokens=4096,
        degree=8, gpu=H100, itemsize=2)}
    # DP and ZeRO-3 hide within a node, not across nodes; TP at degree 8 hides on neither
    for name in ("data parallel", "ZeRO-3"):
        assert rows[name]["an H100 node"] and not rows[name]["across H100 nodes"]
    assert not rows["tensor parallel"]["an H100 node"] and not rows["tensor parallel"]["across H100 nodes"]
    # the node's link is half of NVLink's quoted total, each way; across nodes, one NDR port per GPU
    node = data_parallel_overlap(PARAMS_7B, 4096, 8, datasheet_link(NVLINK, NVLINK_ALPHA), 989e12, itemsize=2)
    across = data_parallel_overlap(PARAMS_7B, 4096, 8, datasheet_link(INFINIBAND, NETWORK_ALPHA), 989e12,
                                   itemsize=2)
    assert rows["data parallel"]["ratio"]["an H100 node"] == pytest.approx(node["ratio"], rel=1e-3)
    assert rows["data parallel"]["ratio"]["across H100 nodes"] == pytest.approx(across["ratio"], rel=1e-3)


# ---------------------------------------------------------------------------------------------
# bad input, refused with a message that names it
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: data_parallel_overlap(0, 64, 2, PLAIN, 1e12), "params"),
    (lambda: data_parallel_overlap(1e6, -1, 2, PLAIN, 1e12), "tokens"),
    (lambda: data_parallel_overlap(1e6, 64, 2, PLAIN, 0), "flops"),
    (lambda: data_parallel_overlap(1e6, 64, 2, PLAIN, 1e12, bucket_bytes=0), "bucket_bytes"),
    (lambda: data_parallel_overlap(1e6, 64, 0, PLAIN, 1e12), "world_size"),
    (lambda: zero3_overlap(-5, 64, 2, PLAIN, 1e12), "layer_params"),
    (lambda: zero3_overlap(1e6, 64, 2, PLAIN, 1e12, itemsize=0), "itemsize"),
    (lambda: tensor_parallel_overlap(64, 0, 2, PLAIN, 1e12), "d_model"),
    (lambda: tensor_parallel_overlap(64, 512, 2.5, PLAIN, 1e12), "tensor"),
    (lambda: datasheet_link(0), "bandwidth"),
    (lambda: datasheet_link(1e9, alpha=-1e-6), "alpha"),
    (lambda: data_parallel_overlap(1e6, 64, 2, Link(alpha=1e-5, beta=0.0), 1e12), "bandwidth above zero"),
    (lambda: collective_seconds(PLAIN, 1e6, 2, "broadcast"), "collective"),
    (lambda: amortizing_bytes(PLAIN, 2, latency_share=1.0), "latency_share"),
])
def test_bad_input_is_refused(call, words):
    with pytest.raises(ValueError, match=words):
        call()
