"""Benchmark for issue 29: a mixture of experts, its experts spread over ranks (lesson 13).

On real ranks (torchrun, CPU), lesson 12's line reader with every block's MLP made of ``experts``
experts and a router (``parallelize.trainer``), lines of 3 digits:

- ``moe_ep_max_diff``: the parameters after 20 SGD steps (``EP``) on 4 ranks (one expert a rank, the
  all-to-all by hand, top-2, capacity factor 1: tokens are dropped) against one process routing each
  step's lines in 4 groups (``train_single(groups=4)``), under one process's names
  (``measure.as_one_process``): the largest difference.  Goal <= 1e-5.  SGD, as in the tests: Adam
  divides an expert's near-zero gradient by its own size.  Printed before it: whether every step kept
  the same tokens at every expert of every block as one process did.
- ``all_to_all_bytes_vs_formula``: the bytes that arrived from other ranks per step (all ranks, forward
  and backward: ``measure.measured_bytes``, the mean over the steps) over ``predict.traffic.all_to_all_bytes``
  (an even spread of each rank's tokens over the experts, at most the capacity kept, (n - 1)/n of them
  crossing, four times), at the lesson's sizes (``LESSON``, 4 ranks).  Goal within 0.9..1.1.  A count,
  not a time: it is taken from every timed run below (by hand and library alike), and they agree.
- ``by_hand_all_to_all_vs_library``: the time of the forward's exchanges (the parts "dispatch" and
  "combine" of ``ExpertParallelMoE``, both blocks) with the all-to-all by hand (n - 1 rounds of
  send/recv, every round's messages posted before any is waited for) over one ``all_to_all_single``,
  4 ranks, ``LESSON`` sizes.  Per step and part, the time from the moment the last rank began it to
  the moment the last rank finished it (the ranks' wall clocks are one clock on one machine).  Not any
  one rank's own time: until the last rank arrives the others wait for its routing or its experts,
  which is the imbalance's cost, not the exchange's; and no rank can finish before every rank has sent
  (each needs a piece from each), so the span is the exchange itself.  ``ROUNDS`` rounds of four
  launches, by hand, library, library, by hand (a load that grows or fades during a round hits both
  alike), ``TIMED_STEPS`` steps each, the first ``SKIP`` left out; a round's figure is the median of
  its by-hand steps over the median of its library steps; the GOAL is the median of the rounds, the
  ratio of the medians of all steps beside it.  Goal <= 1.3.  Printed before it: the same on 2 ranks
  (one send/recv each way, a core each; 2.10 and 1.50 in two runs): each of gloo's send/recv costs
  about as much as a whole all-to-all of these sizes, so the by-hand version waited round by round
  took 1.58 x the library's time on 4 ranks; posting every round first, 1.19 and 1.16.  Another
  program on the 2 cores slows the by-hand exchange more than the library's.
- ``balance_with_aux_loss``: the busiest expert's requests over the mean (``measure.imbalance``, the
  worse block), the mean of the last 10 steps (``measure.settled``), after ``BALANCE_STEPS`` Adam
  steps on 2 ranks, top-1, with Switch Transformer's balancing loss (weight 0.1); the same without it
  (weight 0) beside.  One round per seed in ``SEEDS`` (eight: with three, the 99% interval of the
  one rule, t with 2 degrees of freedom, was wider than the gap, 1.27 against 1.44): a seed's routing
  is the same in every run (one process routing in 2 groups gives the same 1.205 for seed 0), so the
  seeds are the spread.
  Goal <= 1.25.
- ``balance_aux_vs_none``: the same seeds with the balancing loss switched off (weight 0): the course's
  one rule (``distlab.verdict``) over the seeds, with against without, lower is better.  1 when it names
  the balancing loss the winner, 0 otherwise ("no clear difference" included).  Goal >= 1.

Informational, no goal: the test accuracy of the reader with 4 experts (top-1: the same arithmetic per
token as the dense reader, plus its router) against the dense reader, one process, ``ACCURACY_STEPS``
Adam steps, on the digits of ``ACCURACY_LINES`` test lines, one run a seed in ``SEEDS``, judged by the
course's one rule (``distlab.verdict``), as lesson 13 judges it.

The one-process runs use one thread, as each rank does: with two threads on 2 cores, the reader with
experts took 20 s for 100 steps instead of 3.7 s.

Issue 37, on a busy machine (four sessions sharing 2 cores): 201 s; with eight seeds the one rule named
the balancing loss (1.26 against 1.38, gap 0.122 beyond the 99% interval's 0.113) and the reader with
experts (0.658 against 0.345) the winners; balance_with_aux_loss missed by a hair (1.257 > 1.25).

Run time: under 2 minutes on 2 quiet cores (113 s in each of two runs; 135 s while tests ran beside
it), half of it the 24 launches of the timed exchanges, 45 s the 6 balance runs.  Exits 0.
"""
import os
import statistics
import sys
import time

import torch

import distlab
from distlab.experts import measure
from distlab.parallelize import trainer
from distlab.predict import traffic
from distlab.verdict import verdict
from scripts.goals import goal

MESH = dict(data=1, expert=-1)      # every rank an expert rank
EP = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=20, experts=4, top_k=2,
          capacity_factor=1.0, optimizer="sgd", lr=0.1, **MESH)
LESSON = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, experts=4, top_k=2,
              capacity_factor=1.25, aux_weight=0.1, optimizer="adam", lr=1e-2, test_lines=32, **MESH)
BALANCE = dict(experts=4, top_k=1, capacity_factor=1.25, lr=1e-2, optimizer="adam", test_lines=32,
               all_to_all="library", **MESH)
RANKS, ROUNDS, TWO_RANK_ROUNDS, TIMED_STEPS, SKIP = 4, 5, 1, 20, 2
BALANCE_STEPS, SEEDS = 150, tuple(range(8))   # 3 seeds could not decide (99% t with 2 degrees of freedom)
ACCURACY_STEPS, ACCURACY_LINES = 100, 128
EXCHANGES = ("dispatch", "combine")


def kept(records, steps: int) -> list:
    """Per step, per block: the tokens each expert kept, all ranks' together."""
    return [[[sum(r.routing[s][b]["kept"][e] for r in records) for e in range(len(records[0].routing[s][b]["kept"]))]
             for b in range(len(records[0].routing[s]))] for s in range(steps)]


def exchange_seconds(records, step: int) -> float:
    """One step's forward exchanges: per block and part, from the last rank's start to the last rank's end."""
    total = 0.0
    for block in range(len(records[0].routing[step])):
        for part in EXCHANGES:
            spans = [r.routing[step][block]["times"][part] for r in records]
            total += max(end for _, end in spans) - max(start for start, _ in spans)
    return total


def timed_runs(ranks: int, blocks: int, formula: float | None):
    """``blocks`` rounds of four launches, by hand, library, library, by hand (a load that grows or fades
    during a round hits both alike); per round and exchange, every timed step's exchange seconds, and
    (if ``formula``) each run's mean bytes per step over the formula, and every step's."""
    rounds, wire, per_step = [], [], []
    for _ in range(blocks):
        times = {"by_hand": [], "library": []}
        for how in ("by_hand", "library", "library", "by_hand"):
            recs = sorted(distlab.launch(trainer.train, ranks, progress="none", warm=True, all_to_all=how,
                                         steps=TIMED_STEPS, **LESSON), key=lambda r: r.rank)
            times[how] += [exchange_seconds(recs, s) for s in range(SKIP, TIMED_STEPS)]
            if formula:
                sent = measure.measured_bytes(recs)
                wire.append(statistics.mean(sent) / formula)
                per_step += [b / formula for b in sent]
        rounds.append(times)
    return rounds, wire, per_step


def main() -> int:
    t0 = time.time()
    torch.set_num_threads(1)                 # as each rank: one thread, no fighting over the 2 cores
    print(f"line reader with {EP['experts']} experts a block: d_model {EP['width']}, {EP['heads']} heads, "
          f"{EP['depth']} blocks, lines of {EP['digits']} digits ({EP['digits'] * 16} tokens), "
          f"batch {EP['global_batch_size']}", flush=True)

    single = trainer.train_single(world_size=RANKS, **EP)
    ranks = distlab.launch(trainer.train, RANKS, progress="none", warm=True, all_to_all="by_hand", **EP)
    diff = distlab.max_param_difference(measure.as_one_process(ranks), single.params)
    same = kept(ranks, EP["steps"]) == kept([single], EP["steps"])
    dropped = sum(measure.dropped([single]))
    print(f"every step kept the same tokens at every expert as one process: {'yes' if same else 'NO'} "
          f"({dropped} requests dropped over {EP['steps']} steps)", flush=True)
    goal("moe_ep_max_diff", [diff], "<=", 1e-5,
         f"{RANKS} ranks, all-to-all by hand, top-{EP['top_k']}, {EP['steps']} SGD steps against one process")

    tokens = LESSON["global_batch_size"] // RANKS * LESSON["digits"] * 16
    formula = traffic.all_to_all_bytes(tokens, LESSON["width"], LESSON["top_k"], LESSON["experts"],
                                       LESSON["capacity_factor"], RANKS, LESSON["depth"])
    rounds, wire, per_step = timed_runs(RANKS, ROUNDS, formula)
    print(f"bytes from other ranks per step / formula ({formula / 2**20:.3f} MiB, {tokens} tokens a rank): "
          f"{len(wire)} runs {min(wire):.4f} to {max(wire):.4f}; single steps {min(per_step):.3f} to "
          f"{max(per_step):.3f}", flush=True)
    goal("all_to_all_bytes_vs_formula", wire, "within", (0.9, 1.1),
         f"{RANKS} ranks, top-{LESSON['top_k']}, capacity factor {LESSON['capacity_factor']}")

    medians = {how: [statistics.median(r[how]) for r in rounds] for how in ("by_hand", "library")}
    for how, ms in medians.items():
        print(f"{how}: forward exchanges per step, median of a round's steps, rounds "
              + ", ".join(f"{1e3 * m:.1f}" for m in ms) + " ms", flush=True)
    pooled = {how: statistics.median([t for r in rounds for t in r[how]]) for how in medians}
    two, _, _ = timed_runs(2, TWO_RANK_ROUNDS, None)
    two = {how: statistics.median([t for r in two for t in r[how]]) for how in medians}
    print(f"on 2 ranks (one round of send/recv by hand, a core each): by hand / library "
          f"{two['by_hand'] / two['library']:.2f} ({1e3 * two['by_hand']:.1f} ms, {1e3 * two['library']:.1f} ms)")
    goal("by_hand_all_to_all_vs_library", [h / lib for h, lib in zip(medians["by_hand"], medians["library"])],
         "<=", 1.3, f"all steps together: {1e3 * pooled['by_hand']:.1f} ms by hand, {1e3 * pooled['library']:.1f} "
         f"ms library, {pooled['by_hand'] / pooled['library']:.2f}; {RANKS} ranks on {os.cpu_count()} cores")

    balance = {0.1: [], 0.0: []}
    for seed in SEEDS:
        for aux in balance:
            recs = distlab.launch(trainer.train, 2, progress="none", warm=True, steps=BALANCE_STEPS, seed=seed,
                                  aux_weight=aux, **BALANCE)
            balance[aux].append(measure.settled(measure.imbalance(recs))["mean"])
        print(f"seed {seed}: busiest expert / mean, last 10 of {BALANCE_STEPS} steps: with the auxiliary loss "
              f"{balance[0.1][-1]:.3f}, without {balance[0.0][-1]:.3f}", flush=True)
    distlab.shutdown()
    goal("balance_with_aux_loss", balance[0.1], "<=", 1.25,
         f"without: {statistics.median(balance[0.0]):.2f}; 2 ranks, top-1, {BALANCE_STEPS} steps")
    same_seeds = verdict(balance[0.1], balance[0.0], names=("with the balancing loss", "without"), better="lower")
    print(f"seeds {SEEDS}, with the balancing loss against without: {same_seeds}")
    goal("balance_aux_vs_none", [1.0 if same_seeds.winner == "with the balancing loss" else 0.0], ">=", 1,
         "1: the one rule names the balancing loss the winner over the same seeds")

    accuracy = {"moe": [], "dense": []}
    for seed in SEEDS:
        accuracy["moe"].append(trainer.train_single(top_k=1, experts=4, capacity_factor=1.25, aux_weight=0.1,
                                                    seed=seed, steps=ACCURACY_STEPS, lr=1e-2,
                                                    test_lines=ACCURACY_LINES).test_accuracy)
        accuracy["dense"].append(trainer.train_single(width=32, heads=4, depth=2, digits=3, global_batch_size=16,
                                                      seed=seed, steps=ACCURACY_STEPS, lr=1e-2,
                                                      test_lines=ACCURACY_LINES).test_accuracy)
    print(f"test accuracy after {ACCURACY_STEPS} steps, 4 experts (top-1) against dense (the same active "
          f"parameters, plus the router), seeds {SEEDS}: " + str(verdict(
              accuracy["moe"], accuracy["dense"], names=("the reader with experts", "the dense reader"))))
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
