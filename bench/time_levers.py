"""Benchmark for issue 39 (where the time goes), the goals built so far.

- ``mfu_matmul_vs_peak``: a check of the measured peak itself.  Each round measures the peak as
  ``measure.roofline.peak_matmul`` does (1024 x 1024 fp32 products on all threads, the best of 5), then
  times ``LARGE`` products of 2048 x 2048 one after another and takes their *median* rate: what a long,
  compute-bound run gets.  Their ratio, round by round; goal >= 0.8 (a peak that a plain large product
  cannot approach would be a timing artefact, not the machine's roof).
- REPORT: the peaks in fp32 and bf16 on one thread and on all, the memory bandwidth (a 256 MB copy), the
  ridge of the roofline, and the MFU of two course runs against the measured fp32 peak on all threads:
  lesson 01's MLP (one process, global batch 64) and lesson 12's line reader (width 64, 8 lines of 8 digits).

Issue 39's other goals (bucketed_exposed_comm_vs_after_backward, zb_h1_bubble_vs_1f1b,
bubble_measured_vs_predicted, ring_overlap_step_vs_serial, alpha_beta_vs_measured_ring_1e6) are not built
yet: this script says so and prints no GOAL line for them.

Run time: about 5 s on 2 quiet cores (the memory bandwidth moved from 48 to 33 GB/s between two runs:
a REPORT, not yet a result).
"""
import os
import statistics
import sys
import time

import torch

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.measure import roofline as R
from distlab.parallelize import trainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scripts.goals import goal  # noqa: E402

ROUNDS, LARGE = 5, 6
PENDING = ("zb_h1_bubble_vs_1f1b", "bubble_measured_vs_predicted",
           "ring_overlap_step_vs_serial", "alpha_beta_vs_measured_ring_1e6")


def sustained(size: int = 2048, count: int = LARGE) -> float:
    """The median FLOP/s of ``count`` fp32 products of ``size x size``, one after another."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b                                                         # warm-up
    rates = []
    for _ in range(count):
        t0 = time.perf_counter()
        a @ b
        rates.append(2 * size ** 3 / (time.perf_counter() - t0))
    return statistics.median(rates)


def buckets() -> None:
    """``bucketed_exposed_comm_vs_after_backward``: lesson 15's sweep (``measure.exposed``), 5 rounds, each way
    once a round on the same 2 ranks; per round, the best bucket size's exposed communication over the exposed
    communication of lesson 01's naive way (one all-reduce per tensor after backward).  REPORT: every way's
    exposed time and step, and the one verdict rule on buckets against the fused all-reduce after backward
    (what the overlap alone buys, with the message count the same)."""
    from distlab import verdict
    from distlab.measure import exposed as E

    ranks = distlab.launch(E.sweep, world_size=2, ways=E.ways(), rounds=5, steps=10, progress="none")
    summary = E.summarise(ranks)
    sizes = [name for name in summary if name.startswith("buckets")]
    for name, row in summary.items():
        shown = "none (inside DDP's backward)" if row["exposed"] is None else \
            f"{statistics.median(row['exposed']) * 1e3:.1f} ms"
        print(f"REPORT exposed {name}: {shown}, step {statistics.median(row['step']) * 1e3:.1f} ms")
    naive = summary["by_hand"]["exposed"]
    ratios = [min(summary[n]["exposed"][r] for n in sizes) / naive[r] for r in range(len(naive))]
    goal("bucketed_exposed_comm_vs_after_backward", ratios, "<=", 0.7,
         "best bucket size's exposed communication / one all-reduce per tensor after backward")
    best = min(sizes, key=lambda n: statistics.fmean(summary[n]["exposed"]))
    print(f"REPORT overlap_alone: {best} against fused after backward, exposed communication: "
          + verdict.verdict(summary[best]["exposed"], summary["fused"]["exposed"], names=(best, "fused"),
                            better="lower", log=True).text)


def main() -> None:
    buckets()
    ratios = []
    for r in range(ROUNDS):
        peak = R.peak_matmul("float32")
        ratios.append(sustained() / peak)
        print(f"round {r}: peak {peak / 1e9:.1f} GFLOP/s, large products at {ratios[-1]:.3f} of it", flush=True)
    goal("mfu_matmul_vs_peak", ratios, ">=", 0.8, "median rate of 2048^3 products / the best 1024^3 rate")

    peaks = {(dtype, threads): R.peak_matmul(dtype, threads=threads)
             for dtype in ("float32", "bfloat16") for threads in (1, None)}
    for (dtype, threads), value in peaks.items():
        print(f"REPORT peak_{dtype}_{'one_thread' if threads else 'all_threads'} {value / 1e9:.1f} GFLOP/s")
    bandwidth = R.memory_bandwidth(256)
    peak = peaks[("float32", None)]
    print(f"REPORT memory_bandwidth {bandwidth / 1e9:.1f} GB/s (a copy: read and write)")
    print(f"REPORT ridge_fp32 {R.ridge(peak, bandwidth):.1f} FLOPs per byte")
    mlp = dp.train_single(global_batch_size=64, steps=30)
    reader = trainer.train_single(width=64, heads=4, depth=2, digits=8, global_batch_size=8, steps=10, lr=3e-3,
                                  test_lines=16)
    for name, record in (("lesson_01_mlp", mlp), ("lesson_12_reader", reader)):
        print(f"REPORT mfu_{name} {R.record_mfu(record, peak):.4f} ({record.flops_per_step / 1e6:.2f} MFLOP a step "
              f"in {record.wall_time / len(record.steps) * 1e3:.2f} ms)")
    for gpu in R.HARDWARE.values():
        print(f"REPORT ridge_{gpu.name.replace(' ', '_')} {R.ridge(gpu.bf16_flops, gpu.memory_bandwidth):.0f} "
              f"FLOPs per byte (datasheet)")
    for name in PENDING:
        print(f"PENDING {name}: not built yet (issue 39)")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s)")
