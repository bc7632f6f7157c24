# %% [markdown]
# # 01 · Data parallelism
#
# **Goal:** split the digits across N workers, train one model on N real processes, and see,
# number for number, that averaging the workers' gradients gives exactly the update one
# process would make on the whole batch.

# %% [markdown]
# ## Two ways to divide the work
#
# * **Data parallelism** (this lesson): every worker holds a *full copy* of the model and trains
#   it on a *different part of the data*. The copies must stay identical, so the workers combine
#   their gradients before every update.
# * **Model parallelism**: the *model* is cut into pieces that live on different workers, for
#   models too large for one. Activations (and, in backward, their gradients) travel between
#   workers instead of the parameters' gradients.
#   Lessons 06 (whole layers per worker: pipelines) and 07 (slices of each layer: tensor
#   parallelism, and the three combined) run it; lessons 01 to 05 are data parallelism.
#
# The insurance company wants to train on more data, so data parallelism comes first.

# %%
import torch
import distlab
from distlab.data_parallel import data_parallel
from distlab.data import load_digits, shard_indices
from distlab.widgets.data_parallel import gradient_widget, gradients_at, partition_widget

torch.set_num_threads(1)   # tiny model: one thread in this notebook; the cores are for the workers
digits = load_digits()
N = 2                      # workers (ranks)
config = dict(model="mlp", width=64, global_batch_size=64, steps=150, lr=0.5, seed=0,
              record_grads_at=(0, 50, 149))

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## Partitions and mini-batches
#
# Before training, the training set is **partitioned**: each rank gets its own **shard**, the
# shards do not overlap, and together they cover every sample. No rank has to ask another which
# samples are its own: all shuffle the indices with the same seed, and rank `r` takes every N-th
# index starting at `r` (this is what PyTorch's `DistributedSampler` does). Each rank then walks
# through its shard in **mini-batches**; an incomplete last mini-batch is dropped (PyTorch's
# `drop_last`), so every step has B samples a rank, and the next epoch reshuffles.
#
# **Predict:** with 3 workers, do all ranks get the same number of samples? 1,438 does not divide by 3.
#
# Move the sliders: the strip shows every training sample coloured by the rank that gets it;
# below, the first digits each rank will see.

# %% tags=["nbval-ignore-output"]
partition_widget(digits, world_size=N, seed=config["seed"])

# %%
n = digits.n_train
for workers in (1, 2, 3, 4):
    sizes = [len(shard_indices(n, r, workers)) for r in range(workers)]
    print(f"{workers} worker(s): {sizes} samples per rank, {sum(sizes) - n} used twice")

# %% [markdown]
# When the samples do not divide evenly, the first few are used twice so that every rank has as
# many mini-batches as the others. A rank that ran out early would leave the others waiting at
# the next exchange until its timeout (PyTorch's DDP offers `Join` for uneven inputs).

# %% [markdown]
# ## One global update from N local gradients
#
# The loss of a mini-batch is the **mean** of its samples' losses. Split a global batch of
# $NB$ samples into N mini-batches of $B$ samples, one per rank. Then
#
# $$
# \nabla L_{\text{global}} = \frac{1}{NB}\sum_{i=1}^{NB} \nabla \ell_i
# = \frac{1}{N}\sum_{r=1}^{N} \underbrace{\frac{1}{B}\sum_{i \in \text{rank } r} \nabla \ell_i}_{\text{rank } r\text{'s gradient}}
# $$
#
# so the average of the ranks' gradients *is* the gradient of the whole global batch (the
# mini-batches must have equal size). If every rank starts
# from the same parameters and applies the same averaged gradient, the copies stay identical and
# together they take the steps of one process with batch $NB$, up to rounding. (It needs a loss
# that is a mean over independent samples: BatchNorm's per-worker statistics break it.)

# %% [markdown]
# In code, by hand (`AllReduceEachParameter` in `distlab/data_parallel/gradient_sync.py`, through
# the one reducer in `distlab/train/reduce.py`):
#
# ```python
# loss.backward()                            # this rank's gradient, from its own B samples
# for p in model.parameters():
#     worker.all_reduce(p.grad, op="avg")    # every rank now holds the average of all N
# optimizer.step()                           # same parameters + same gradient = same step
# ```
#
# ## Train for real on N processes

# %% tags=["nbval-ignore-output"]
by_hand = distlab.launch(data_parallel.train, world_size=N, method="by_hand", progress="auto",
                         **config)

# %% [markdown]
# And the reference: **one** process, taking at every step exactly the union of the ranks'
# mini-batches (64 samples).

# %%
single = data_parallel.train_single(world_size=N, **config)
same_shards = all(torch.equal(r.shard, shard_indices(n, r.rank, N, seed=config["seed"]))
                  for r in by_hand)
print("the ranks trained on the shards the partition widget showed:", same_shards)
assert same_shards

# %% [markdown]
# ## Looking at the gradients
#
# The ranks recorded their gradients at steps 0, 50 and 149. **Predict:** will rank 0's and
# rank 1's gradients look alike? Will their average look like the one-process gradient?
#
# Pick a step and a layer. Each heatmap is one gradient (a weight matrix: one row per unit, one
# column per input); purple is positive, orange negative, and all panels share one colour scale.

# %% tags=["nbval-ignore-output"]
gradient_widget(by_hand, single)

# %%
for step in sorted(by_hand[0].grads):
    spread = gap = 0.0
    for layer in by_hand[0].grads[step]:
        g = gradients_at(by_hand, single, step, layer)
        spread = max(spread, (g["rank 0"] - g["rank 1"]).abs().max().item())
        gap = max(gap, (g["average"] - g["single"]).abs().max().item())
    print(f"step {step:3d}: ranks disagree (max diff > 1e-3): {spread > 1e-3};"
          f"  average vs one process, max diff <= 1e-6: {gap <= 1e-6}")
    assert spread > 1e-3 and gap <= 1e-6

# %% [markdown]
# Each rank's gradient is noisy: it saw only 32 digits. Their average is the gradient of all 64,
# to rounding error, which is all that floating-point addition in a different order leaves.
#
# ## The same with PyTorch's DistributedDataParallel
#
# `DistributedDataParallel` (DDP) does the averaging for you, usually faster: it groups gradients into
# buckets (the first 1 MiB, then 25 MiB each) and all-reduces a bucket as soon as backward has
# filled it, while backward goes on with the earlier layers. This MLP's whole gradient fits in the
# first bucket (the next cell prints both), so here DDP sends **one** message, after backward:
# nothing to overlap. The mathematics is the same, so the result must be too.

# %% tags=["nbval-ignore-output"]
ddp = distlab.launch(data_parallel.train, world_size=N, method="ddp", progress="auto", **config)

# %%
from distlab.predict import traffic

print(f"the whole gradient: {traffic.gradient_bytes(config['model'], config['width']) / 1e3:.1f} kB; "
      f"DDP's first bucket: {2 ** 20 / 1e3:.0f} kB")
for name, records in (("by_hand", by_hand), ("ddp", ddp)):
    diff = max(distlab.max_param_difference(r.params, single.params) for r in records)
    print(f"{name:8s} final parameters vs one process: max diff <= 1e-6: {diff <= 1e-6}")
    assert diff <= 1e-6

# %% [markdown]
# After 150 steps, both ways end with the parameters of the single process, on every rank.
#
# ## Accuracy
#
# **Predict:** which test accuracy do N ranks reach compared with the one-process run? And
# compared with *one worker alone*, training on its 32-digit mini-batches for the same 150 steps?

# %%
print(f"N={N} ranks, by hand:          {by_hand[0].test_accuracy:.3f}")
print(f"N={N} ranks, DDP:              {ddp[0].test_accuracy:.3f}")
print(f"one process, batch {config['global_batch_size']}:      {single.test_accuracy:.3f}")
accuracies = [by_hand[0].test_accuracy, ddp[0].test_accuracy, single.test_accuracy]
assert max(accuracies) - min(accuracies) <= 1 / len(digits.y_test)   # at most one test digit apart


# %%
from distlab.course import results as course_results

# lesson 11 ends the course on what you measured: keep it
course_results.remember("01", world_size=N, max_param_difference=distlab.max_param_difference(by_hand[0].params,
                                                                                              single.params),
                        test_accuracy={"ranks": by_hand[0].test_accuracy, "one_process": single.test_accuracy})

# %% [markdown]
# The same, as they must be (on CPU to the last digit; rounding on other hardware could move a
# digit that sits right on a decision boundary). One seed says little about one worker alone, so
# before comparing the two, the course's rule for naming a winner.

# %% [markdown]
# ## When is a difference real? The course's one rule
#
# A seed's test accuracy is one **independent run**: its own start and data order. The steps of
# one run are not independent (they share all of that). The spread of single runs (the standard
# deviation *s* of the runs' values) stays the same however many runs you add; the uncertainty of
# their **mean**, the standard error *s/√n*, shrinks. So the rule (`distlab/verdict.py`, used by
# every lesson from here on) compares means: at least 3 runs a side, the gap larger than a
# confidence interval built from the standard errors (Welch's), and larger than a **margin**, the
# smallest gap that matters (a share of the larger mean). Otherwise it says **"no clear
# difference"**: the runs allow either order. More runs can then settle it; a rule built on one
# run's spread never could. The next cell prints the rule's settings.

# %% [markdown]
# **Predict:** over 8 seeds each, does batch 64 (the two workers together) clearly beat one
# worker alone at batch 32, after the same 150 steps?

# %%
from distlab.verdict import CONFIDENCE, MARGIN, MIN_RUNS, verdict

print(f"the rule: at least {MIN_RUNS} runs a side, a {CONFIDENCE:.0%} interval, a margin of {MARGIN:.0%}")


def accuracy(batch, seed):
    run = data_parallel.train_single(**{**config, "global_batch_size": batch, "seed": seed,
                                        "record_grads_at": ()})
    return run.test_accuracy


seeds = {batch: [accuracy(batch, seed) for seed in range(8)] for batch in (32, 64)}
for batch, who in ((32, "one worker alone, batch 32"), (64, f"batch 64 (= {N} workers)")):
    print(f"{who:28s} seeds 0-7: {[round(a, 3) for a in seeds[batch]]}")
seed_verdict = verdict(seeds[64], seeds[32], names=("batch 64", "batch 32"), better="higher")
print(seed_verdict)

# %% [markdown]
# In the same number of steps the workers together see twice as many digits, and a gradient
# averaged over more samples is less noisy, which is expected to give a better model (or an equal
# one, once both have learned what the data allow). The verdict above says whether these eight
# seeds *show* it; "no clear difference" means they cannot tell the two apart, not that the two
# are equal. Note that this is a bigger batch per step, not more data: the training set is the
# same 1,438 digits (more data is lesson 05b's question).

# %% [markdown]
# The other side is time. Each rank computed on 32 digits per step instead of 64, but the
# ranks also had to talk, and on a small machine they compete for the same cores. Lesson 05
# measures properly, with repeated runs and this rule, whether N workers finish sooner; here, a
# first look at the three runs above.

# %% [markdown]
# **Predict:** how many messages does each send per step: the ranks averaging by hand (one
# all-reduce per parameter tensor), the ranks with DDP (one bucket here), one process (none)? Which
# would you then expect to train the most samples per second?
#
# The cell below prints each run's samples per second (all its samples over the slowest rank's
# time from the first step to the last) and draws each run's step durations: a box holds the
# middle half of the steps, the whiskers most of the rest (the slowest outliers are not drawn).
# One run of each cannot name a winner by the rule: it is a first look.

# %% tags=["nbval-ignore-output"]
from matplotlib.figure import Figure

from distlab.widgets.display import show

runs = {"by hand (2 ranks)": by_hand, "DDP (2 ranks)": ddp, "one process": [single]}
speed = {name: distlab.throughput(records) for name, records in runs.items()}
for name, records in runs.items():
    print(f"{name:18s} {speed[name]:8.0f} samples/s (training loop only, start-up excluded)")
print("one run each: the rule needs at least 3 independent runs a side, so no winner is named here "
      "(lesson 05 repeats the runs and asks the rule)")
step_ms = {name: [1e3 * max(r.steps[i].t_end - r.steps[i].t_start for r in records)    # slowest rank
                  for i in range(len(records[0].steps))] for name, records in runs.items()}
fig = Figure(figsize=(9, 2.8))
ax = fig.subplots()
ax.boxplot(list(step_ms.values()), orientation="horizontal", showfliers=False)
ax.set_yticks(range(1, len(runs) + 1), [f"{n}\n{speed[n]:.0f} samples/s" for n in runs])
ax.set_xlabel("milliseconds per step (slowest rank)")
fig.tight_layout()
show(fig)

# %% [markdown]
# How to read it: the one process only computes, on 64 samples a step. Each rank computes on
# 32, then waits for the exchange, and with this tiny model a step computes so little that the
# fixed cost of each message weighs heavily. By hand, a rank pays for 6 messages in a row; with
# DDP for about one bucket; the one process for none. These are one run of each, and the boxes
# are the steps of that run, which share its start, its neighbours on the machine and its data:
# they show the spread within a run, not whether another run would come out in the same order.
# Lesson 02 splits a step into computing and talking; lesson 05 repeats the runs and asks the rule
# whether the ranks win.

# %% [markdown]
# ## Exercises
#
# **1.** From the ranks' own (local) gradients of `out.weight` at step 50, compute the gradient
# that every rank applied. Replace the `...` with your own code (rank *r*'s local gradient is
# `by_hand[r].grads[50]["out.weight"]["local"]`).

# %%
from distlab.course import exercises

my_average = ...   # a tensor of the shape of out.weight

local = [r.grads[50]["out.weight"]["local"] for r in by_hand]
exercises.averaged_gradient(my_average, local, expected=single.grads[50]["out.weight"]["local"])

# %% [markdown]
# **2.** With **3** workers and a **global** batch of 96 on the same 1,438 training digits:
# how many samples does each rank's shard hold, how many samples are used twice per epoch, and
# how many steps make one epoch?

# %%
answer = dict(samples_per_rank=..., used_twice=..., steps_per_epoch=...)

exercises.shards_of_three(answer, n=digits.n_train, global_batch_size=96, world_size=3)

# %% [markdown]
# **3. Build it: the gradient average.** Write what every rank runs after backward: make each
# parameter's `p.grad` the average of the ranks' gradients. `worker.all_reduce(t)` *sums* `t` over
# the ranks, in place; `worker.world_size` is N. The checker runs your function on 3 real ranks
# inside the course's training loop for 4 steps, compares every step's gradients with one process
# on the whole batch (`distlab.compare`, which you can use on your own runs), and then the ranks'
# copies with each other. If they differ, it says at which step, in which parameter, by how much.

# %%
from distlab.course import exercises_build


def average_gradients(model, worker):
    ...   # for every parameter p of model: p.grad becomes the ranks' average


exercises_build.gradient_average(average_gradients)

# %% [markdown]
# The answers are in `course/solutions/01_data_parallelism.ipynb`; more exercises (with
# solutions) are in `course/exercises/01_data_parallelism.md`.
#
# **What we learned:** N workers with the same starting parameters and averaged gradients take
# the steps of one process on an N times larger batch, up to rounding. Data parallelism buys a bigger
# batch per step, not a different algorithm. Next, **02 · Horovod** runs the same training with
# Horovod.

# %% [markdown]
# **Previous:** [00 · Welcome to distlab](00_welcome.ipynb) · **Next:** [02 · The same job with Horovod](02_horovod.ipynb) · [The course: map, glossary, solutions](../course/README.md)
