"""Benchmark for issue 38 (fitting more: precision, recomputation, offload), the goals built so far.

- ``bf16_final_loss_vs_fp32``: data-parallel training on 2 real ranks (``data_parallel.train``, by hand),
  the lesson's MLP for ``STEPS`` steps, in bf16 (``precision="bf16"``: autocast, fp32 master weights)
  and in fp32, one pair per seed, the two taking turns; per seed the ratio of the final losses (mean
  of the last 10 steps).  Goal within 0.9..1.1: computing in 16 bits costs the loss nothing that
  matters over these steps.  Next to it (REPORT, no goal in the issue): fp16 with its loss scaler, and
  how many updates the scaler skipped.

- ``mixed_precision_bytes_model_vs_measured``: in the same runs, and in bf16 with master weights
  (``precision="bf16_master"``), the bytes rank 0 counted on its tensors (``record.memory``: parameters,
  gradients, master copy, optimizer state between steps; activations and autocast's weight copies kept
  for one mini-batch's backward) over ``predict`` (``memory.bytes_per_parameter`` and
  ``activations.mlp_saved_bytes``), category by category: every ratio of every policy and seed is a
  round.  Goal within 0.9..1.1.

Issue 38's other three goals are measured by bench/recompute.py (``recompute_activation_bytes_model_vs_measured``,
``selective_recompute_extra_time_vs_full``) and bench/fp8_numerics.py (``fp8_tile_error_vs_tensor_error``),
each runnable on its own; this script runs both after its own, so that it prints all five of the issue's goals.
"""
import os
import sys
import time
import warnings

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.predict import activations, memory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scripts.goals import goal  # noqa: E402
import fp8_numerics  # noqa: E402   (bench/fp8_numerics.py)
import recompute  # noqa: E402      (bench/recompute.py)

SEEDS, STEPS = (0, 1, 2, 3, 4), 150
SETUP = dict(world_size=2, method="by_hand", global_batch_size=64, steps=STEPS, lr=0.1, optimizer="momentum",
             progress="none")


def final_loss(records) -> float:
    """The mean loss of rank 0's last 10 steps."""
    losses = records[0].losses
    return sum(losses[-10:]) / 10


def byte_ratios(record, policy: str) -> list[float]:
    """Measured over predicted bytes, per category, for rank 0's record."""
    n = sum(p.numel() for p in record.params.values())
    want = {k: v * n for k, v in memory.bytes_per_parameter(policy, SETUP["optimizer"]).items()}
    want.update(activations.mlp_saved_bytes(record.config["batch_size"], record.config["width"],
                                            record.config["depth"], policy=policy))
    return [record.memory[k] / v for k, v in want.items() if v]


def bench() -> None:
    ratios, fp16_ratios, skipped, byte_rounds = [], [], [], []
    for seed in SEEDS:
        order = ("fp32", "bf16", "fp16", "bf16_master") if seed % 2 == 0 else ("bf16_master", "fp16", "bf16", "fp32")
        got = {p: distlab.launch(dp.train, seed=seed, precision=p, **SETUP) for p in order}
        for policy, records in got.items():
            byte_rounds += byte_ratios(records[0], policy)
        ratios.append(final_loss(got["bf16"]) / final_loss(got["fp32"]))
        fp16_ratios.append(final_loss(got["fp16"]) / final_loss(got["fp32"]))
        skipped.append(sum(s for _, s in got["fp16"][0].loss_scale))
        print(f"seed {seed}: final loss fp32 {final_loss(got['fp32']):.4f}, bf16 {final_loss(got['bf16']):.4f}, "
              f"fp16 {final_loss(got['fp16']):.4f} ({skipped[-1]} updates skipped by the loss scaler)", flush=True)
    distlab.shutdown()
    goal("bf16_final_loss_vs_fp32", ratios, "within", (0.9, 1.1))
    goal("mixed_precision_bytes_model_vs_measured", byte_rounds, "within", (0.9, 1.1))
    print(f"REPORT mixed_precision_bytes_ratio_range {min(byte_rounds):.4f} to {max(byte_rounds):.4f}")
    print(f"REPORT fp16_final_loss_vs_fp32 {sorted(fp16_ratios)[len(fp16_ratios) // 2]:.4g} "
          f"(rounds {min(fp16_ratios):.4g} to {max(fp16_ratios):.4g}; skipped updates {skipped})")


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    t0 = time.time()
    bench()
    print(f"({time.time() - t0:.0f} s)\n== bench/recompute.py", flush=True)
    recompute.main()
    print(f"({time.time() - t0:.0f} s)\n== bench/fp8_numerics.py", flush=True)
    fp8_numerics.bench()
    print(f"({time.time() - t0:.0f} s)")
