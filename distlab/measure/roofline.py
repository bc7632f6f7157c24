"""How fast this machine can compute and move bytes, and how close a training step comes.

Introduced in lesson 15 ("Where the time goes").

A step's time is bounded twice (Williams, Waterman and Patterson 2009, "Roofline: an insightful visual
performance model for multicore architectures"): by the machine's peak arithmetic, ``P`` FLOP/s, and by
its memory bandwidth, ``B`` bytes/s, times the step's *arithmetic intensity* ``I`` (FLOPs per byte moved).
The attainable rate is ``min(P, I x B)``: below the ridge ``I = P / B`` a step is memory-bound, above it
compute-bound.  **MFU** (model FLOPs utilisation, Chowdhery et al. 2022, PaLM, appendix B) is the FLOPs a
step needs over its time, divided by the peak: how much of the machine the model's own arithmetic used.

Peaks quoted on datasheets are not what a program gets, so this module *measures* them here:

* ``peak_matmul`` times square matrix products (the best rate over a few repeats, after a warm-up) in a
  dtype, on one thread or on all: the largest rate this machine's BLAS reaches, the roof;
* ``memory_bandwidth`` times a large copy (every byte read once and written once): the slope.

``HARDWARE`` gives the same figures for common GPUs, each from its vendor's datasheet, so a learner can read
a run measured here as it would stand on one of them.  Peaks of GPUs are *dense* figures (NVIDIA also quotes
twice as much "with sparsity").
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..processes.cores import torch_threads

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Accelerator:
    """Lesson 15: one GPU's published figures (dense bf16 peak, memory bandwidth, GPU-to-GPU and network
    bandwidth per GPU), with where they come from."""

    name: str
    bf16_flops: float          # dense, FLOP/s
    memory_bandwidth: float    # HBM, bytes/s
    link_bandwidth: float      # NVLink, bytes/s in total per GPU (both directions)
    network_bandwidth: float   # bytes/s per GPU to other nodes (one NIC per GPU, as DGX systems have)
    source: str


HARDWARE = {a.name: a for a in (
    Accelerator("A100 SXM 80GB", 312e12, 2.039e12, 600e9, 200e9 / 8,
                "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense, HBM2e 2,039 GB/s, NVLink "
                "600 GB/s; DGX A100: one 200 Gb/s HDR InfiniBand port per GPU"),
    Accelerator("H100 SXM", 989e12, 3.35e12, 900e9, 400e9 / 8,
                "NVIDIA H100 Tensor Core GPU datasheet (2023): BF16 1,979 TFLOPS with sparsity (989.5 dense), HBM3 "
                "3.35 TB/s, NVLink 900 GB/s; DGX H100: one 400 Gb/s NDR InfiniBand port per GPU"),
    Accelerator("H200 SXM", 989e12, 4.8e12, 900e9, 400e9 / 8,
                "NVIDIA H200 Tensor Core GPU datasheet (2024): BF16 1,979 TFLOPS with sparsity (989.5 dense), "
                "HBM3e 4.8 TB/s, NVLink 900 GB/s; 400 Gb/s NDR InfiniBand per GPU as in DGX H100"),
)}


def check_dtype(dtype: str) -> torch.dtype:
    """Lesson 15: the torch dtype called ``dtype``, refused before anything is timed when this machine's
    torch cannot multiply matrices in it (one tiny product is tried)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    t = DTYPES[dtype]
    try:
        torch.ones(2, 2, dtype=t) @ torch.ones(2, 2, dtype=t)
    except RuntimeError as err:
        raise ValueError(f"this machine's torch cannot multiply {dtype} matrices on the CPU: "
                         f"{str(err).splitlines()[0]}") from None
    return t


def _threads(threads: int | None) -> int:
    """Lesson 15: the thread count to time with (None: all of torch's), checked."""
    if threads is None:
        return torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None (all), got {threads!r}")
    return threads


def _best_seconds(fn, repeats: int) -> float:
    """Lesson 15: the shortest of ``repeats`` timings of ``fn`` after one warm-up (kernel choice, first touch
    of the memory): the least disturbed run, as a peak should be."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_matmul(dtype: str = "float32", threads: int | None = None, size: int = 1024, repeats: int = 5) -> float:
    """Lesson 15: the FLOP/s of an ``size x size`` matrix product in ``dtype`` on ``threads`` threads, the best of
    ``repeats``: ``2 size^3`` FLOPs (a multiply-add is two) over its time."""
    t = check_dtype(dtype)
    n = _threads(threads)
    if isinstance(size, bool) or not isinstance(size, int) or size < 16:
        raise ValueError(f"size must be an integer of at least 16, got {size!r}")
    a, b = torch.randn(size, size).to(t), torch.randn(size, size).to(t)
    with torch_threads(n):
        seconds = _best_seconds(lambda: a @ b, repeats)
    return 2 * size ** 3 / seconds


def memory_bandwidth(megabytes: int = 256, threads: int | None = None, repeats: int = 5) -> float:
    """Lesson 15: bytes/s of a copy of ``megabytes`` MB into another buffer (read once, written once: twice the
    bytes), the best of ``repeats``: far larger than any cache, so the memory's own rate."""
    if isinstance(megabytes, bool) or not isinstance(megabytes, int) or megabytes < 16:
        raise ValueError(f"megabytes must be an integer of at least 16 (past the caches), got {megabytes!r}")
    n = _threads(threads)
    src = torch.ones(megabytes * 1_000_000 // 4)
    dst = torch.empty_like(src)
    with torch_threads(n):
        seconds = _best_seconds(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() * 4 / seconds


def attainable(intensity: float, peak: float, bandwidth: float) -> float:
    """Lesson 15: the roofline: FLOP/s a step of ``intensity`` FLOPs per byte can reach, ``min(peak, I x B)``."""
    if not (intensity > 0 and peak > 0 and bandwidth > 0):
        raise ValueError(f"intensity, peak and bandwidth must be positive, got {intensity}, {peak}, {bandwidth}")
    return min(peak, intensity * bandwidth)


def ridge(peak: float, bandwidth: float) -> float:
    """Lesson 15: the intensity (FLOPs per byte) where the roofline turns: below it memory bounds a step."""
    return peak / bandwidth


def mfu(flops_per_step: float, seconds_per_step: float, peak: float) -> float:
    """Lesson 15: model FLOPs utilisation: the FLOPs a step needs (counted, not those the hardware ran: a
    recomputation's are not the model's) per second of the step, over the peak."""
    if not (flops_per_step > 0 and seconds_per_step > 0 and peak > 0):
        raise ValueError("flops_per_step, seconds_per_step and peak must be positive, got "
                         f"{flops_per_step}, {seconds_per_step}, {peak}")
    return flops_per_step / seconds_per_step / peak


def step_seconds(record) -> float:
    """Lesson 15: a run's typical step: the median of its steps' wall times after the first (the first also
    counts the FLOPs with PyTorch's counter and allocates everything, often many times a later step)."""
    if not record.steps:
        raise ValueError("this record has no steps: its step time cannot be read")
    later = record.steps[1:] or record.steps
    return statistics.median(s.t_end - s.t_start for s in later)


def record_mfu(record, peak: float) -> float:
    """Lesson 15: a rank's MFU: ``record.flops_per_step`` (counted once per run) over its typical step
    (``step_seconds``), against ``peak`` FLOP/s."""
    if not record.flops_per_step or not record.steps:
        raise ValueError("this record has no counted FLOPs or no steps: its MFU cannot be read")
    return mfu(record.flops_per_step, step_seconds(record), peak)


def bytes_moved_estimate(record) -> int:
    """Lesson 15: an *estimate* of the bytes a step moves through memory: every byte the rank holds after its
    last update (``record.memory``: parameters, gradients, optimizer state, what one forward keeps for
    backward) read once and written once.  Caches, re-reads inside a matrix product and temporaries are not
    counted, so the true figure can be larger or smaller: a lesson says it is an estimate."""
    if not record.memory:
        raise ValueError("this record counted no bytes (record.memory is empty): nothing to estimate from")
    return 2 * sum(record.memory.values())


def place_on_roofline(record, peak: float, bandwidth: float) -> dict:
    """Lesson 15: where one run's step stands: its intensity (counted FLOPs over the estimated bytes), the FLOP/s
    it reached, the roofline's bound at that intensity, and its MFU."""
    intensity = record.flops_per_step / bytes_moved_estimate(record)
    achieved = record.flops_per_step / step_seconds(record)
    return {"intensity": intensity, "achieved": achieved, "bound": attainable(intensity, peak, bandwidth),
            "mfu": record_mfu(record, peak), "memory_bound": intensity < ridge(peak, bandwidth)}
