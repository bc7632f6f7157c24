# %% [markdown]
# # Lesson 12 · solutions
#
# The exercises of `notebooks/12_long_lines.ipynb` with their answers filled in, checked by the
# same checkers as in the lesson; exercises 1 and 2 also against real runs, at a length small
# enough for a laptop (the rule does not depend on the length); exercise 4 runs on real ranks.

# %%
import torch

import distlab
from distlab.course import exercises_long_lines
from distlab.context import context_parallel as cp
from distlab.parallelize import trainer

SMALL = dict(width=64, heads=4, depth=4, digits=4, global_batch_size=8, steps=1, data=1, tensor=-1)   # 64 tokens

# %% [markdown]
# **1. Bytes of tensor parallelism.** Per block two regions (attention, MLP); each all-reduces one
# activation of b x s x h numbers forward (g) and one backward (f), 4 bytes a number:
# 4 blocks x 2 regions x 2 x 8 x 512 x 64 x 4 = 16,777,216 bytes.

# %% tags=["nbval-ignore-output"]
heads = distlab.launch(trainer.train, world_size=2, progress="none", **SMALL)

# %%
my_bytes = 4 * 2 * 2 * 8 * 512 * 64 * 4

assert sum(heads[0].traffic.values()) == 4 * 2 * 2 * 8 * 64 * 64 * 4      # the same rule, 64 tokens, counted
assert exercises_long_lines.tp_bytes(my_bytes, batch=8, tokens=512, d_model=64, layers=4)

# %% [markdown]
# **2. Bytes round the ring.** Each hop a rank sends the K and V of one piece of the line (b x s/n x
# h numbers each) to its neighbour; after n - 1 hops every rank has seen every piece:
# 3 hops x 2 x 8 x 128 x 64 x 4 = 1,572,864 bytes.

# %% tags=["nbval-ignore-output"]
ring = distlab.launch(trainer.train, world_size=2, context=2, progress="none", **SMALL)

# %%
my_ring_bytes = (4 - 1) * 2 * 8 * (512 // 4) * 64 * 4

first_block = [m for m in ring[0].ring["log"] if m["phase"] == "forward"][:2 - 1]
assert sum(m["bytes"] for m in first_block) == (2 - 1) * 2 * 8 * (64 // 2) * 64 * 4   # the rule, 2 ranks, counted
assert exercises_long_lines.ring_bytes(my_ring_bytes, batch=8, tokens=512, d_model=64, ranks=4)

# %% [markdown]
# **3. Zig-zag chunks.** The line is cut into 2 x 8 = 16 chunks; rank r takes chunk r and its
# mirror 15 - r, so every rank has one early chunk (little to attend to) and one late (much).

# %%
print({r: cp.chunk_ids(r, 8, "zigzag") for r in range(8)})
my_chunks = [2, 13]

assert exercises_long_lines.zigzag_chunks(my_chunks, rank=2, ranks=8)

# %% [markdown]
# **4. The merge.** Each partial output is normalised by its own exp-sum, `exp(lse_a)` and
# `exp(lse_b)`; over both sets of keys the exp-sum is their sum, whose log is `logaddexp(lse_a, lse_b)`.
# So each partial output counts with its share, `exp(lse_a - lse)`, and the new log-sum-exp is the
# total's (the next hop weighs with it). `logaddexp` never forms `exp` of a large score: no overflow.

# %% tags=["nbval-ignore-output"]
def merge(out_a, lse_a, out_b, lse_b):
    """Two partial attentions of the same queries over disjoint keys -> (output, log-sum-exp) over both."""
    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * torch.exp(lse_a - lse) + out_b * torch.exp(lse_b - lse), lse


right = exercises_long_lines.merge_partials(merge)

# %%
assert right
print("the merge, on 4 real ranks, equals softmax over the keys seen at every hop:", right)
