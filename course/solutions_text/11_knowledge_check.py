# %% [markdown]
# # Lesson 11 · solutions
#
# The knowledge check of `notebooks/11_knowledge_check.ipynb`, answered. Where a question is
# about your own runs, the answer is read from what your lessons stored, as you would read it
# from their outputs: run lessons 01 to 10 first.

# %%
import math
import statistics

from distlab.course import exercises_verdict
from distlab.course import results as course_results
from distlab.course import knowledge_check as check
from distlab.predict import flops
from distlab.verdict import t_quantile

# %% [markdown]
# **1.** Too much data for one worker's time: copies of the model on parts of the data. A model
# too big for one worker: cut the model. The model fits but Adam's state does not: ZeRO shards
# the optimizer's state (and, at higher stages, gradients and parameters).

# %%
assert check.which_parallelism({"the data takes too long on one worker": "data",
                                "the model does not fit in one worker's memory": "model",
                                "the optimizer's state does not fit, the model does": "zero"})

# %% [markdown]
# **2.** Yes: the mean of the ranks' mini-batch gradients is the gradient of their union, so
# every step is the big batch's step (lesson 01 measured the parameters equal up to rounding).

# %%
assert check.same_as_one_big_batch(True, course_results.recall("01"))

# %% [markdown]
# **3.** One: tensor fusion packs the tensors that are ready within one cycle into one buffer
# and all-reduces it once, so the step pays the fixed cost *alpha* once instead of once per tensor.

# %%
assert check.horovod_fusion(1, tensors=6)

# %% [markdown]
# **4.** The parameter server: it receives N-1 whole gradients and sends N-1 back, so its link
# grows with N; a ring rank sends 2(N-1)/N of one gradient, less than two, whatever N.

# %%
assert check.busiest_link("parameter server")

# %% [markdown]
# **5.** About the straggler's delay: the fast rank reaches every all-reduce that much earlier
# and waits. Your run's measured value is the answer:

# %%
lesson04 = course_results.recall("04")
assert check.straggler_wait(lesson04["extra_wait_of_rank_0"], lesson04)

# %% [markdown]
# **6.** The regime with the largest measured speedup (or one whose repeats overlap with it).
# Was it the one with the most arithmetic per byte of gradient? That is for your data to say:
# the cell prints the regimes in order of arithmetic per byte beside what each gained. The
# orders need not agree: arithmetic per byte only bounds the communication's share, and lesson
# 05 measured that each rank's compute need not halve on two shared cores.

# %% tags=["nbval-ignore-output"]
lesson05 = course_results.recall("05")
speedups = lesson05["speedup_2_ranks"]
per_byte = {name: flops.compute_per_byte(cfg["model"], cfg["width"], cfg["global_batch_size"] // 2)
            for name, cfg in lesson05["regimes"].items()}
for name in sorted(per_byte, key=per_byte.get):
    print(f"{name:>6}: {per_byte[name]:>9,.0f} FLOPs per byte of gradient, speedup on 2 ranks {speedups[name]:.2f}")
most, fastest = max(per_byte, key=per_byte.get), max(speedups, key=speedups.get)
print("the most arithmetic per byte gained most" if most == fastest else
      f"the most arithmetic per byte ({most}) did not gain most in this run: {fastest} did")
assert check.best_regime(fastest, lesson05)

# %% [markdown]
# **7.** The memory. Both schedules idle (p-1)/(m+p-1) of the time; 1F1B runs each micro-batch's
# backward as early as it can, so the first stage keeps at most p micro-batches' activations
# instead of all m.

# %%
assert check.pipeline_schedule("memory", stages=4, micro_batches=8)

# %% [markdown]
# **8.** Tensor parallelism's: it all-reduces the block's output forward and its input's
# gradient backward, batch x width numbers each. Data parallelism all-reduces the gradient, one
# number per parameter, whatever the batch.

# %%
assert check.tensor_parallel_traffic("tensor", width=512)

# %% [markdown]
# **9.** Stage 0's bytes over stage 3's, as rank 0 held them: close to the number of ranks, a
# little less (shards are padded).

# %%
lesson08 = course_results.recall("08")
held = lesson08["bytes_held_by_rank_0"]
assert check.zero3_saving(held["0"] / held["3"], lesson08)

# %% [markdown]
# ZeRO-2 keeps the fp16 parameters whole (2 bytes) and divides the gradients (2) and the
# optimizer state (12) by the 8 ranks: 2 + 14/8 bytes per parameter.

# %%
assert check.zero2_bytes_per_parameter(2 + 14 / 8, world_size=8)

# %% [markdown]
# **10.** `distlab job azureml run.yaml --set launch.image=myregistry.azurecr.io/distlab:0.1` (add
# `-o job.yml` to write it to a file; the options may come in any order). Without the image distlab
# refuses, as lesson 09 showed: a cluster cannot pull `distlab:latest` from your laptop. And the world
# size is `launch.nodes` x `launch.processes_per_node`, 8 ranks sharing the global batch of 96.

# %%
assert check.azure_ml_command("distlab job azureml run.yaml --set launch.image=myregistry.azurecr.io/distlab:0.1")
assert check.azure_ml_command("distlab job azureml --set launch.image=myregistry.azurecr.io/distlab:0.1 -o job.yml "
                              "run.yaml")
assert check.azure_ml_command("distlab job azureml run.yaml") is False     # refused: no image
assert check.per_rank_batch_from_config(96 // (2 * 4), nodes=2, processes_per_node=4, global_batch_size=96)

# %% [markdown]
# **11.** The steps between the last complete checkpoint and the kill, as the monitor counted them.

# %%
lesson10 = course_results.recall("10")
assert check.failure_cost(lesson10["steps_redone"], lesson10)

# %% [markdown]
# Failures at random add their rates: N machines fail N times as often as one, so the job's
# mean time between failures is one machine's hours divided by 512.

# %%
assert check.job_hours_between_failures(3 * 365 * 24 / 512, machines=512, years_between_failures=3)

# %% [markdown]
# **12.** Too much work in one block: split its heads and hidden units (tensor parallelism). The
# same LayerNorm activations on every tensor rank: cut the line between the regions (sequence
# parallelism). One line's attention too big for a rank: give each rank a piece of the line for
# the whole block and pass K and V round (context parallelism, ring attention).

# %%
assert check.long_line_split({"one block's weights and heads are too much work for one rank": "tensor",
                              "every tensor rank keeps the same LayerNorm activations of the whole line": "sequence",
                              "the attention of one line no longer fits in one rank's memory": "context"})

# %% [markdown]
# **13.** A router that favours a few experts: add the balancing loss, which is smallest when the
# tokens, and the router's probabilities, are spread evenly over the experts (a capacity would
# only drop the extra requests). A buffer of known size: give each expert a capacity, drop the
# requests past it and pad to it, as GShard and Switch do (lesson 13's ranks exchange the counts
# instead). Experts too many for one rank: put each on its own rank and send the tokens to
# them with all-to-all (expert parallelism).

# %%
assert check.expert_troubles({"the router sends most tokens to the same few experts": "balancing loss",
                              "each expert's buffer needs a size known before the tokens are routed": "capacity",
                              "the experts together hold more parameters than one rank can keep": "expert parallelism"})

# %% [markdown]
# **14. Fitting more.** Loss scaling multiplies the loss so that small gradients stay inside fp16's range;
# selective recomputation drops attention's `a b s^2` probabilities and computes attention's core again in
# the backward pass; full recomputation keeps only each block's input; offload moves the optimizer's state
# and master copy to the host's memory. bf16 master weights answer none: they *add* an fp32 copy.

# %%
assert check.memory_levers({"in fp16 the smallest gradients become zero": "loss scaling",
                            "the attention probabilities of long lines fill the accelerator's memory":
                                "selective recomputation",
                            "every block's activations, not only attention's, fill the accelerator's memory":
                                "full recomputation",
                            "Adam's moments and the fp32 master copy do not fit, and the host has memory to spare":
                                "offload"})

# %% [markdown]
# **15. Where the time goes.** Buckets launched from hooks leave while backward still computes; ZB-H1 fills
# 1F1B's cool-down with deferred weight-gradient passes; posting the ring's next hop before computing hides
# it behind the block's attention; `no_sync` sends the accumulated gradient once. One bucket as large as
# the model answers none: it leaves only when backward has ended.

# %%
assert check.time_levers({"the gradients' all-reduce starts only once backward has ended": "buckets",
                          "a pipeline's stages idle in the cool-down of every step": "zero bubble",
                          "each ring-attention hop is waited for in full before its block is used":
                              "post the hop first",
                          "gradient accumulation all-reduces every gradient after each micro-batch": "no_sync"})

# %% [markdown]
# **16. The verdict rule.** The standard error of each mean is `s/sqrt(n)`; the gap's is the root of
# their squares' sum. Welch's degrees of freedom weigh the two sides' variances; with 3 runs a side
# Student's t at 99% is several times the normal's 2.58, which is what keeps a lucky gap between
# three runs from naming a winner. A zero gap, or one under the margin, is no answer.

# %% tags=["nbval-ignore-output"]
def my_verdict(a, b, margin):
    if len(a) < 3 or len(b) < 3:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)     # squared standard errors
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb else len(a) + len(b) - 2
    gap = ma - mb
    if gap == 0 or abs(gap) <= t_quantile(df) * math.sqrt(va + vb) or abs(gap) <= margin:
        return None
    return "a" if gap > 0 else "b"


assert exercises_verdict.verdict_rule(my_verdict, course_results.this_sitting())
