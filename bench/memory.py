"""Benchmark for issue #13: does each rank hold what the memory model predicts, and does ZeRO
train like plain data parallelism?

On 2 and 4 ranks, one launch each trains the MLP at width 1024 (1.1 million parameters) for a
few steps at every ZeRO stage: stages 0 to 2 by hand (and stage 2 overlapped with backward) and
3 with FSDP2, with Adam (``fsdp.every_stage``), and stages 0 to 3 with DeepSpeed, with SGD and momentum
(one optimizer state per parameter instead of Adam's two, so the memory model is checked with a
second value of K; ``deepspeed_zero.config`` names either optimizer, clipping off).  Each rank
counts the bytes of the tensors it holds after its last update (``train.memory_held``).  GOAL lines:

- ``held_vs_model_<how>_stage<k>_<N>r``: measured / predicted bytes, the category furthest from
  1 on the rank furthest from it, goal within 0.9..1.1.  DeepSpeed is predicted with the fp32
  copy of the shard its stages 1 and 2 keep, and its gradients are left out (it frees them
  after each step; the model counts them as held);
- ``params_vs_plain_<how>_<N>r``: the largest difference between any stage's parameters and
  plain data parallelism's (stage 0 of the same implementation), goal at most 1e-5.

Byte counts do not depend on the machine's load: two runs give the same figures.  Exits 0.
"""
import sys
import time

import distlab
from distlab.models import build_model, count_parameters
from distlab.zero import deepspeed_zero, fsdp, zero
from distlab.predict import memory as M
from scripts.goals import goal

SETTINGS = dict(model="mlp", width=1024, global_batch_size=64, steps=3, lr=0.01)
WORLDS = (2, 4)


def worst_ratio(records, predicted: dict, categories) -> float:
    ratios = [r.memory[c] / predicted[c] for r in records for c in categories if predicted[c]]
    return max(ratios, key=lambda x: abs(x - 1))


def main() -> int:
    t0 = time.time()
    psi = count_parameters(build_model("mlp", SETTINGS["width"]))
    print(f"MLP width {SETTINGS['width']}: {psi:,} parameters")
    for world in WORLDS:
        ours = distlab.launch(fsdp.every_stage, world, progress="none", optimizer="adam", **SETTINGS)
        theirs = {s: distlab.launch(deepspeed_zero.train, world, progress="none", stage=s, optimizer="momentum",
                                    **SETTINGS) for s in M.STAGES} if deepspeed_zero.available() is None else {}
        for stage in M.STAGES:
            how = "fsdp2" if stage == 3 else "by_hand"
            predicted = M.per_rank(psi, world, stage=stage, optimizer="adam", precision="fp32").as_dict()
            print(f"{world} ranks, stage {stage} ({how}): rank 0 holds {ours[0][stage].memory}, predicted "
                  f"{ {k: round(v) for k, v in predicted.items() if k != 'activations'} }")
            goal(f"held_vs_model_{how}_stage{stage}_{world}r", [worst_ratio([r[stage] for r in ours], predicted,
                                                                   ("params", "grads", "optimizer"))],
                 "within", (0.9, 1.1))
        overlapped = distlab.launch(zero.train, world, progress="none", stage=2, overlap=True, optimizer="adam",
                                    **SETTINGS)
        predicted = M.per_rank(psi, world, stage=2, optimizer="adam", precision="fp32").as_dict()
        goal(f"held_vs_model_overlapped_stage2_{world}r",
             [worst_ratio(overlapped, predicted, ("params", "grads", "optimizer"))], "within", (0.9, 1.1))
        gaps = [distlab.max_param_difference(r[s].params, r[0].params) for r in ours for s in M.STAGES]
        gaps += [distlab.max_param_difference(o.params, r[0].params) for o, r in zip(overlapped, ours)]
        goal(f"params_vs_plain_ours_{world}r", [max(gaps)], "<=", 1e-5)
        if not theirs:
            print("DeepSpeed does not run here:", deepspeed_zero.available())
            continue
        for stage, records in theirs.items():
            predicted = M.per_rank(psi, world, stage=stage, optimizer="momentum", precision="fp32",
                                   master_copy=stage in (1, 2)).as_dict()
            goal(f"held_vs_model_deepspeed_stage{stage}_{world}r",
                 [worst_ratio(records, predicted, ("params", "optimizer"))], "within", (0.9, 1.1))
        goal(f"params_vs_plain_deepspeed_{world}r", [max(distlab.max_param_difference(t.params, p.params)
                                                        for s in M.STAGES for t, p in zip(theirs[s], theirs[0]))],
             "<=", 1e-5)
    distlab.shutdown()
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
