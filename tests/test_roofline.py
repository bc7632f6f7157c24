"""Issue 39's roofline (``distlab.measure.roofline``): the machine's measured peaks, the roofline's arithmetic,
MFU from a run's record, and the published GPU figures.  No wall-clock limit is asserted: what a peak is on
this machine is the benchmark's business (bench/time_levers.py); here, that each is measured and sane."""
from types import SimpleNamespace

import pytest
import torch

from distlab.measure import roofline as R


def test_the_peaks_are_measured_rates_on_this_machine():
    threads = torch.get_num_threads()
    one = R.peak_matmul("float32", threads=1, size=256, repeats=2)
    every = R.peak_matmul("float32", size=256, repeats=2)
    assert 1e8 < one < 1e13 and 1e8 < every < 1e13          # FLOP/s: a CPU's, not a unit mistake
    assert torch.get_num_threads() == threads                # the thread count put back
    assert R.peak_matmul("bfloat16", size=128, repeats=1) > 0
    bandwidth = R.memory_bandwidth(32, repeats=2)
    assert 1e8 < bandwidth < 1e13                            # bytes/s


@pytest.mark.parametrize("call,match", [
    (lambda: R.peak_matmul("float8"), "dtype must be one of"),
    (lambda: R.peak_matmul("float32", threads=0), "threads must be a positive integer"),
    (lambda: R.peak_matmul("float32", size=8), "size must be an integer of at least 16"),
    (lambda: R.memory_bandwidth(1), "past the caches"),
    (lambda: R.attainable(0, 1e12, 1e11), "must be positive"),
    (lambda: R.mfu(1e9, 0, 1e12), "must be positive"),
])
def test_bad_input_is_refused_before_anything_is_timed(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_dtype_this_torch_cannot_multiply_is_refused(monkeypatch):
    real = torch.Tensor.__matmul__

    def refuse(a, b):
        if a.dtype == torch.float16:
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'\nmore')
        return real(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", refuse)
    with pytest.raises(ValueError, match="cannot multiply float16 matrices on the CPU: \"addmm_impl_cpu_\""):
        R.peak_matmul("float16")


def test_the_roofline_turns_at_the_ridge():
    peak, bandwidth = 1e12, 1e11
    assert R.ridge(peak, bandwidth) == 10
    assert R.attainable(1, peak, bandwidth) == 1e11            # memory-bound: the slope
    assert R.attainable(10, peak, bandwidth) == peak            # at the ridge both bounds meet
    assert R.attainable(1000, peak, bandwidth) == peak          # compute-bound: the roof


def test_mfu_is_the_models_flops_per_second_over_the_peak():
    assert R.mfu(2e9, 0.01, 1e12) == pytest.approx(0.2)
    steps = [SimpleNamespace(t_start=0.0, t_end=1.0)] + [SimpleNamespace(t_start=s, t_end=s + 0.01) for s in range(9)]
    record = SimpleNamespace(flops_per_step=2e9, steps=steps)      # the first step (counting FLOPs) left out
    assert R.record_mfu(record, 1e12) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no counted FLOPs"):
        R.record_mfu(SimpleNamespace(flops_per_step=None, steps=[None]), 1e12)


def test_a_real_runs_mfu_is_a_share_of_the_measured_peak():
    from distlab.data_parallel import data_parallel as dp

    record = dp.train_single(global_batch_size=64, steps=5)
    share = R.record_mfu(record, R.peak_matmul("float32", size=256, repeats=2))
    assert 0 < share < 1.5        # a share of the machine, not a unit error (a step's tiny products: far below 1)


def test_every_gpu_figure_names_its_source_and_is_dense():
    for gpu in R.HARDWARE.values():
        assert "datasheet" in gpu.source
        assert 1e14 < gpu.bf16_flops < 2e15 and 1e12 < gpu.memory_bandwidth < 1e13
        assert gpu.link_bandwidth > gpu.network_bandwidth > 0
        assert R.ridge(gpu.bf16_flops, gpu.memory_bandwidth) > 100   # a GPU needs far more FLOPs per byte
    assert R.HARDWARE["H100 SXM"].bf16_flops == 989e12            # half the 1,979 quoted with sparsity
