"""Benchmark for issue 28: long lines split across ranks (lesson 12).

On real ranks (torchrun, CPU), the causal line reader on lines of ``DIGITS`` digits:

- ``ring_attention_max_diff``: the parameters after ``STEPS`` SGD steps of ring attention on 4
  ranks (zig-zag pieces) against one process: the largest difference.  Goal <= 1e-5.  SGD, not
  Adam, because Adam's first step divides each gradient by its own size: a gradient of 1e-9 whose
  last digits round differently (the ring adds the same numbers in another order) moves its
  parameter by a visible fraction of the learning rate (1.2e-5 after one Adam step at these sizes,
  for ring and all-gather alike), which says nothing about the attention.
- ``causal_work_imbalance_zigzag``: the slowest rank's attention time over the fastest's, in one
  step (each rank's thread CPU time inside attention, forward and backward), zig-zag split on
  2 ranks, lines of ``LONG`` digits (at 16 digits a block is too small: fixed costs per block
  hid the imbalance); the contiguous split's is printed beside it.  Goal <= 1.2.
- ``ring_attention_vs_allgather_peak_memory``: the activations a rank keeps for backward
  (``sequence.memory.SavedTensors``) with ring attention over those with all-gathered K and V,
  4 ranks.  Goal <= 0.75.
- ``activation_bytes_model_vs_measured`` and ``tp_sp_bytes_vs_formula``: not built yet (the memory
  model and sequence parallelism are the issue's next steps): printed as MISS with the reason.

Each figure is measured in ``ROUNDS`` launches on warm ranks and the GOAL is the median.
"""
import sys

import distlab
from distlab.sequence import training
from scripts.goals import goal

DIGITS, LONG, STEPS, ROUNDS = 16, 32, 20, 3
MODEL = dict(d_model=64, heads=4, layers=2, digits=DIGITS, global_batch_size=8, lr=3e-3, seed=0, causal=True)


def imbalance(records) -> float:
    times = [r.ring["attention_seconds"] for r in records]
    return max(times) / min(times)


def main() -> int:
    print(f"lines of {DIGITS} digits ({DIGITS * 16} tokens), causal, d_model {MODEL['d_model']}, "
          f"{MODEL['heads']} heads, {MODEL['layers']} blocks, batch {MODEL['global_batch_size']}")
    sgd = dict(MODEL, optimizer="sgd", lr=0.1)
    single = training.train_single(steps=STEPS, **sgd)
    ring = distlab.launch(training.train, 4, progress="none", warm=True, steps=STEPS, context=4,
                          attention="ring", split="zigzag", **sgd)
    diff = max(distlab.max_param_difference(r.params, single.params) for r in ring)
    print(f"loss after {STEPS} steps: one process {single.losses[-1]:.5f}, ring {ring[0].losses[-1]:.5f}")
    goal("ring_attention_max_diff", [diff], "<=", 1e-5, f"4 ranks, zig-zag, {STEPS} SGD steps against one process")

    memory = []
    for _ in range(ROUNDS):
        runs = {a: distlab.launch(training.train, 4, progress="none", warm=True, steps=2, context=4,
                                  attention=a, **MODEL) for a in ("all_gather", "ring")}
        memory.append(runs["ring"][0].activation_bytes / runs["all_gather"][0].activation_bytes)
    print(f"activations per rank: ring {runs['ring'][0].activation_bytes / 2**20:.2f} MiB, all-gather "
          f"{runs['all_gather'][0].activation_bytes / 2**20:.2f} MiB, one process "
          f"{training.train_single(steps=1, **MODEL).activation_bytes / 2**20:.2f} MiB")
    goal("ring_attention_vs_allgather_peak_memory", memory, "<=", 0.75, "saved for backward, 4 ranks")

    split = {"contiguous": [], "zigzag": []}
    for _ in range(ROUNDS):
        for how in split:
            recs = distlab.launch(training.train, 2, progress="none", warm=True, steps=2, context=2,
                                  attention="ring", split=how, **dict(MODEL, digits=LONG))
            split[how].append(imbalance(recs))
    for how, rounds in split.items():
        print(f"{how}: slowest rank's attention time / fastest's, rounds {', '.join(f'{r:.2f}' for r in rounds)}")
    goal("causal_work_imbalance_zigzag", split["zigzag"], "<=", 1.2,
         f"contiguous split: {sorted(split['contiguous'])[len(split['contiguous']) // 2]:.2f}")
    for name, why in (("activation_bytes_model_vs_measured", "the Korthikanti-style memory model is not built yet"),
                      ("tp_sp_bytes_vs_formula", "sequence parallelism is not built yet")):
        print(f"GOAL {name} nan within 0.9..1.1 MISS ({why})")
    distlab.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
