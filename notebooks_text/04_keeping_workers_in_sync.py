# %% [markdown]
# # Lesson 04 · Keeping workers in sync
#
# **Goal of this lesson.** The insurance company's machines are not all alike: one old server
# is slower than the rest. Synchronous data parallelism (lesson 01) makes every rank meet the
# others at every all-reduce, so what does one slow machine cost?

# %% [markdown]
# By the end of this lesson you can:
#
# 1. read a **timeline** recorded on real processes: when each rank computed, when it entered
#    and left the all-reduce, and how long it **waited** for the others;
# 2. predict, then measure, what a **straggler** (one slow rank) costs every other rank, and
#    the job's samples per second;
# 3. run **asynchronous SGD with a parameter server**, where nobody waits, and measure its
#    price: **staleness**, and whether it costs accuracy against as many updates of the same
#    size made without it (seeds, and lesson 01's rule);
# 4. talk **every k steps** instead of every step (gradient accumulation, local SGD) and
#    measure what that saves and what it costs.

# %% [markdown]
# Every number below is measured live on real worker processes, a little of each so that the
# lesson runs in well under a minute. Timings move from run to run (other programs share the
# cores): read them as "about".

# %%
import numpy as np

import distlab
from distlab.data_parallel import async_sgd, data_parallel, local_sgd
from distlab.records import max_param_difference
from distlab.widgets import timeline
from distlab.widgets.display import show

# every run of this lesson: the same small MLP, data, seed and learning rate
SETUP = dict(model="mlp", width=64, batch_size=32, lr=0.3, seed=0)

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. A timeline of real ranks
#
# With `method="by_hand"` (`data_parallel.train`'s default) every rank writes down the time
# (`time.time()`) five times per step: when it started, when forward and backward were done, when
# it entered the all-reduce, when it left it, and when the step ended. The ranks run on one machine and share its clock, so their
# stamps can be laid side by side. Two ranks, 60 steps:

# %% tags=["nbval-ignore-output"]
plain = distlab.launch(data_parallel.train, world_size=2, steps=60, **SETUP)

# %% [markdown]
# One row per rank, one group of bars per step; move the slider to see other steps (step 0 is
# slow everywhere: every library is called for the first time).

# %% tags=["nbval-ignore-output"]
timeline.timeline_widget(plain, title="two ranks, no straggler")

# %% [markdown]
# **What counts as waiting.** An all-reduce cannot finish before the *last* rank has entered
# it. So for each step, `timeline.waits` measures a rank's wait as the time from its own entry
# until the last rank entered:
#
#     wait[rank] = max over ranks of t_comm_start  -  t_comm_start[rank]
#
# The rest of its time inside the all-reduce is the transfer itself (green). Here the two ranks
# do the same work, so they wait little:

# %% tags=["nbval-ignore-output"]
print("mean wait per step (ms):", [round(w * 1e3, 2) for w in timeline.mean_wait(plain)])
print(f"samples per second, whole job: {distlab.throughput(plain):.0f}")


def middle(seconds):
    """Median and middle half (quartiles) of some durations, in ms."""
    q1, med, q3 = np.quantile(seconds, [0.25, 0.5, 0.75]) * 1e3
    return f"{med:.1f} ms (middle half {q1:.1f} to {q3:.1f})"


compute = [s.t_compute_end - s.t_start for s in plain[0].steps[1:]]
print(f"rank 0 computes a step (forward and backward) in {middle(compute)}")
print(f"rank 0's whole step (compute, waiting, all-reduce) takes {middle([s.t_end - s.t_start for s in plain[0].steps[1:]])}")

# %%
waits = timeline.waits(plain)
assert (waits >= 0).all() and (waits.min(axis=0) == 0).all()
print("at every step one rank waited exactly 0 s: the last one to arrive")

# %% [markdown]
# ## 2. A straggler: predict, then measure
#
# Suppose rank 1 is the old machine: every step it needs `DELAY` seconds more to compute (it
# sleeps that long inside its compute phase: `straggler=(1, DELAY)`). Compare `DELAY` with both
# times the cell above printed: the compute part of a step, and the whole step, all-reduce included.
#
# **Predict before running the next cells:** how long will rank 0 wait at each all-reduce? How
# much longer will a whole step take, and so what happens to the samples per second of the job?

# %%
DELAY = 0.02
predicted_wait_of_rank_0 = ...     # seconds: replace the ... with your prediction

# %% tags=["nbval-ignore-output"]
slow = distlab.launch(data_parallel.train, world_size=2, steps=60, straggler=(1, DELAY), **SETUP)

# %% tags=["nbval-ignore-output"]
timeline.timeline_widget(slow, title=f"rank 1 is {DELAY * 1e3:.0f} ms slower per step")

# %% tags=["nbval-ignore-output"]
before, after = timeline.mean_wait(plain), timeline.mean_wait(slow)
for rank in range(2):
    print(f"rank {rank} waits {before[rank] * 1e3:5.1f} ms per step without the straggler, "
          f"{after[rank] * 1e3:5.1f} ms with it")
print("you predicted", "nothing yet" if predicted_wait_of_rank_0 is ... else
      f"{predicted_wait_of_rank_0 * 1e3:.0f} ms for rank 0")
for name, records in (("without", plain), ("with", slow)):
    print(f"rank 0's whole step {name} the straggler: {middle([s.t_end - s.t_start for s in records[0].steps[1:]])}")
print(f"samples per second: {distlab.throughput(plain):.0f} without, {distlab.throughput(slow):.0f} with")

# %%
# medians of the steps after the first: one step disturbed by another program does not decide
typical_plain = np.median(timeline.waits(plain)[:, 1:], axis=1)
typical_slow = np.median(timeline.waits(slow)[:, 1:], axis=1)
assert typical_slow[0] - typical_plain[0] > DELAY / 2    # rank 0 now waits about DELAY in a typical step
assert typical_slow[1] < DELAY / 2                      # the straggler itself is last: it does not wait
# a bound that holds whatever the timing: rank 1 sleeps DELAY in every step, so the job lasts at least steps x DELAY
ceiling = sum(r.config["batch_size"] * len(r.steps) for r in slow) / (len(slow[1].steps) * DELAY)
assert distlab.throughput(slow) <= ceiling
assert distlab.throughput(slow) < distlab.throughput(plain)
print(f"with the straggler the job cannot pass {ceiling:.0f} samples per second (its samples over the steps x DELAY "
      "that rank 1 sleeps)")
print("the fast rank waits for the slow one at every all-reduce, and the job slows down")


# %% tags=["nbval-ignore-output"]
from distlab.course import results as course_results

course_results.remember("04", straggler_seconds=DELAY,                 # for lesson 11
                        extra_wait_of_rank_0=float(typical_slow[0] - typical_plain[0]),
                        samples_per_second={"without": distlab.throughput(plain), "with": distlab.throughput(slow)})

# %% [markdown]
# **Why.** A synchronous step ends when the *slowest* rank has contributed its gradient, so every
# rank steps at the straggler's pace: `DELAY` more per step for everybody, and the fast rank
# spends that time idle (vermillion, *waiting* in the legend). With N ranks, one slow machine
# idles the other N - 1. The slower the straggler, the larger the share of the job's time that is
# waiting; a rank s times slower is the same as a delay of (s - 1) x its compute time.
#
# **Try it.** Each position of the slider below is a real 12-step run of the two ranks, launched
# when you move it. While the two ranks of the cells above are still up (lesson 00's *warm
# ranks*) it answers in a moment; section 3's launch of three ranks retires them, and a move
# after that first starts fresh ones.

# %% tags=["nbval-ignore-output"]
def straggling(seconds):
    """What the slider runs: 12 steps of the same job, rank 1 `seconds` slower per step."""
    return distlab.launch(data_parallel.train, world_size=2, steps=12, straggler=(1, seconds),
                          progress="none", **SETUP)


timeline.straggler_widget(straggling)

# %% [markdown]
# ## 3. Stop waiting: asynchronous SGD with a parameter server
#
# `async_sgd.train` runs one **server** (rank 0) and **workers** (ranks 1, 2, ...). A worker
# *pulls* the current parameters and their version number, computes a gradient on its next
# mini-batch, *pushes* it with the version it used, and pulls again. The server applies each
# gradient the moment it arrives, from whichever worker sent it. Workers never meet each other.
#
# The price is **staleness**: by the time a gradient arrives, other workers' updates may have
# moved the parameters. Staleness = the updates the server applied between the worker's pull and
# its push.
#
# Worker 1 and worker 2 below train on exactly the shards and mini-batches of ranks 0 and 1
# above, with the same seed and learning rate, and worker 2 is the slow machine again:

# %% tags=["nbval-ignore-output"]
run = distlab.launch(async_sgd.train, world_size=3, steps=60, straggler=(2, DELAY), **SETUP)
server, workers = run[0], run[1:]

# %% tags=["nbval-ignore-output"]
timeline.timeline_widget(
    workers, title="asynchronous workers: steps of the slow one, and what the fast one did meanwhile")

# %% [markdown]
# Worker 1 no longer waits for worker 2: its only pause is the exchange with the server
# (purple). Some facts about the run, which hold however the timing falls:

# %%
assert len(server.updates) == 2 * 60                 # every gradient applied exactly once
assert server.updates[0].staleness == 0              # the first gradient is never stale
assert max(server.staleness) > 0                     # both workers started from version 0
print("updates applied:", len(server.updates))
print("staleness of the first update:", server.updates[0].staleness)
print("some gradients were computed on old parameters:", max(server.staleness) > 0)

# %% tags=["nbval-ignore-output"]
split = async_sgd.staleness_split(server)      # before / after the other worker's last push
for w in (1, 2):
    mine = [u for u in server.updates if u.worker == w]
    print(f"worker {w}: mean staleness {np.mean([u.staleness for u in mine]):.1f} over its {len(mine)} "
          f"gradients, the last applied {mine[-1].time - server.t_first:.2f} s after the start")
    if split[w]["shared"]:
        print(f"  {len(split[w]['shared']):3} computed while the other worker still pushed: "
              f"mean staleness {np.mean(split[w]['shared']):.1f}, from {min(split[w]['shared'])} "
              f"to {max(split[w]['shared'])}")
    print(f"  {len(split[w]['alone']):3} computed after the other had finished: staleness 0")
    assert all(s == 0 for s in split[w]["alone"])
fast, slow_w = split[1]["shared"], split[2]["shared"]
print("while both pushed:", "every gradient of the slow worker was staler than every one of the fast worker"
      if min(slow_w) > max(fast) else "the slow worker's gradients were staler on average (the ranges overlap)"
      if np.mean(slow_w) > np.mean(fast) else "no clear difference between the workers")
show(timeline.staleness_figure(server))

# %% [markdown]
# **Where the staleness is.** Each of the slow worker's gradients is as stale as the number of
# the fast worker's updates applied while it computed. But both workers run the same number of
# steps, so the fast one finishes first (the cell prints when each one's last gradient was
# applied). After that the slow worker trains alone: nobody moves the parameters between its
# pull and its push, so its staleness is 0. Its mean over the whole run mixes the two parts;
# the cell above prints them apart.
#
# The curves of the synchronous run with the same straggler and of the asynchronous run; switch
# the x axis between updates, samples and seconds:

# %% tags=["nbval-ignore-output"]
timeline.convergence_widget(slow, server, x="samples")

# %% [markdown]
# **Reading the curves.** One run of each: they show shapes, not a winner. Per *update*, expect
# the synchronous run to learn more: each of its updates averages two mini-batches computed on
# current parameters, while each asynchronous update is one mini-batch, sometimes computed on old
# parameters. Per *sample* the asynchronous run makes twice as many steps, each from half the
# batch and so noisier: 120 updates of 32 against 60 of 64.

# %% [markdown]
# **Does staleness hurt learning?** These two runs cannot say: they differ in the number and size
# of their updates, not only in staleness. A fairer comparison: as many updates of the same size
# (120 of 32 samples), at the same learning rate, with no staleness at all, from one process
# (`train_single`). One difference remains: that process walks the whole training set in one
# shuffled order, while each asynchronous worker walks its own half, interleaved as timing
# decides (the split above shows how). Three seeds a side (the asynchronous runs also differ by
# timing), and lesson 01's rule. **Predict:** with the staleness printed above, does the
# asynchronous run lose accuracy here?

# %% tags=["nbval-ignore-output"]
from distlab.verdict import verdict

servers = [server] + [
    distlab.launch(async_sgd.train, world_size=3, steps=60, straggler=(2, DELAY), progress="none",
                   **{**SETUP, "seed": seed})[0] for seed in (1, 2)]
stale = [s.test_accuracy for s in servers]
fresh = [data_parallel.train_single(world_size=1, batch_size=32, steps=120, lr=SETUP["lr"], seed=seed,
                                    width=SETUP["width"], record_grads_at=()).test_accuracy for seed in range(3)]
print("asynchronous runs, seeds 0-2: gradients with staleness above 0:",
      [sum(x > 0 for x in s.staleness) for s in servers], f"of {len(server.updates)} each; the largest staleness:",
      [max(s.staleness) for s in servers])
print("test accuracy, asynchronous (120 updates of 32):     ", [round(a, 3) for a in stale])
print("test accuracy, no staleness (120 updates of 32, one process):", [round(a, 3) for a in fresh])
staleness_verdict = verdict(fresh, stale, names=("no staleness", "asynchronous"), better="higher")
print(staleness_verdict)

# %% [markdown]
# **Reading the verdict.** It speaks for the staleness these runs had, which the cell counts: how
# many gradients were stale, and how stale at most. If the rule names no winner, the runs allow
# either order; that is no evidence that staleness is harmless. Staleness on *every* gradient is
# another experiment: with W workers of equal speed, each gradient is about W - 1 updates old.
# Zhang et al. (2016, [Staleness-aware async-SGD](https://arxiv.org/abs/1511.05950)) find that
# plain asynchronous SGD then needs its learning rate tuned to the staleness, and scale each
# gradient's step down by its staleness.

# %% [markdown]
# Per *second*, the fast worker keeps the server busy while the slow one computes, so the loss
# can fall sooner; yet every worker pushes the same number of gradients (`steps`), so the job
# still ends when the slow worker has pushed its last one. Staleness grows with the number of
# workers and with their differences in speed. Chen et al. (2016, [Revisiting distributed
# synchronous SGD](https://arxiv.org/abs/1604.00981)) found synchronous SGD with a few *backup
# workers* (each step goes on without the slowest ones) converging faster, and to better test
# accuracy, than asynchronous SGD; large jobs today mostly stay synchronous and fight stragglers
# in ways like that.

# %% [markdown]
# ## 4. The middle ground: talk every k steps
#
# Two synchronous ways to communicate less often (`local_sgd.train`):
#
# - **gradient accumulation** (`average="gradients"`): average the gradients of k micro-batches
#   (each backward adds its share, 1/k, into `.grad`), all-reduce once, take one step: exactly
#   one step at a k times larger batch;
# - **local SGD** (`average="parameters"`): take k ordinary steps alone, then average the
#   parameters. With k = 1 it is synchronous SGD again.
#
# Each run processes 64 micro-batches of 32 samples per rank, whatever k is. Four runs, one launch:

# %% tags=["nbval-ignore-output"]
runs = [dict(k=1), dict(k=4), dict(k=16), dict(k=4, average="gradients")]
sweep = distlab.launch(local_sgd.train_each, world_size=2, runs=runs, steps=64,
                       average="parameters", **SETUP)
by_run = [[per_rank[i] for per_rank in sweep] for i in range(len(runs))]

# %% tags=["nbval-ignore-output"]
print(f"{'run':<26}{'all-reduces':>12}{'comm us/sample':>16}{'test accuracy':>15}")
for run, records in zip(runs, by_run):
    name = f"{records[0].config['average']}, k={run['k']}"
    print(f"{name:<26}{local_sgd.all_reduce_rounds(records[0]):>12}"
          f"{local_sgd.comm_seconds_per_sample(records) * 1e6:>16.1f}{records[0].test_accuracy:>15.3f}")

# %% [markdown]
# Facts, checked against one process that trains on the global batch (lesson 01's reference):

# %%
accumulated = by_run[3][0]
big_batch = data_parallel.train_single(world_size=2, batch_size=4 * 32, steps=64 // 4,
                                       lr=0.3, seed=0)
assert max_param_difference(accumulated.params, big_batch.params) <= 1e-6
print("accumulating 4 micro-batches = one step at 4x the batch: equal to within 1e-6")

local_k1 = by_run[0][0]
synchronous = data_parallel.train_single(world_size=2, batch_size=32, steps=64, lr=0.3, seed=0)
assert max_param_difference(local_k1.params, synchronous.params) <= 1e-6
print("local SGD with k=1 = synchronous SGD: equal to within 1e-6")

# %% [markdown]
# **Predict:** k times fewer all-reduces of the same size: does the communication per sample
# fall exactly k-fold? The next cell computes it from the table above.

# %% tags=["nbval-ignore-output"]
comm = [local_sgd.comm_seconds_per_sample(records) for records in by_run]
for i in (1, 2):
    k = runs[i]["k"]
    print(f"local SGD, k = {k:2}: communication per sample fell {comm[0] / comm[i]:.1f}-fold "
          f"from k = 1 (exactly {k}-fold if every all-reduce cost the same)")
print("k = 4, both with 16 all-reduces of the same size; seconds per all-reduce, median (middle half):")
for name, records in (("gradient accumulation", by_run[3]), ("local SGD", by_run[1])):
    q1, med, q3 = np.quantile(local_sgd.all_reduce_seconds(records), [0.25, 0.5, 0.75])
    print(f"  {name:>21}: {med * 1e3:.2f} ms ({q1 * 1e3:.2f} to {q3 * 1e3:.2f})")
print("every run, mean per all-reduce after step 0: its whole time, and the part spent waiting (rank 0, rank 1):")
for run, records in zip(runs, by_run):
    whole = np.mean([s.t_comm_end - s.t_comm_start for r in records for s in r.steps[1:] if s.t_comm_start is not None])
    wait = timeline.mean_wait(records)        # also leaves out step 0
    print(f"  {records[0].config['average'] + ', k=' + str(run['k']):<21}: {whole * 1e3:6.2f} ms, "
          f"waiting {wait[0] * 1e3:.2f} and {wait[1] * 1e3:.2f} ms")
print("  one run each: its all-reduces share the run's ranks and their timing, so they are not "
      "independent runs, and no winner is named")

# %% [markdown]
# An all-reduce's clock runs from *this* rank's arrival to the end: first the wait for the other
# rank, then the transfer. Both change from one all-reduce to the next: a core that another
# program holds for a moment delays a rank's micro-batches (more waiting) or the transfer itself.
# So the fall need not be exactly k-fold, and two runs with the same number of all-reduces of the
# same size need not take the same time per all-reduce. The cell prints the waiting part of each
# run, so you can see which of the two moved. Whether one kind of run costs less per all-reduce
# would need several runs of each, compared by lesson 01's rule.

# %% [markdown]
# Gradient accumulation pays with fewer updates (64 / k steps at a k times larger batch), here at
# the same learning rate: lesson 05 asks how the rate should grow with the batch. Local SGD keeps
# every update; between averages the copies drift apart on their own shards. Lin et al. (2020,
# [Don't use large mini-batches, use local SGD](https://arxiv.org/abs/1808.07217)) find that many
# local steps from the start of training, while the learning rate is large, can cost accuracy,
# and that local SGD switched on later in training can generalise better than large-batch SGD.
# The table holds one seed per k. **Predict:** over 3 seeds, does k = 16 lose accuracy against
# k = 1 here?

# %% tags=["nbval-ignore-output"]
more = distlab.launch(local_sgd.train_each, world_size=2, steps=64, average="parameters", progress="none",
                      runs=[dict(k=k, seed=seed) for k in (1, 16) for seed in (1, 2)],
                      **{key: v for key, v in SETUP.items() if key != "seed"})[0]
accuracy_k = {1: [by_run[0][0].test_accuracy] + [r.test_accuracy for r in more[:2]],
              16: [by_run[2][0].test_accuracy] + [r.test_accuracy for r in more[2:]]}
for k, accs in accuracy_k.items():
    print(f"local SGD, k = {k:2}, seeds 0-2: {[round(a, 3) for a in accs]}")
k_verdict = verdict(accuracy_k[1], accuracy_k[16], names=("k = 1", "k = 16"), better="higher")
print(k_verdict)

# %% [markdown]
# **Reading the verdict.** The rule weighs the gap between the means against the spread of the
# seeds printed for each k. If it names no winner, these runs cannot tell the order: that does not
# show that talking every 16 steps costs nothing, and more seeds would narrow the interval
# (lesson 01). If it names one, the answer holds for this model, learning rate and length of
# training, not for every k.

# %% [markdown]
# ### Exercise
#
# In the local SGD run with k = 16 and 64 steps, how many times did each rank all-reduce its
# parameters? Replace the `...` with your answer; the cell checks it against the record.

# %%
from distlab.course import exercises

my_answer = ...     # all-reduces of each rank in the k = 16 run

exercises.local_sgd_rounds(my_answer, local_sgd.all_reduce_rounds(by_run[2][0]), steps=64, k=16)

# %% [markdown]
# ### Build it: local SGD's average
#
# Write what every rank runs every k steps in local SGD: make each parameter the average of the
# ranks' copies (`worker.all_reduce(t)` sums `t` in place; the checker calls your function under
# `torch.no_grad()`). It runs your function on 2 real ranks inside the course's local SGD
# (k = 4, 8 steps) next to the library's own, in one launch, and compares every step's parameters.

# %%
from distlab.course import exercises_build


def average_parameters(model, worker):
    ...   # every parameter of model becomes the ranks' average


exercises_build.parameter_average(average_parameters)

# %% [markdown]
# ## What we measured
#
# | | waits for others | stale gradients | all-reduces per step |
# |---|---|---|---|
# | synchronous SGD (lesson 01) | yes, at every step: for the slowest rank | no | 1 |
# | asynchronous SGD, parameter server | no (only for the server) | yes: any worker's, when others push between its pull and its push; a slow worker's most | none: push and pull |
# | gradient accumulation, every k | yes, every k micro-batches | no | 1/k (and 1/k of the updates) |
# | local SGD, every k | yes, every k steps | no, but copies drift | 1/k |
#
# And what this sitting measured, with the rule's word on the two accuracy questions:

# %% tags=["nbval-ignore-output"]
def said(v):
    """A verdict in a few words: the side that won, or that the runs do not tell."""
    return f"{v.winner} higher" if v.clear else "no clear difference"


print(f"one rank {DELAY * 1e3:.0f} ms slower per step: rank 0 waited {(typical_slow[0] - typical_plain[0]) * 1e3:.1f} ms "
      f"more in a typical step; samples per second {distlab.throughput(plain):.0f} without it, "
      f"{distlab.throughput(slow):.0f} with it")
print(f"test accuracy, no staleness against asynchronous (3 seeds a side): {said(staleness_verdict)}")
print(f"test accuracy, local SGD k = 1 against k = 16 (3 seeds a side): {said(k_verdict)}")

# %% [markdown]
# Next lesson: does distributing pay at all on this machine, and when?
#
# **Previous:** [03 · Combining gradients: parameter server vs all-reduce](03_combining_gradients.ipynb) · **Next:** [05 · Does distributing pay?](05_does_distributing_pay.ipynb) · [The course: map, glossary, solutions](../course/README.md)
