# %% [markdown]
# # Lesson 05 · solutions
#
# The exercises of `notebooks/05_does_distributing_pay.ipynb` with their answers filled in,
# checked by the same checkers as in the lesson. The lesson fits `alpha` and `beta` inside
# training; here they come from a quick ping-pong on two ranks (lesson 03's way), which is
# enough to check the formula: the checker compares with the same constants.

# %% tags=["nbval-ignore-output"]
import torch

import distlab
from distlab.course import exercises, exercises_evaluate
from distlab.comm import cost_model, measure_costs
from distlab.predict import traffic

idle = distlab.launch(measure_costs.measure, world_size=2, sizes=(1_000,), repeats=3, algorithms=("ring",),
                      ping_pong_bytes=(8, 8_000, 80_000), ping_pong_repeats=20, progress="none")[0]
link = cost_model.fit_link(idle["ping_pong"])
alpha, beta = link.alpha, link.beta
print(f"alpha = {alpha * 1e6:.0f} us, 1/beta = {1 / beta / 1e9:.2f} GB/s")

# %% [markdown]
# **All-reduce on 8 ranks.** Each of the k = 6 tensors is all-reduced on its own, in
# 2(N-1) = 14 rounds that each pay α: 2(N-1)·k·α. The bytes do not care how they are cut:
# each rank sends 2(N-1)/N of the n bytes of gradient once, at β per byte.

# %%
n_bytes = traffic.gradient_bytes("mlp", 64)
answer = 2 * (8 - 1) * 6 * alpha + 2 * (8 - 1) / 8 * n_bytes * beta

assert exercises.allreduce_on_eight(answer, n_bytes, messages=6, alpha=alpha, beta=beta)

# %% [markdown]
# **Accuracy on shards, one decision.** Sum the two counts over the ranks, then divide: every test
# sample counts once, whatever the shards' sizes (180 and 179 here; the mean of the two shard
# accuracies is off in the fifth decimal). Every rank then holds the same two sums, so every rank
# computes the same accuracy and takes the same decision: none stops alone.

# %%
def accuracy_and_stop(worker, correct, total, target):
    counts = torch.tensor([float(correct), float(total)], dtype=torch.float64)
    worker.all_reduce(counts)                  # (all correct answers, all test samples), on every rank
    accuracy = (counts[0] / counts[1]).item()
    return accuracy, accuracy >= target


assert exercises_evaluate.accuracy_on_shards(accuracy_and_stop)
