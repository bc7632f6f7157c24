# %% [markdown]
# # Lesson 06 · solutions
#
# The exercises of `notebooks/06_splitting_the_model.ipynb` with their answers filled in,
# checked by the same checkers as in the lesson; exercise 3 also against a real run.

# %%
import distlab
from distlab.course import exercises, exercises_pipeline
from distlab.pipeline import pipeline, schedules

# %% [markdown]
# **1. The bubble of 4 stages and 8 micro-batches.** With equal stages and free messages, each
# stage works 8 passes' worth and waits 3 (p - 1) while the pipe fills and drains:
# 3 / (8 + 3) = 3/11, about 0.27 (Narayanan et al. 2021, section 2.2.1,
# [arXiv:2104.04473](https://arxiv.org/abs/2104.04473), as a share of all the time).

# %%
my_bubble = (4 - 1) / (8 + 4 - 1)

assert exercises.bubble_of(my_bubble, stages=4, micro_batches=8)

# %% [markdown]
# **2. Activations on 1F1B's first stage.** Stage 0 runs p - 1 = 3 warm-up forwards, then one
# more forward before its first backward frees micro-batch 0: at most 4 = p micro-batches, for
# any m of at least p (min(p, m) in general; GPipe would hold all 8).

# %%
print(" ".join(map(str, schedules.one_f_one_b(4, 8, 0))))
my_held = 4

assert exercises.held_on_first_stage(my_held, stages=4, micro_batches=8)

# %% [markdown]
# **3. Bytes stage 0 sends per step.** Every sample of the batch leaves stage 0 as 512 numbers of
# 4 bytes, in 8 micro-batches of 32 samples: 256 x 512 x 4 = 524,288 bytes, whatever m is.

# %% tags=["nbval-ignore-output"]
run = distlab.launch(pipeline.train, world_size=2, schedule="1f1b", micro_batches=8, steps=3, model="mlp",
                     width=512, depth=3, global_batch_size=256, lr=0.1, seed=0, progress="none")

# %%
my_bytes = 256 * 512 * 4

assert my_bytes == run[0].traffic["pipeline"]
assert exercises.activation_bytes(my_bytes, batch=256, width=512, micro_batches=8)

# %% [markdown]
# **4. Build it: 1F1B's order.** Stage `s` of `p` first runs `p - 1 - s` forwards (fewer if there
# are fewer micro-batches), enough to keep every later stage busy; then it alternates one
# forward and one backward, the backward of the oldest micro-batch it holds; then it runs the
# backwards left. So stage `s` never holds more than `p - s` micro-batches' activations.

# %%
def my_one_f_one_b(stages, micro_batches, stage):
    """The passes stage `stage` runs, in order: a list of ("F", i) and ("B", i)."""
    warmup = min(stages - 1 - stage, micro_batches)
    order = [("F", i) for i in range(warmup)]                     # fill the pipe
    for i in range(micro_batches - warmup):                       # one in, one out
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro_batches - warmup, micro_batches)]    # drain it


assert exercises_pipeline.one_f_one_b_order(my_one_f_one_b)
