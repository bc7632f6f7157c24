# %% [markdown]
# # Lesson 01 · solutions
#
# The exercises of `notebooks/01_data_parallelism.ipynb` with their answers filled in, checked
# by the same checkers as in the lesson. The first one needs the lesson's runs: they are
# repeated here (same settings, a few seconds).

# %% tags=["nbval-ignore-output"]
import torch

import distlab
from distlab.course import exercises, exercises_build
from distlab.data import load_digits
from distlab.data_parallel import data_parallel

digits = load_digits()
N = 2
config = dict(model="mlp", width=64, global_batch_size=64, steps=150, lr=0.5, seed=0,
              record_grads_at=(0, 50, 149))
by_hand = distlab.launch(data_parallel.train, world_size=N, method="by_hand", progress="none", **config)
single = data_parallel.train_single(world_size=N, **config)

# %% [markdown]
# **1.** Every rank applied the *mean* of the ranks' local gradients (the loss of a mini-batch
# is the mean over its samples, and the mean over 64 samples is the mean of the two means
# over 32).

# %%
my_average = torch.stack([r.grads[50]["out.weight"]["local"] for r in by_hand]).mean(0)

local = [r.grads[50]["out.weight"]["local"] for r in by_hand]
assert exercises.averaged_gradient(my_average, local, expected=single.grads[50]["out.weight"]["local"])

# %% [markdown]
# **2.** Each rank gets ceil(1,438 / 3) = 480 samples; the three shards hold 1,440, so 2
# samples are used twice; each rank takes 96 / 3 = 32 samples a step from its 480, so an epoch
# is 480 // 32 = 15 steps (a partial batch at the end of a shard is dropped).

# %%
answer = dict(samples_per_rank=480, used_twice=2, steps_per_epoch=15)

assert exercises.shards_of_three(answer, n=digits.n_train, global_batch_size=96, world_size=3)

# %% [markdown]
# **3.** After backward each rank holds the gradient of its own 32 digits. The all-reduce sums
# them over the ranks, in place; dividing by N makes the sum the mean, which is the gradient of
# the whole batch of 64 (the first formula of the lesson). Every parameter, or the copies drift.

# %%
def average_gradients(model, worker):
    for p in model.parameters():
        worker.all_reduce(p.grad)          # the sum over the ranks, in place
        p.grad /= worker.world_size        # the mean: the gradient of the whole batch


assert exercises_build.gradient_average(average_gradients)
