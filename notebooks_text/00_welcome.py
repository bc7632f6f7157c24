# %% [markdown]
# # 00 · Welcome to distlab
#
# **Goal of this notebook:** know what this machine can run, how the course is laid out, and
# which question the whole course answers.
#
# ## The problem we were handed
#
# An insurance company reads thousands of handwritten claim forms. Its digit-recognition model
# makes too many mistakes, and its engineers want two things:
#
# 1. a **more accurate** model, trained on **more data**;
# 2. an honest answer to: *does spreading the training over several workers (processes, GPUs,
#    machines) help, and when does it just add overhead?*

# %% [markdown]
# We work with stand-ins for their forms that need no download. Most lessons train on the 1,797
# real handwritten digits, 8x8 pixels each, that scikit-learn ships; lesson 05b, the more-data
# question, trains on 5,000 real MNIST digits (28x28) that ship inside a Python package. Every
# measurement comes from real processes training on them and exchanging tensors with each other
# (*collective communication*, lesson 01). A few tables are *models* instead, computed from
# formulas to predict, and say so: the course table below lists them.

# %% [markdown]
# ## What is on this machine?
#
# `distlab.doctor` looks, rather than assumes: CPU cores, memory, GPUs, which communication
# libraries this PyTorch build has (**gloo** between CPU processes, **NCCL** between GPUs), and
# whether Horovod is built. (In a terminal: `distlab doctor`.) The processes of one job are its
# **ranks**, numbered 0 to N-1. Your numbers will differ from the ones stored in this notebook.

# %% tags=["nbval-ignore-output"]
import distlab
from distlab import doctor

print(doctor.format_report(doctor.report()))
print("a 2-rank job here runs on:", distlab.choose_device("auto", local_world_size=2))
print(doctor.this_run())    # the machine the stored numbers in this lesson come from

# %% [markdown]
# With fewer GPUs than ranks (here: none), each rank is a CPU process and the ranks talk over
# gloo. With a GPU for every rank, the same training code puts one rank on each GPU and talks
# over NCCL: the device and the communication library change, the code does not.
#
# ## A first real job: two processes
#
# `distlab.launch(fn, world_size=2, ...)` starts two real Python processes through
# `torchrun`, the launcher a cluster job uses, runs `fn` on each and hands back what each
# returned: its **record**. Here `fn` trains for a few steps; lesson 01 explains what it does.
# The bars show each rank's progress as it happens.

# %% tags=["nbval-ignore-output"]
from distlab.data_parallel import data_parallel

records = distlab.launch(data_parallel.train, world_size=2, steps=5, global_batch_size=64,
                         progress="auto")

# %%
for r in records:
    print(f"rank {r.rank} of {r.world_size} (launched by {r.backend}): "
          f"{len(r.steps)} steps on its own share of the training digits")

# %% [markdown]
# Two processes ran, each on its own part of the data, and both reported back. In a notebook
# they do not exit when the job is done: they wait for the next one (below).

# %% [markdown]
# ## Warm ranks: the second launch starts at once
#
# Starting ranks takes seconds: a launcher process imports PyTorch, starts the ranks, and the
# ranks meet and connect to each other (their *process group*) before the first step. A training
# step of these small models is far shorter (the next cell prints one). So in a notebook distlab
# keeps its ranks: after a job they stay up, connected, and wait. The next `launch` with the same
# world size, backend, device and timeout hands its job to them, and they start it the way fresh
# ranks would (same random state, same threads), so it gives the same records, bit for bit. That
# waiting group is a **warm pool**.
#
# **Predict:** how many times sooner will the second of two identical launches reach its first step?

# %% [markdown]
# One fresh and one warm launch would be one run of each. The course names a winner only from
# independent runs, by one rule (`distlab.verdict`, explained in lesson 01: at least three runs a
# side, and a gap larger than their noise and than a smallest gap that matters). So the next cell
# makes three pairs: it retires the ranks, launches on fresh ones, then launches again on the same
# ranks, now warm. Times are compared as ratios.

# %% tags=["nbval-ignore-output"]
import statistics
import time

from distlab.processes import pool
from distlab.verdict import verdict
from distlab.widgets.data_parallel import startup_figure
from distlab.widgets.display import show

to_first_step, launched = {"fresh": [], "warm": []}, {}
for pair in range(3):
    distlab.shutdown()           # no ranks waiting: the next launch has to start fresh ones
    for start in ("fresh", "warm"):
        t0 = time.time()
        # warm=True: the default in a notebook; said here so that it holds anywhere
        launched[start] = distlab.launch(data_parallel.train, world_size=2, steps=5, global_batch_size=64,
                                         progress="none", warm=True)
        to_first_step[start].append(max(r.steps[0].t_start for r in launched[start]) - t0)
step_ms = 1e3 * statistics.median(s.t_end - s.t_start for r in launched["warm"] for s in r.steps)
print(f"one training step (median, last warm launch): {step_ms:.1f} ms")
print("seconds from launch() to the first step; the ratio is fresh over warm:")
print(verdict(to_first_step["fresh"], to_first_step["warm"], names=("fresh ranks", "warm ranks"),
              better="lower", log=True, unit=" s"))
cold = dict(pool.current().startup(), **{"first step": to_first_step["fresh"][-1]})
parts, begun = {}, 0.0
for part, end in cold.items():
    parts[part], begun = end - begun, end
print("the last fresh start, part by part:", ", ".join(f"{s:.2f} s until {p}" for p, s in parts.items()))
print(f"the waiting ranks and their launcher hold {pool.current().memory() / 2**20:.0f} MB of memory")
show(startup_figure(cold, to_first_step["warm"][-1]))

# %%
same = all(f.losses == w.losses and f.params.keys() == w.params.keys()
           and all(f.params[k].equal(w.params[k]) for k in f.params)
           for first in (records, launched["fresh"]) for f, w in zip(first, launched["warm"]))
print("losses and parameters of the warm launch equal the fresh ones', bit for bit:", same)
print("jobs these ranks have run:", pool.current().jobs)
assert same and pool.current().jobs == 2

# %% [markdown]
# Compare the ratio printed above with your prediction. The lines above split the last fresh
# start into its parts, and the figure draws them: the launcher's own start and imports (on CPU it
# then *forks* the ranks, so they start with PyTorch already imported; GPU ranks start afresh,
# as a child forked after its parent touched CUDA cannot use it), the ranks' start and their meeting. A warm
# launch skips all of them. What it costs: the idle ranks keep their memory (printed above) until
# they are retired. distlab retires them when a launch needs other ranks (another world size,
# backend, device or timeout), when a job fails or is interrupted (the ranks may be in a bad
# state), after 10 idle minutes, and when the kernel stops; `distlab.shutdown()` retires them at
# once. In a script `launch` starts fresh ranks every time unless you pass `warm=True`.
#
# ## The data

# %%
from distlab.data import load_digits
from distlab.widgets.data_parallel import digits_figure
from distlab.widgets.display import show

digits = load_digits()
print(f"{digits.n_train} training and {len(digits.y_test)} test digits, "
      f"{digits.side}x{digits.side} pixels, labels 0-9")
show(digits_figure(digits))

# %% [markdown]
# **Exercise: predict, then check.** When two workers share the training set, each gets its own
# part of it, its **shard**: the digits it takes its mini-batches from (in the first epoch, one
# pass over the data). How many training digits are in each of the two ranks' shards? Replace
# the `...` with your answer and run the cell; `exercises.digits_per_rank` says whether it is right.

# %%
from distlab.course import exercises

my_answer = ...   # digits in the shard of each of the 2 ranks

exercises.digits_per_rank(my_answer, digits, world_size=2, used=5 * 64 // 2)   # used: the 5 steps above

# %% [markdown]
# What the ranks themselves recorded: each rank's shard, and how many of its digits the 5 steps
# of the first job used (a step takes one mini-batch: half of the global batch of 64 on each rank).

# %%
shards = [len(r.shard) for r in records]
used = [len(r.steps) * r.config["batch_size"] for r in records]
print("training digits per rank, from the records:", shards)
print("of which the 5 steps used, per rank:", used)
assert shards == [-(-digits.n_train // 2)] * 2 and used == [5 * 64 // 2] * 2

# %% [markdown]
# ## How the course is laid out
#
# The last column says where a lesson's numbers come from: **measured** on real ranks, or a
# **model** that predicts them from formulas (worth as much as its assumptions).

# %% [markdown]
# | Lesson | Question it answers | Its numbers |
# |---|---|---|
# | **00** welcome | What is here, what do we want to find out? | measured |
# | **01** data parallelism | How do N workers train *one* model, and why is averaging their gradients exact? | measured |
# | **02** Horovod | The same training with Horovod: what changes? | measured |
# | **03** combining gradients | Parameter server, ring, tree: who sends what, at what cost? | measured, beside the alpha-beta model's predictions |
# | **04** keeping workers in sync | What does a slow worker cost? Synchronous or not? | measured |
# | **05** does distributing pay? | Are two workers twice as fast? | measured, beside a model's prediction |
# | **05b** more data | Does more data make the model more accurate, and how fast do 1 and 2 workers get there? | measured on real MNIST digits |

# %% [markdown]
# | Lesson | Question it answers | Its numbers |
# |---|---|---|
# | **06** splitting the model | Pipelines: layers on different workers, and their bubble | measured |
# | **07** tensor and 3D parallelism | Slices of every layer; three splits combined | runs measured; recorded bytes checked against their formulas; the batch table is a model |
# | **08** ZeRO | What every worker copied, and how sharding frees it | memory measured; the **memory calculator is a model** |
# | **09** from laptop to cluster | The same job from a terminal, a scheduler, several nodes | measured (the two nodes are two network namespaces on this machine) |
# | **10** failure is normal at scale | Surviving crashes: checkpoints and restarts | restarts measured; the **failure arithmetic is a model** |
# | **11** knowledge check | Your answer to the company | your own measurements, from the lessons you ran in this sitting |

# %% [markdown]
# | Lesson | Question it answers | Its numbers |
# |---|---|---|
# | **12** long lines | A transformer split by heads and along the line (tensor, sequence, context parallelism) | runs measured; the **activation memory is a model**, checked by counting |
# | **13** experts | Many more parameters for the same arithmetic: experts on ranks, all-to-all | measured |
# | **14** fitting more | 16-bit numbers, loss scaling, FP8's rounding, recomputation, offload | bytes counted against the model; offload is **accounting only** on a CPU |

# %% [markdown]
# **In what order?** The core path, 00 to 05, then 05b and 11, answers the company's question.
# After 05 the other lessons form three strands, each lesson building on the one before it in
# its strand:
#
# * **06, 07, 08**: 07 splits every layer after 06 split between layers, and 08 shards what 06
#   and 07 split;
# * **09, 10**: 10 runs 09's jobs and makes them fail;
# * **07, 12, 13, 14**: 12 puts 07's tensor parallelism on a transformer, 13 gives 12's transformer
#   experts, 14 fits more of it in a rank's memory (with 08's accounting); 12 to 14 come after the
#   knowledge check.
#
# The first two strands can be taken in either order. How long each lesson takes to read (its
# prose, its code and what the code printed) and to run, computed from the stored lessons, is in
# the *How long it takes* table of [the course page](../course/README.md).

# %% [markdown]
# Each lesson starts with its goal, runs real jobs, shows them with widgets (sliders and
# drop-downs that redraw pictures of what was recorded), and has exercises. An exercise cell
# holds `...` where your answer goes; a checker from `distlab.course.exercises` says "not
# answered yet" until you replace it, explains the typical wrong answers, and confirms a right
# one. The library code the lessons use is in `distlab/`, one idea per module, each module's
# docstring naming the lesson that introduces it. The answers are in `course/solutions/`
# (`course/README.md` lists them).

# %% [markdown]
# **What we saw:** this machine's cores, GPUs and communication libraries; a real two-rank job
# through torchrun, each rank training on its own shard and handing back its record; warm ranks,
# which skip the seconds of a fresh start and give the same records bit for bit, judged over three
# pairs of launches by the course's one rule; and the map of the course, with what each lesson
# measures and what it only models. Next, lesson 01 opens the training those two ranks ran.

# %% [markdown]
# **Next:** [01 · Data parallelism](01_data_parallelism.ipynb) · [The course: map, glossary, solutions](../course/README.md)
