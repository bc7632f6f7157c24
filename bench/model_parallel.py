"""Benchmark for issue #12: pipeline bubbles, a 2-stage pipeline's speedup, tensor parallelism's bytes.

Three measurements on real ranks, each in rounds (``scripts/goals.py`` prints their spread and
bases each GOAL on the median):

- ``pipeline_bubble_ratio_<schedule>_m<m>``: the bubble measured on 2 stages (from the passes
  each rank recorded, ``schedules.bubble(pipeline.timeline(...))``, median over the measured
  steps) over the textbook's ``(p - 1) / (m + p - 1)``, for GPipe and 1F1B at m = 1, 2, 4, 8.
  Goal within 0.75..1.25.  Messages and uneven stages are expected to add to the measured bubble.
- ``pipeline_speedup_2stages``: samples/s of a 2-stage 1F1B pipeline at m = 8 over one process
  training the same model (the same code with one stage), alternating; each rank one core.
  Goal >= 1.5 (the bubble alone caps it at 2 x 8/9 = 1.78).  Next to it, the machine's own
  ceiling (``distlab.measure.ceiling``: 2 ranks multiplying the micro-batch's matrices with no
  communication at all, over 1), what cutting the batch into 8 micro-batches costs a single
  process, and how much longer the same passes took inside the pipeline: the measurements that
  say where a shortfall comes from.
- ``tensor_parallel_vs_dp_bytes``: bytes that really crossed the loopback interface per step
  (``/proc/net/dev``, the difference between a long and a short run, so start-up and the
  test evaluation cancel) for 2-rank tensor parallelism, over the prediction: two all-reduces
  of ``batch x width`` numbers, in which each of the 2 ranks sends the whole tensor once.
  Goal within 0.9..1.1.  Data parallelism on the same model is measured the same way and
  reported next to it.

The model is the wide MLP (width 1024, depth 3: two balanced stages), global batch 512.
"""
import statistics
import sys
import time

import distlab
from distlab.measure import ceiling
from distlab.data_parallel import data_parallel as dp
from distlab.pipeline import pipeline, schedules
from distlab.tensor import tensor_parallel as T
from distlab.predict import traffic
from distlab.predict.bubbles import bubble_fraction
from scripts.goals import goal
from scripts.wire import loopback_bytes

MODEL = dict(model="mlp", width=1024, depth=3, global_batch_size=512, lr=0.01)
STEPS, SKIP, ROUNDS = 10, 2, 3
MICRO = (1, 2, 4, 8)
WIRE = dict(width=1024, global_batch_size=256, lr=0.01)
SHORT, LONG = 3, 13


def run_pipeline(world: int, schedule: str, m: int, steps: int = STEPS):
    return distlab.launch(pipeline.train, world_size=world, schedule=schedule, micro_batches=m, steps=steps,
                          progress="none", warm=True, **MODEL)


def steady(records) -> float:
    """Samples/s from step SKIP on, the slowest rank's time."""
    seconds = max(r.steps[-1].t_end - r.steps[SKIP].t_start for r in records)
    return MODEL["global_batch_size"] * (len(records[0].steps) - SKIP) / seconds


def bubbles(rounds: int) -> dict:
    out = {(s, m): [] for s in ("gpipe", "1f1b") for m in MICRO}
    for i in range(rounds):
        keys = list(out) if i % 2 == 0 else list(out)[::-1]
        for schedule, m in keys:
            records = run_pipeline(2, schedule, m)
            measured = statistics.median(schedules.bubble(pipeline.timeline(records, s))
                                         for s in range(SKIP, STEPS))
            out[schedule, m].append(measured / bubble_fraction(2, m))
        print(f"round {i}: " + ", ".join(f"{s} m={m} {v[-1]:.2f}" for (s, m), v in out.items()), flush=True)
    return out


def busy(records) -> float:
    """Seconds all stages together spent in forward and backward passes, median over steps."""
    return statistics.median(sum(e["end"] - e["start"] for r in records for e in r.events
                                 if e["step"] == s and e["kind"] in ("F", "B")) for s in range(SKIP, STEPS + 2))


def speedups(rounds: int) -> dict[str, list[float]]:
    """Per round: the 2-stage speedup over one process; the ceiling (2 ranks multiplying the
    micro-batch's matrices with no communication, over 1); how much longer the same passes
    took in the pipeline; and what cutting the batch into 8 micro-batches costs one process."""
    out = {"speedup": [], "ceiling": [], "inflation": [], "micro": []}
    for i in range(rounds):
        order = ((1, 1), (1, 8), (2, 8)) if i % 2 == 0 else ((2, 8), (1, 8), (1, 1))
        runs = {(w, m): run_pipeline(w, "1f1b", m, steps=STEPS + 2) for w, m in order}
        out["speedup"].append(steady(runs[2, 8]) / steady(runs[1, 1]))
        out["inflation"].append(busy(runs[2, 8]) / busy(runs[1, 1]))
        out["micro"].append(busy(runs[1, 8]) / busy(runs[1, 1]))
        out["ceiling"].append(ceiling.ceiling(2, rows=MODEL["global_batch_size"] // 8, width=MODEL["width"],
                                              repeats=600))
        print(f"round {i}: 1 process {steady(runs[1, 1]):.0f} samples/s, 2 stages {steady(runs[2, 8]):.0f} "
              f"samples/s, ratio {out['speedup'][-1]:.3f}; passes {out['inflation'][-1]:.2f}x as long in the "
              f"pipeline, {out['micro'][-1]:.2f}x in one process cut into 8 micro-batches; 2 ranks multiplying "
              f"alone do {out['ceiling'][-1]:.2f}x the work of 1", flush=True)
    return out


def wire_bytes_per_step(fn, **kwargs) -> float:
    """Loopback bytes of a LONG run minus a SHORT one, per step of difference."""
    sent = {}
    for steps in (SHORT, LONG):
        before = loopback_bytes()
        distlab.launch(fn, world_size=2, steps=steps, progress="none", warm=True, **kwargs)
        sent[steps] = loopback_bytes() - before
    return (sent[LONG] - sent[SHORT]) / (LONG - SHORT)


def wire(rounds: int) -> list[float]:
    b, w = WIRE["global_batch_size"], WIRE["width"]
    tp_predicted = 2 * sum(traffic.tensor_parallel_bytes(b, w).values())   # 2 all-reduces x 2 ranks, once each
    dp_predicted = 2 * traffic.gradient_bytes("mlp", w, depth=3)          # 1 all-reduce of every gradient x 2 ranks
    ratios, dp_ratios = [], []
    for i in range(rounds):
        tp = wire_bytes_per_step(T.train, **WIRE)
        dpb = wire_bytes_per_step(dp.train, method="fused", depth=3, record_grads_at=(), **WIRE)
        ratios.append(tp / tp_predicted)
        dp_ratios.append(dpb / dp_predicted)
        print(f"round {i}: tensor parallel {tp / 1e6:.2f} MB/step (predicted {tp_predicted / 1e6:.2f}), "
              f"data parallel {dpb / 1e6:.2f} MB/step (predicted {dp_predicted / 1e6:.2f})", flush=True)
    print(f"REPORT data_parallel_bytes_vs_predicted {statistics.median(dp_ratios):.3f} (tensor parallelism "
          f"moves {statistics.median(ratios) * tp_predicted / (statistics.median(dp_ratios) * dp_predicted):.2f}x "
          f"the bytes of data parallelism here, batch {b}, width {w})")
    return ratios


def main() -> int:
    t0 = time.time()
    print(f"model {MODEL}; {STEPS} steps, {SKIP} skipped, {ROUNDS} rounds", flush=True)
    bubble = bubbles(ROUNDS)
    speed = speedups(ROUNDS)
    tp = wire(ROUNDS)
    distlab.shutdown()
    for (schedule, m), values in bubble.items():
        goal(f"pipeline_bubble_ratio_{schedule}_m{m}", values, "within", (0.75, 1.25))
    med = {k: statistics.median(v) for k, v in speed.items()}
    bound = 2 * (1 - bubble_fraction(2, 8))
    print(f"REPORT compute_ceiling_2_ranks {med['ceiling']:.3f} (2 ranks multiplying "
          f"{MODEL['global_batch_size'] // 8}x{MODEL['width']} by {MODEL['width']}x{MODEL['width']} with no "
          f"communication, work per second over 1 rank; 2.0 = two independent cores)")
    print(f"REPORT micro_batch_cost {med['micro']:.3f} (forward and backward passes of one process at 8 "
          "micro-batches over the same at 1: smaller matrix products do less per second)")
    print(f"REPORT pipeline_pass_inflation {med['inflation']:.3f} (the passes, summed over the 2 stages, "
          "over the same passes in one process at 1 micro-batch)")
    print(f"REPORT pipeline_speedup_bound {bound * med['ceiling'] / 2 / med['micro']:.3f} (2 x (1 - bubble) "
          f"= {bound:.2f} for independent cores, times ceiling / 2, over the micro-batch cost)")
    goal("pipeline_speedup_2stages", speed["speedup"], ">=", 1.5)
    goal("tensor_parallel_vs_dp_bytes", tp, "within", (0.9, 1.1))
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
