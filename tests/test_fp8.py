"""Lesson 14's FP8 numerics (issue 38): quantise to 8 bits and back on a CPU, and measure what is lost.
Checked against PyTorch's own casts, ``torch.finfo`` and ``torch._scaled_mm``; one process, a few seconds."""
import math

import pytest
import torch

from distlab.data import load_digits
from distlab.precision import fp8, fp8_lab
from distlab.sequence import lines as L
from distlab.sequence.transformer import TransformerConfig, build_transformer, loss_and_accuracy


def every_value(fmt: fp8.FP8Format) -> torch.Tensor:
    """All 256 bit patterns of the format, read as numbers, without inf and nan."""
    values = torch.arange(256, dtype=torch.uint8).view(fmt.dtype).float()
    return values[torch.isfinite(values)]


@pytest.fixture(scope="module")
def transformer_and_lines():
    model = build_transformer(TransformerConfig(), seed=0)
    return model, L.train_lines(load_digits(), 8, 4, seed=0, step=0)


def test_the_largest_values_are_the_papers_and_pytorchs():
    # Micikevicius et al. 2022, table 1: 1.75 x 2^8 and 1.75 x 2^15
    assert fp8.E4M3.largest == 448.0 == torch.finfo(torch.float8_e4m3fn).max == 1.75 * 2 ** 8
    assert fp8.E5M2.largest == 57344.0 == torch.finfo(torch.float8_e5m2).max == 1.75 * 2 ** 15
    for fmt in fp8.FORMATS.values():
        values = every_value(fmt)
        assert values.max().item() == fmt.largest
        assert values[values > 0].min().item() == fmt.smallest_subnormal
        assert 1 + fmt.exponent_bits + fmt.mantissa_bits == 8
    assert fp8.E4M3.smallest_subnormal == 2.0 ** -9 and fp8.E5M2.smallest_subnormal == 2.0 ** -16
    # where rounding leaves the range, by PyTorch's own cast: E5M2 to inf, E4M3 saturating to 448
    assert (fp8.E4M3.overflows_at, fp8.E5M2.overflows_at) == (464.0, 61440.0)
    assert math.isinf(fp8.cast(torch.tensor([61440.0]), "e5m2").item())
    assert fp8.cast(torch.tensor([61439.0]), "e5m2").item() == 57344.0


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
@pytest.mark.parametrize("granularity", ["tensor", "row", "tile", "block"])
def test_every_representable_value_comes_back_exactly(name, granularity):
    fmt = fp8.FORMATS[name]
    values = every_value(fmt)
    # two rows of every value, framed by the largest so that every group holds it (each scale is then 1)
    largest = torch.full((2, 1), fmt.largest)
    x = torch.cat([largest, values.expand(2, -1), largest], dim=1)
    back = fp8.round_trip(x, name, granularity, block=x.shape[1] // 2)             # 2 tiles a row
    assert torch.equal(back, x)


def test_e4m3_rounds_within_half_a_step_of_three_mantissa_bits():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(64, 300, generator=g) * math.log(1000.0)).exp() / 1000.0     # 1e-3 .. 1, log-uniform
    x *= torch.where(torch.rand(64, 300, generator=g) < 0.5, -1.0, 1.0)
    for granularity in fp8.GRANULARITIES:     # every value stays above the smallest normal, once scaled
        rel = ((fp8.round_trip(x, "e4m3", granularity) - x).abs() / x.abs()).max().item()
        assert 2.0 ** -5 < rel <= 2.0 ** -4       # reached, and never passed: 3 bits, round to nearest
    rel = ((fp8.round_trip(x, "e5m2") - x).abs() / x.abs()).max().item()
    assert 2.0 ** -4 < rel <= 2.0 ** -3
    bf16 = ((x.bfloat16().float() - x).abs() / x.abs()).max().item()
    assert bf16 <= 2.0 ** -8


def test_tiles_and_blocks_cover_shapes_that_are_not_multiples_of_128():
    x = torch.randn(200, 300, generator=torch.Generator().manual_seed(1))
    for granularity, shape in (("tensor", ()), ("row", (200, 1)), ("tile", (200, 3)), ("block", (2, 3))):
        q, scales = fp8.quantize(x, "e4m3", granularity)
        assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn
        assert tuple(scales.shape) == shape == fp8.scale_shape(x.shape, granularity)
        rel = ((fp8.dequantize(q, scales, granularity) - x).abs() / x.abs()).median().item()
        assert rel < 2.0 ** -5
    _, tiles = fp8.quantize(x, "e4m3", "tile")
    assert torch.allclose(tiles[:, 2], x[:, 256:].abs().amax(dim=1) / 448)      # the last tile: 44 columns
    _, blocks = fp8.quantize(x, "e4m3", "block")
    assert torch.allclose(blocks[1, 2], x[128:, 256:].abs().amax() / 448)        # the corner: 72 x 44
    assert torch.allclose(blocks[0, 0], x[:128, :128].abs().amax() / 448)
    x[5] = 0.0                                                                   # a group of zeros: scale 1
    _, rows = fp8.quantize(x, "e4m3", "row")
    assert rows[5].item() == 1.0 and fp8.round_trip(x, "e4m3", "row")[5].abs().sum() == 0


def test_per_tensor_and_per_row_products_agree_with_torch_scaled_mm():
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(48, 64, generator=g), torch.randn(32, 64, generator=g)
    for granularity in ("tensor", "row"):
        (qx, sx), (qw, sw) = fp8.quantize(x, "e4m3", granularity), fp8.quantize(w, "e4m3", granularity)
        theirs = torch._scaled_mm(qx, qw.t(), scale_a=sx, scale_b=sw.t(), out_dtype=torch.float32)
        ours = fp8.round_trip(x, "e4m3", granularity) @ fp8.round_trip(w, "e4m3", granularity).T
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_fine_scales_beat_one_scale_on_outlier_activations():
    """6 outlier channels at 20x: measured fine/tensor 0.79 to 0.82 over seeds 0-4 (tile alone: 0.78)."""
    x = fp8_lab.outlier_activations(512, 512, seed=0)
    assert torch.equal(x, fp8_lab.outlier_activations(512, 512, seed=0))
    assert (x.abs().amax(dim=0) > 40).sum() == 6                                 # six loud channels
    w = torch.randn(256, 512, generator=torch.Generator().manual_seed(0)) / math.sqrt(512)
    ref = x @ w.T
    err = {g: fp8.matmul_error(x, w, "e4m3", g, reference=ref) for g in ("tensor", "row", "tile", "fine")}
    assert err["fine"]["fp8"] < 0.9 * err["tensor"]["fp8"]
    assert err["tile"]["fp8"] < 0.9 * err["tensor"]["fp8"]
    assert err["row"]["fp8"] < err["tensor"]["fp8"]
    assert 5 * err["tensor"]["bf16"] < err["fine"]["fp8"]        # bf16's 8 bits of precision against 4
    # where the gain comes from: the quiet channels round alike under either scale (a float keeps its
    # 3 bits at any size); the loud ones are often their tile's largest value, which lands exactly on 448
    loud = x.abs().amax(dim=0) > 40
    rel = {g: {part: ((fp8.round_trip(x, "e4m3", g) - x)[:, cols].norm() / x[:, cols].norm()).item()
               for part, cols in (("loud", loud), ("quiet", ~loud))} for g in ("tensor", "tile")}
    assert rel["tile"]["quiet"] == pytest.approx(rel["tensor"]["quiet"], rel=0.02)
    assert rel["tile"]["loud"] < 0.5 * rel["tensor"]["loud"]                  # measured: 0.0097 against 0.026


def test_one_scale_flushes_ordinary_values_once_outliers_pass_e4m3s_range():
    """Why fine scales matter most for FP8: a float keeps 3 bits at any size, until the values fall
    below the smallest normal x scale.  With outliers 10^5 times the rest, one scale sends most of the
    rest below half the smallest subnormal (0 in E4M3); a tile's scale sees only its own 128 columns:
    the quiet tiles keep their values, a tile that holds an outlier channel loses them as the tensor does."""
    x = fp8_lab.outlier_activations(64, 512, seed=0, channels=2, scale=1e5)
    loud = x.abs().amax(dim=0) > 1e3
    loud_tiles = loud.view(4, 128).any(dim=1).repeat_interleave(128)
    assert loud_tiles.sum() == 256                                   # the two channels sit in two tiles
    zeroed = {g: fp8.round_trip(x, "e4m3", g) == 0 for g in ("tensor", "tile")}
    share = {(g, where): zeroed[g][:, mask].float().mean().item()
             for g in zeroed for where, mask in (("quiet", ~loud_tiles), ("shared", loud_tiles & ~loud))}
    assert share["tensor", "quiet"] > 0.3 and share["tensor", "shared"] > 0.3     # measured: about 0.5
    assert share["tile", "quiet"] < 0.001 and share["tile", "shared"] > 0.05       # measured: 0 and 0.14


def test_on_the_courses_transformer_fine_scales_are_no_worse(transformer_and_lines):
    """The blocks' layers: the ones DeepSeek-V3 runs in FP8 (it keeps the embedding and the output head
    in higher precision, section 3.3.1).  No outliers in a small model: the gain is small (about 3%)."""
    model, lines = transformer_and_lines
    acts = fp8_lab.capture_activations(model, lines.tokens)
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert list(acts) == linears
    x, w = acts["blocks.0.mlp.fc2"]
    assert x.shape == (8 * 4 * 16, 256) and torch.equal(w, model.blocks[0].mlp.fc2.weight)    # 8 lines of 64 tokens
    ratios = []
    for name in (n for n in acts if n.startswith("blocks.")):
        x, w = acts[name]
        ref = x @ w.T
        fine, tensor = (fp8.matmul_error(x, w, "e4m3", g, reference=ref)["fp8"] for g in ("fine", "tensor"))
        assert fine <= tensor, name
        ratios.append(fine / tensor)
    assert sorted(ratios)[len(ratios) // 2] < 0.995


def test_e5m2_keeps_small_gradients_that_e4m3_flushes(transformer_and_lines):
    model, lines = transformer_and_lines
    model.zero_grad()
    loss_and_accuracy(model, lines)[0].backward()
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    e4, e5 = fp8.gradient_underflow(g, "e4m3"), fp8.gradient_underflow(g, "e5m2")
    assert e4["zeroed"] > 0.5 and e5["zeroed"] < 0.1          # measured: 0.76 and 0.02
    assert e5["zeroed_scaled"] <= e4["zeroed_scaled"] < 0.01   # one scale lifts them into range
    big = fp8.gradient_underflow(torch.tensor([1.0, 1000.0, 1e5]), "e4m3")
    assert big["overflowed"] == pytest.approx(2 / 3) and big["overflowed_scaled"] == 0.0


def test_the_device_part_says_plainly_what_a_cpu_cannot_show():
    got = fp8_lab.device_part()
    if not torch.cuda.is_available():
        assert got["fast_fp8"] is False and "Hopper" in got["why"] and "numerics only" in got["why"]


def test_bad_input_is_named():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="fmt must be one of"):
        fp8.quantize(x, "e3m4")
    with pytest.raises(ValueError, match="granularity must be one of"):
        fp8.quantize(x, "e4m3", "channel")
    with pytest.raises(ValueError, match="x must be 2-D"):
        fp8.quantize(torch.randn(2, 4, 8), "e4m3", "tile")
    with pytest.raises(ValueError, match="x holds inf or nan"):
        fp8.quantize(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="block must be a positive integer"):
        fp8.quantize(x, "e4m3", "tile", block=0)
    with pytest.raises(ValueError, match="scales has shape"):
        fp8.dequantize(fp8.quantize(x, "e4m3", "row")[0], torch.ones(()), "row")
    with pytest.raises(ValueError, match="w expects 6"):
        fp8.matmul_error(x, torch.randn(3, 6))
    with pytest.raises(ValueError, match="granularity must be one of"):
        fp8.matmul_error(x, torch.randn(3, 8), granularity="coarse")
    with pytest.raises(ValueError, match="has no nn.Linear"):
        fp8_lab.capture_activations(torch.nn.ReLU(), x)
    with pytest.raises(ValueError, match="channels"):
        fp8_lab.outlier_activations(4, 8, seed=0, channels=9)
    with pytest.raises(ValueError, match="g has no nonzero value"):
        fp8.gradient_underflow(torch.zeros(5))
