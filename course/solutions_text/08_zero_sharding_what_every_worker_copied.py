# %% [markdown]
# # Lesson 08 · solutions
#
# The exercises of `notebooks/08_zero_sharding_what_every_worker_copied.ipynb` with their answers
# filled in, checked by the same checkers as in the lesson; exercise 1 also against a real run.

# %%
import torch

import distlab
from distlab.course import exercises, exercises_zero
from distlab.models import build_model, count_parameters
from distlab.zero import zero
from distlab.predict import memory

# %% [markdown]
# **1. Bytes per rank at stage 2, 10 million parameters, 4 ranks, Adam in fp32.** The parameters
# stay whole (4 bytes each); gradients (4 bytes) and Adam's two moments (8 bytes) are sharded
# four ways: 4 × 10^7 + (4 + 8) × 10^7 / 4 = 40 + 30 = 70 million bytes.

# %%
my_bytes = 4 * 10_000_000 + (4 + 8) * 10_000_000 // 4

assert exercises.bytes_per_rank(my_bytes, params=10_000_000, world_size=4, stage=2)

# %% [markdown]
# The same arithmetic on a real run: the MLP at width 256 on 4 ranks, stage 2, counted.

# %% tags=["nbval-ignore-output"]
run = distlab.launch(zero.train, world_size=4, stage=2, width=256, global_batch_size=64, steps=2, progress="none")

# %%
n = count_parameters(build_model("mlp", 256))
counted = sum(run[0].memory.values())
assert abs(counted / (4 * n + 12 * n / 4) - 1) < 0.01
print(f"{n:,} parameters: rank 0 holds {counted:,} bytes; 4 n + 12 n / 4 = {4 * n + 12 * n / 4:,.0f}")

# %% [markdown]
# **2. The lowest stage that fits, 7 billion parameters, Adam in mixed precision, 8 × 80 GB.**
# Stage 0 needs 16 bytes x 7e9 = 112 GB: too much. Stage 1 keeps parameters and gradients whole
# (2 + 2 bytes, 28 GB) and shards the 12 bytes of optimizer state eight ways (10.5 GB): 38.5 GB,
# which fits (activations aside, as the exercise asks). So stage 1, which costs no more
# communication than plain data parallelism.

# %%
for stage in memory.STAGES:
    print(f"stage {stage}: {memory.per_rank(7e9, 8, stage=stage).total / 1e9:.2f} GB per rank "
          "(Adam, mixed precision, 8 ranks)")
my_stage = 1

assert exercises.smallest_stage_that_fits(my_stage, params=7e9, world_size=8, budget_gb=80)

# %% [markdown]
# **3. ZeRO-3's traffic over plain data parallelism's.** Plain data parallelism all-reduces the
# gradients: a reduce-scatter and an all-gather, in which each of N ranks sends (N-1)/N Ψ
# numbers (with a ring), 2(N-1)/N Ψ in all. ZeRO-3 reduce-scatters the gradients once and
# all-gathers the parameters twice, for the forward and for the backward pass: 3(N-1)/N Ψ.
# The ratio is 3/2 = 1.5 whatever N (the ZeRO paper's 3 Ψ over 2 Ψ, for large N).

# %%
my_ratio = 3 / 2

assert exercises.zero3_traffic_ratio(my_ratio)

# %% [markdown]
# **4. Build it: ZeRO-1's update.** The reduce-scatter hands each rank the sum of everyone's
# gradients for its slice only; divided by N it is the mean data parallelism takes. The optimizer
# then moves only this shard and keeps only its state; the all-gather brings every rank the
# others' new shards, so every rank holds the whole updated model again.

# %%
def my_zero1_update(worker, flat, flat_grad, shard, optimizer):
    """Reduce-scatter the gradients, update my shard, all-gather the parameters."""
    mine = worker.reduce_scatter(flat_grad)          # my slice of everyone's gradients, summed
    shard.grad = mine / worker.world_size            # the mean, as data parallelism takes
    optimizer.step()                                 # only my shard moves; only its state is kept
    flat.copy_(torch.cat(worker.all_gather(shard)))  # everyone's new shards, to every rank


assert exercises_zero.zero1_update(my_zero1_update)
