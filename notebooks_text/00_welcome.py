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
#
# We work with a stand-in for their forms that needs no download: the 1,797 real handwritten
# digits, 8x8 pixels each, that scikit-learn ships. Every measurement in this course comes from
# real processes training on them with real collective communication. A few tables are
# *models* instead, computed from formulas to predict, and say so: the course table below
# lists them.

# %% [markdown]
# ## What is on this machine?
#
# `distlab.doctor` looks, rather than assumes: CPU cores, memory, GPUs, which communication
# libraries this PyTorch build has (**gloo** between CPU processes, **NCCL** between GPUs), and
# whether Horovod is built. (In a terminal: `distlab doctor`.) Your numbers will differ from the
# ones stored in this notebook.

# %% tags=["nbval-ignore-output"]
import distlab
from distlab import doctor

print(doctor.format_report(doctor.report()))
print("a 2-rank job here runs on:", distlab.choose_device("auto", local_world_size=2))
print(doctor.this_run())    # the machine the stored numbers in this lesson come from

# %% [markdown]
# With no GPU for every rank, each worker is a CPU process and they talk over gloo. With enough
# GPUs, the same code puts one rank on each GPU and talks over NCCL: only the device changes.
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
# ranks meet and build their process group before the first step. A training step of these
# small models is far shorter (lesson 01 draws its steps). So in a notebook distlab keeps its ranks: after a job they stay up, with
# their process group, and wait. The next `launch` with the same world size, backend and device
# hands its job to them, and they start it the way fresh ranks would (same random state, same
# threads), so it gives the same results. That waiting group is a **warm pool**.
#
# **Predict:** how much faster will the second of two identical launches reach its first step?

# %% tags=["nbval-ignore-output"]
import time

from distlab.processes import pool
from distlab.widgets.data_parallel import startup_figure
from distlab.widgets.display import show

distlab.shutdown()               # no ranks waiting: the next launch has to start fresh ones
to_first_step = {}
for start in ("fresh", "warm"):
    t0 = time.time()
    again = distlab.launch(data_parallel.train, world_size=2, steps=5, global_batch_size=64, progress="none",
                           warm=True)    # the default in a notebook; said here so that it holds anywhere
    to_first_step[start] = max(r.steps[0].t_start for r in again) - t0
cold = dict(pool.current().startup(), **{"first step": to_first_step["fresh"]})
print(f"fresh ranks: {to_first_step['fresh']:.2f} s to the first step; warm ranks: {to_first_step['warm']:.3f} s")
print(f"the waiting ranks and their launcher hold {pool.current().memory() / 2**20:.0f} MB of memory")
show(startup_figure(cold, to_first_step["warm"]))

# %%
assert to_first_step["warm"] < to_first_step["fresh"]
print("jobs these ranks have run:", pool.current().jobs)

# %% [markdown]
# The fresh start is mostly imports: the launcher's (it then *forks* the ranks, so they start
# with PyTorch already imported) and the meeting of the ranks. The warm launch skips all of it.
# What it costs: the idle ranks keep their memory (printed above) until they are retired.
# distlab retires them when a launch needs other ranks (another world size or backend), when a
# job fails or is interrupted (the ranks may be in a bad state), after 10 idle minutes, and when
# the kernel stops; `distlab.shutdown()` retires them at once. In a script (not a notebook)
# `launch` starts fresh ranks every time unless you pass `warm=True`.
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
# half. How many training digits does each of the two ranks above train on? Replace the `...`
# with your answer and run the cell; `exercises.digits_per_rank` says whether it is right.

# %%
from distlab.course import exercises

my_answer = ...   # digits each of the 2 ranks trains on

exercises.digits_per_rank(my_answer, digits, world_size=2)

# %% [markdown]
# What the ranks themselves recorded (their *shard* is the list of digits they trained on):

# %%
shards = [len(r.shard) for r in records]
print("training digits per rank, from the records:", shards)
assert shards == [-(-digits.n_train // 2)] * 2

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
# | **05b** more data, more accuracy? | Does more real handwriting buy accuracy, and do two workers reach it sooner? | measured on real MNIST digits |
# | **06** splitting the model | Pipelines: layers on different workers, and their bubble | measured |
# | **07** tensor and 3D parallelism | Slices of every layer; three splits combined | runs measured; the **bytes tables are a model** |
# | **08** ZeRO | What every worker copied, and how sharding frees it | memory measured; the **memory calculator is a model** |
# | **09** from laptop to cluster | The same job from a terminal, a scheduler, several nodes | measured (the nodes are simulated on this machine) |
# | **10** failure is normal at scale | Surviving crashes: checkpoints and restarts | restarts measured; the **failure arithmetic is a model** |
# | **11** knowledge check | Your answer to the company | your own measurements from 01 to 10 |

# %% [markdown]
# | Lesson | Question it answers | Its numbers |
# |---|---|---|
# | **12** long lines | A transformer split by heads and along the line (tensor, sequence, context parallelism) | runs measured; the **activation memory is a model**, checked by counting |
# | **13** experts | Many more parameters for the same arithmetic: experts on ranks, all-to-all | measured |

# %% [markdown]
# **In what order?** 00 to 05, then 05b and 11, answer the company's question (the core path).
# After 05 the rest come in two strands that can be taken in either order: 06, 07, 08 (each builds
# on the one before: 07 splits layers after 06's stages, 08 shards what 06 and 07 split) and 09,
# 10 (10 runs 09's jobs and makes them fail). 12 builds on 07 (tensor parallelism on a
# transformer) and 13 on 12 (its transformer, with experts).

# %% [markdown]
# Each lesson starts with its goal, runs real jobs, shows them with widgets (sliders and
# drop-downs that redraw pictures of what was recorded), and ends with exercises. An exercise
# cell holds `...` where your answer goes; a checker from `distlab.course.exercises` says "not
# answered yet" until you replace it, explains what is wrong with a wrong answer, and confirms a
# right one. The library code the lessons use is in `distlab/`, one idea per
# module, each function naming the lesson that introduces it. The answers are in
# `course/solutions/` (`course/README.md` lists them).
#
# Next: **01 · Data parallelism**.

# %% [markdown]
# **Next:** [01 · Data parallelism](01_data_parallelism.ipynb) · [The course: map, glossary, solutions](../course/README.md)
