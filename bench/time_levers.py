"""Benchmark for issue 39 (where the time goes): its six goals, each from ``ROUNDS`` rounds.

- ``bucketed_exposed_comm_vs_after_backward``, ``ring_overlap_step_vs_serial``, ``zb_h1_bubble_vs_1f1b``,
  ``bubble_measured_vs_predicted``, ``alpha_beta_vs_measured_ring_1e6``: see ``buckets``, ``ring``, ``bubbles``
  and ``alpha_beta`` below;

- ``mfu_matmul_vs_peak``: a check of the measured peak itself.  Each round measures the peak as
  ``measure.roofline.peak_matmul`` does (1024 x 1024 fp32 products on all threads, the best of 5), then
  times ``LARGE`` products of 2048 x 2048 one after another and takes their *median* rate: what a long,
  compute-bound run gets.  Their ratio, round by round; goal >= 0.8 (a peak that a plain large product
  cannot approach would be a timing artefact, not the machine's roof).
- REPORT: the peaks in fp32 and bf16 on one thread and on all, the memory bandwidth (a 256 MB copy), the
  ridge of the roofline, and the MFU of two course runs against the measured fp32 peak on all threads:
  lesson 01's MLP (one process, global batch 64) and lesson 12's line reader (width 64, 8 lines of 8 digits).

Run time: see the last line it prints (the memory bandwidth moved from 48 to 33 GB/s between two runs: a
REPORT, not yet a result).
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

    ranks = distlab.launch(E.sweep, world_size=2, ways=E.ways(ddp=(0.25, 1.0, 4.0, 25.0)), rounds=5, steps=10,
                           progress="none")
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


def ring() -> None:
    """``ring_overlap_step_vs_serial``: lesson 15's block (1,024 tokens a rank, 4 heads of 16, 2 ranks), 5 launches;
    per launch, the ranks' median overlapped step over their median serial step (``context.ring_overlap``, which
    alternates the two ways after a barrier), the slower rank's ratio."""
    from distlab.context import ring_overlap

    ratios = []
    for r in range(ROUNDS):
        result = ring_overlap.measure(tokens=1024, heads=4, head_dim=16, repeats=5)
        ratios.append(max(x["overlapped"]["step_s"] / x["serial"]["step_s"] for x in result))
        print(f"round {r}: overlapped / serial step {ratios[-1]:.3f}", flush=True)
    goal("ring_overlap_step_vs_serial", ratios, "<=", 0.9, "1,024 tokens a rank: the hop posted before the block's "
         "compute against sent after it")
    from distlab.comm import cost_model, measure_costs

    link = cost_model.fit_link(**distlab.launch(measure_costs.measure_link, world_size=2, progress="none")[0])
    for tokens in (64, 256, 1024):
        result = ring_overlap.measure(tokens=tokens, heads=4, head_dim=16, repeats=5)
        rate = result[0]["flops"] / result[0]["serial"]["compute_s"]
        hop = ring_overlap.predict_hop(tokens, 4, 16, link, rate)["forward"]
        waits = {w: statistics.median(x[w]["wait_s"] for x in result) * 1e3 for w in ring_overlap.WAYS}
        print(f"REPORT ring_block {tokens} tokens a rank: waited for hops {waits['serial']:.2f} ms serial, "
              f"{waits['overlapped']:.2f} ms overlapped; the model's forward hop {hop['transfer_s'] * 1e3:.3f} ms of "
              f"transfer against {hop['compute_s'] * 1e3:.3f} ms of compute at the measured {rate / 1e9:.1f} GFLOP/s: "
              f"{'hides' if hop['hidden'] else 'exposed'}; hides from "
              f"{ring_overlap.hiding_tokens(4, 16, link, rate)['both']} tokens", flush=True)


def bubbles() -> None:
    """``zb_h1_bubble_vs_1f1b`` and ``bubble_measured_vs_predicted``: 2 stages, m = 8, lesson 06's MLP at width 1024
    and depth 3 (batch 256), every schedule of the course once a round for 5 rounds in one launch
    (``pipeline.zero_bubble.rounds``).  Per round: ZB-H1's measured bubble over 1F1B's; and, for each schedule,
    the measured bubble over the simulation with the run's measured costs (``zero_bubble.compare``'s
    ``with_messages``: each receive a rendezvous, the time between passes, each cost drawn from the run's own),
    the worst (farthest from 1) of the four schedules."""
    from distlab.pipeline import zero_bubble

    plan = {"gpipe": dict(schedule="gpipe"), "1f1b": dict(schedule="1f1b"), "zb_h1": dict(schedule="zb_h1"),
            "interleaved": dict(schedule="interleaved", chunks=2)}
    ranks = distlab.launch(zero_bubble.rounds, world_size=2, schedules_=plan, rounds=ROUNDS, model="mlp", width=1024,
                           depth=3, global_batch_size=256, micro_batches=8, steps=10, lr=0.01, progress="none")
    rows = zero_bubble.summarise_rounds(ranks)
    for name in plan:
        c = [row[name] for row in rows]
        med = {k: statistics.median(x[k] for x in c) for k in ("measured", "simulated", "with_messages", "message_s")}
        print(f"REPORT bubble {name}: measured {med['measured']:.3f}, textbook {c[0]['textbook']:.3f}, simulated "
              f"{med['simulated']:.3f}, with the measured costs {med['with_messages']:.3f} "
              f"({med['message_s'] * 1e3:.2f} ms a message)")
    goal("zb_h1_bubble_vs_1f1b", [row["zb_h1"]["measured"] / row["1f1b"]["measured"] for row in rows], "<=", 0.8,
         "measured ZB-H1 bubble / measured 1F1B bubble, m = 8")
    worst = [max((row[n]["measured"] / row[n]["with_messages"] for n in plan), key=lambda x: abs(x - 1))
             for row in rows]
    goal("bubble_measured_vs_predicted", worst, "within", (0.75, 1.25),
         "the worst schedule's measured bubble / simulated with the run's measured costs: receive as a rendezvous, "
         "time between passes, each drawn from the run's own")


def alpha_beta() -> None:
    """``alpha_beta_vs_measured_ring_1e6``: lesson 03's model (``comm.cost_model.fit_link`` on its ping-pong and
    add) against the by-hand ring all-reduce of 1e6 floats on 2 ranks (``comm.measure_costs.measure``, its best
    repetition), 5 launches: predicted / measured per launch."""
    from distlab.comm import cost_model, measure_costs

    ratios = []
    for r in range(ROUNDS):
        m = distlab.launch(measure_costs.measure, world_size=2, sizes=(1_000_000,), algorithms=("ring",),
                           progress="none")[0]
        link = cost_model.fit_link(m["ping_pong"], m["add"])
        row = measure_costs.compare(m, link)[0]
        ratios.append(row["ratio"])
        print(f"round {r}: ring of 1e6 floats measured {row['measured'] * 1e3:.2f} ms, predicted "
              f"{row['predicted'] * 1e3:.2f} ms ({link})", flush=True)
    goal("alpha_beta_vs_measured_ring_1e6", ratios, "within", (0.75, 1.25), "predicted / measured, 2 ranks")


def main() -> None:
    buckets()
    ring()
    bubbles()
    alpha_beta()
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
              f"in {R.step_seconds(record) * 1e3:.2f} ms, the median step after the first)")
    for gpu in R.HARDWARE.values():
        print(f"REPORT ridge_{gpu.name.replace(' ', '_')} {R.ridge(gpu.bf16_flops, gpu.memory_bandwidth):.0f} "
              f"FLOPs per byte (datasheet)")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s)")
