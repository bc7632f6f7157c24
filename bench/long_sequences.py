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
- ``tp_sp_bytes_vs_formula``: the bytes that really crossed the loopback interface per step
  (``/proc/net/dev``, a long run minus a short one, so start-up and the test evaluation cancel),
  2 ranks, over ``predict.traffic.tensor_parallel_wire_bytes`` (ring collectives: an all-reduce sends
  2(n-1)/n of its tensor, a reduce-scatter or all-gather (n-1)/n), for TP and for TP+SP; the GOAL
  is the one further from 1.  Goal within 0.9..1.1.
- ``activation_bytes_model_vs_measured``: ``predict.activations.transformer_activation_bytes`` (the
  Korthikanti-style model) over what rank 0 really kept for backward (``SavedTensors``), for no
  split, TP, TP+SP, CP with the ring and CP with all-gathered K and V on 2 ranks; the GOAL is the
  one further from 1.  Goal within 0.9..1.1.  The model and the count are deterministic: one round.

The timed figure is measured in ``TIMED_ROUNDS`` launches on warm ranks, the bytes in ``ROUNDS``, and
each GOAL is the median; the counted figures (memory, differences) are the same every time: one round.
"""
import sys

import distlab
from distlab.predict import traffic
from distlab.predict.activations import transformer_activation_bytes
from distlab.tensor import heads_split as tp
from distlab.parallelize import trainer
from distlab.sequence.transformer import TransformerConfig, build_transformer
from scripts.goals import goal
from scripts.wire import loopback_bytes

SHORT, LONGER = 2, 7      # steps of the two runs whose loopback bytes are subtracted

DIGITS, LONG, STEPS, ROUNDS, TIMED_ROUNDS = 16, 32, 20, 3, 5
MODEL = dict(width=64, heads=4, depth=2, digits=DIGITS, global_batch_size=8, lr=3e-3, seed=0, causal=True,
             data=1, tensor=-1)


def imbalance(records) -> float:
    times = [r.ring["attention_seconds"] for r in records]
    return max(times) / min(times)


def wire_per_step(**settings) -> float:
    sent = {}
    for steps in (SHORT, LONGER):
        before = loopback_bytes()
        distlab.launch(trainer.train, 2, progress="none", warm=True, steps=steps, **dict(MODEL, **settings))
        sent[steps] = loopback_bytes() - before
    return (sent[LONGER] - sent[SHORT]) / (LONGER - SHORT)


def token_params(sequence_parallel: bool) -> int:
    """The numbers of the parameters that see only a rank's tokens under sequence parallelism."""
    model = build_transformer(TransformerConfig(
        d_model=MODEL["width"], heads=MODEL["heads"], layers=MODEL["depth"], max_digits=MODEL["digits"]))
    return sum(p.numel() for name, p in model.named_parameters()
               if not name.startswith(("head.digits", "head.check")) and not name.endswith(tuple(tp.SPLIT)))


def main() -> int:
    print(f"lines of {DIGITS} digits ({DIGITS * 16} tokens), causal, d_model {MODEL['width']}, "
          f"{MODEL['heads']} heads, {MODEL['depth']} blocks, batch {MODEL['global_batch_size']}")
    sgd = dict(MODEL, optimizer="sgd", lr=0.1)
    single = trainer.train_single(steps=STEPS, **sgd)
    ring = distlab.launch(trainer.train, 4, progress="none", warm=True, steps=STEPS, context=4,
                          attention="ring", split="zigzag", **sgd)
    diff = max(distlab.max_param_difference(r.params, single.params) for r in ring)
    print(f"loss after {STEPS} steps: one process {single.losses[-1]:.5f}, ring {ring[0].losses[-1]:.5f}")
    goal("ring_attention_max_diff", [diff], "<=", 1e-5, f"4 ranks, zig-zag, {STEPS} SGD steps against one process")

    memory = []
    for _ in range(1):         # counted, not timed: the same every round (a list for goal())
        runs = {a: distlab.launch(trainer.train, 4, progress="none", warm=True, steps=2, context=4,
                                  attention=a, **MODEL) for a in ("all_gather", "ring")}
        memory.append(runs["ring"][0].activation_bytes / runs["all_gather"][0].activation_bytes)
    print(f"activations per rank: ring {runs['ring'][0].activation_bytes / 2**20:.2f} MiB, all-gather "
          f"{runs['all_gather'][0].activation_bytes / 2**20:.2f} MiB, one process "
          f"{trainer.train_single(steps=1, **MODEL).activation_bytes / 2**20:.2f} MiB")
    goal("ring_attention_vs_allgather_peak_memory", memory, "<=", 0.75, "saved for backward, 4 ranks")

    split = {"contiguous": [], "zigzag": []}
    for _ in range(TIMED_ROUNDS):
        for how in split:
            recs = distlab.launch(trainer.train, 2, progress="none", warm=True, steps=2, context=2,
                                  attention="ring", split=how, **dict(MODEL, digits=LONG))
            split[how].append(imbalance(recs))
    for how, rounds in split.items():
        print(f"{how}: slowest rank's attention time / fastest's, rounds {', '.join(f'{r:.2f}' for r in rounds)}")
    goal("causal_work_imbalance_zigzag", split["zigzag"], "<=", 1.2,
         f"contiguous split: {sorted(split['contiguous'])[len(split['contiguous']) // 2]:.2f}")
    wire = {False: [], True: []}
    for _ in range(ROUNDS):
        for sp in wire:
            predicted = 2 * traffic.tensor_parallel_wire_bytes(
                MODEL["global_batch_size"], DIGITS * 16, MODEL["width"], MODEL["depth"], 2, sequence_parallel=sp,
                token_params=token_params(sp) if sp else 0)
            wire[sp].append(wire_per_step(tensor=2, sequence_parallel=sp) / predicted)
    for sp, rounds in wire.items():
        print(f"{'TP + SP' if sp else 'TP'}: loopback bytes per step / formula, rounds "
              f"{', '.join(f'{r:.3f}' for r in rounds)}")
    worst = max((wire[False], wire[True]), key=lambda rounds: abs(sorted(rounds)[len(rounds) // 2] - 1))
    goal("tp_sp_bytes_vs_formula", worst, "within", (0.9, 1.1), "2 ranks; the one of TP and TP+SP further from 1")
    ratios = {}
    cfg = TransformerConfig(d_model=MODEL["width"], heads=MODEL["heads"], layers=MODEL["depth"],
                            max_digits=DIGITS, causal=True)
    for name, settings in (("no split", None), ("TP", dict(tensor=2)),
                           ("TP + SP", dict(tensor=2, sequence_parallel=True)), ("CP ring", dict(context=2)),
                           ("CP all-gather", dict(context=2, attention="all_gather"))):
        if settings is None:
            measured, mesh = trainer.train_single(steps=1, **MODEL).activation_bytes, {}
        else:
            measured = distlab.launch(trainer.train, 2, progress="none", warm=True, steps=1,
                                      **dict(MODEL, **settings))[0].activation_bytes
            mesh = settings
        predicted = transformer_activation_bytes(cfg, MODEL["global_batch_size"], DIGITS * 16,
                                                 tensor=mesh.get("tensor", 1), context=mesh.get("context", 1),
                                                 sequence_parallel=mesh.get("sequence_parallel", False),
                                                 attention=mesh.get("attention", "ring"))["total"]
        ratios[name] = predicted / measured
        print(f"activations per rank, {name}: predicted {predicted / 2**20:.3f} MiB, "
              f"measured {measured / 2**20:.3f} MiB")
    worst = max(ratios, key=lambda k: abs(ratios[k] - 1))
    goal("activation_bytes_model_vs_measured", [ratios[worst]], "within", (0.9, 1.1), f"the worst: {worst}")
    distlab.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
