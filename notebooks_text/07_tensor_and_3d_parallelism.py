# %% [markdown]
# # Lesson 07 · Tensor and 3D parallelism
#
# **Goal of this lesson.** Lesson 06 gave each rank whole layers. When a single layer is too
# big for one worker, or when the pipeline's bubble is too costly, each *layer* can be split
# instead: every rank holds a slice of every weight matrix, and all ranks work on the same
# batch at once. Large models combine the three splits (data, pipeline, tensor) in one grid of
# ranks: DeepSpeed and Megatron-LM call it **3D parallelism**.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. split a block of two linear layers **column-wise then row-wise** across ranks, and say
#    why it needs exactly one all-reduce forward and one backward;
# 2. train it on real ranks to the parameters of one process, by hand and with PyTorch's
#    `parallelize_module`, and measure its communication against data parallelism's;
# 3. lay 4 ranks out as a **grid** (2 data x 2 pipeline, 2 data x 2 tensor), see which ranks
#    talk to which, and how many bytes each group moves per step;
# 4. answer the insurance company's question with your own measurements: when is model
#    parallelism worth its complexity?

# %%
import torch

import distlab
from distlab.models import build_model
from distlab.data_parallel import data_parallel
from distlab.parallelize import mesh_3d as mesh
from distlab.pipeline import pipeline
from distlab.tensor import tensor_parallel
from distlab.predict import traffic
from distlab.widgets import mesh as pictures
from distlab.widgets.display import show

# every run of this lesson: the MLP with three hidden layers; its fc2 and fc3 form the block we split
SETUP = dict(width=256, global_batch_size=128, lr=0.1, seed=0)
STEPS = 20

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. One block, split in two: on paper first
#
# The block is `fc2` (256 -> 256), a ReLU, `fc3` (256 -> 256). With t ranks:
#
# * **`fc2` column-wise.** Rank r keeps rows r·256/t to (r+1)·256/t of `fc2.weight` (PyTorch
#   stores a layer as *outputs x inputs*): from the whole input it computes its own 256/t hidden
#   units. No communication.
# * **ReLU** acts on each unit alone, so each rank applies it to its own units.
# * **`fc3` row-wise.** Rank r keeps the matching 256/t *input* columns of `fc3.weight`: it gets
#   a **partial sum** of every output. Adding the partial sums of all ranks (one all-reduce)
#   gives the whole output on every rank.
#
# We can check the algebra in this notebook, with no processes at all:

# %%
whole = build_model("mlp", 256, depth=3, seed=0)
x = torch.randn(5, 256)
expected = whole.fc3(torch.relu(whole.fc2(x)))
t = 4
partials = []
for r in range(t):
    mine = slice(r * 256 // t, (r + 1) * 256 // t)
    hidden = torch.relu(x @ whole.fc2.weight[mine].T + whole.fc2.bias[mine])    # my 64 hidden units
    partials.append(hidden @ whole.fc3.weight[:, mine].T)                      # my partial sum
assert torch.allclose(sum(partials) + whole.fc3.bias, expected, atol=1e-5)
print(f"{t} slices: the partial sums add up to the whole block's output (within 1e-5)")

# %% [markdown]
# The backward pass mirrors it: each rank's slice of `fc2` contributes part of the gradient of
# the block's *input*, so those parts are added up by one all-reduce too. `tensor_parallel.py`
# writes the two all-reduces as two tiny autograd functions (Megatron-LM calls them *f* and *g*).

# %% [markdown]
# ## 2. On two real ranks
#
# `tensor_parallel.train` runs lesson 01's training loop with a strategy that replaces the
# block by its split version; every rank trains on the *whole* batch (tensor parallelism does
# not split the data). One process trains the same model on the same batches for reference:

# %% tags=["nbval-ignore-output"]
split = distlab.launch(tensor_parallel.train, world_size=2, steps=STEPS, **SETUP)

# %%
one_process = data_parallel.train_single(model="mlp", depth=3, steps=STEPS, record_grads_at=(), **SETUP)
merged = tensor_parallel.merge_params([r.params for r in split])
assert distlab.max_param_difference(merged, one_process.params) <= 1e-6
print("rank 0 holds fc2.weight", tuple(split[0].params["fc2.weight"].shape),
      "and fc3.weight", tuple(split[0].params["fc3.weight"].shape), "of", tuple(one_process.params["fc2.weight"].shape))
print(f"after {STEPS} steps the slices, put together, are the parameters of one process (within 1e-6)")

# %% [markdown]
# **Predict:** how many bytes does each rank pass to all-reduce per step? (One all-reduce of
# the block's output, batch x width numbers, forward; one of its input's gradient, backward.)
# The record counted them:

# %%
print("measured per step:", split[0].traffic)
print("predicted:        ", traffic.tensor_parallel_bytes(128, 256))
assert split[0].traffic == traffic.tensor_parallel_bytes(128, 256)

# %% [markdown]
# **Against data parallelism.** Data parallelism all-reduces every gradient once per step: a
# fixed number of bytes, whatever the batch. Tensor parallelism all-reduces activations: bytes
# that grow with the batch, twice per block per step, and *inside* the forward and backward
# passes, where nothing else can run meanwhile. Here is the comparison for this model:

# %%
dp_bytes = traffic.gradient_bytes("mlp", 256, depth=3)
for batch in (16, 128, 1024):
    tp = sum(traffic.tensor_parallel_bytes(batch, 256).values())
    print(f"batch {batch:>5}: tensor parallel {tp / 1e3:>8.0f} kB per step, data parallel {dp_bytes / 1e3:.0f} kB "
          f"({tp / dp_bytes:.2f}x)")

# %% [markdown]
# That is why tensor parallelism stays *inside* one machine on a real cluster (GPUs joined by
# NVLink, hundreds of GB/s), while data parallelism can cross the slower network between
# machines. `bench/model_parallel.py` counts the bytes that really cross the loopback
# interface in both cases and compares them with these predictions.
#
# ## 3. PyTorch's own tensor parallelism
#
# PyTorch does the same with `parallelize_module(model, mesh, {"fc2": ColwiseParallel(),
# "fc3": RowwiseParallel()})` on a device mesh (here a CPU mesh over gloo); the parameters
# become *DTensors*, each rank storing its slice. Same model, same batches, same result:

# %%
theirs = distlab.launch(tensor_parallel.train, world_size=2, use_torch=True, steps=STEPS, progress="none", **SETUP)
assert distlab.max_param_difference(theirs[0].params, merged) <= 1e-6
print("parallelize_module with ColwiseParallel and RowwiseParallel: the parameters of our hand-written split")

# %% [markdown]
# ## 4. Three ways at once: a grid of ranks
#
# Put the ranks in a grid, `grid = arange(world_size).reshape(data, pipeline, tensor)`. Every
# *line* through it is a process group: ranks that differ only in their tensor coordinate share
# each layer (a tensor group), those that differ only in the pipeline coordinate pass
# activations (a pipeline), those that differ only in the data coordinate average gradients (a
# data group). For 8 ranks, 2 by 2 by 2:

# %%
grid = mesh.grid(2, 2, 2)
print(grid)
for axis in mesh.AXES:
    print(f"{axis:>8} groups: {mesh.groups_of(grid, axis)}")

# %% [markdown]
# Eight ranks would crowd a laptop (and four already share its cores when it has fewer: slower,
# the same result), so we take two of the three axes at a time: 2 data x 2
# pipeline (each replica is lesson 06's pipeline, the two replicas average gradients), and 2
# data x 2 tensor (each replica is the split block of section 2). Each replica trains on half of
# every batch, so together they take the step of one process at the whole batch:

# %% tags=["nbval-ignore-output"]
meshes = {name: distlab.launch(mesh.train, world_size=4, steps=STEPS, depth=3, **shape, **SETUP)
          for name, shape in (("data x pipeline", dict(data=2, pipeline=2, tensor=1, micro_batches=4)),
                              ("data x tensor", dict(data=2, pipeline=1, tensor=2)))}

# %%
for name, records in meshes.items():
    for d in range(2):
        replica = sorted((r for r in records if r.config["mesh"]["data"] == d), key=lambda r: r.rank)
        put_together = (tensor_parallel.merge_params([r.params for r in replica]) if "tensor" in name
                        else pipeline.merge_params(replica))
        assert distlab.max_param_difference(put_together, one_process.params) <= 1e-6
    print(f"{name}: both replicas hold the parameters of one process (within 1e-6)")

# %% [markdown]
# Who holds what, and who talks to whom: choose the groups to draw. Each line is labelled with
# the bytes each of its ranks sent per step, as recorded.

# %% tags=["nbval-ignore-output"]
pictures.mesh_widget(meshes["data x pipeline"])

# %% tags=["nbval-ignore-output"]
show(pictures.mesh_figure(meshes["data x tensor"], "tensor"))
for name, records in meshes.items():
    print(f"{name}: bytes each rank sent per step, by group\n{pictures.traffic_table(records)}\n")

# %% [markdown]
# ## 5. When is model parallelism worth its complexity?
#
# Put the three layouts side by side on 2 ranks, for the same model and batch: what each rank
# holds, and what it sends per step (for data and tensor parallelism the bytes it passes to
# all-reduce; on 2 ranks a ring all-reduce makes each rank send as many, lesson 03).

# %% tags=["nbval-ignore-output"]
stages_run = distlab.launch(pipeline.train, world_size=2, model="mlp", depth=3, schedule="1f1b", micro_batches=4,
                            steps=STEPS, progress="none", **SETUP)       # lesson 06's pipeline, this batch
whole_bytes = sum(p.numel() for p in one_process.params.values()) * 4
layouts = {"data parallel (2 replicas)": (whole_bytes, dp_bytes),
           "pipeline (2 stages)": (max(sum(p.numel() for p in r.params.values()) * 4 for r in stages_run),
                                   max(r.traffic["pipeline"] for r in stages_run)),
           "tensor (2 slices)": (sum(p.numel() for p in split[0].params.values()) * 4, sum(split[0].traffic.values()))}
for name, (held, sent) in layouts.items():
    print(f"{name:>27}: holds {held / 1e3:6.0f} kB of parameters per rank, sends {sent / 1e3:6.0f} kB per step")
least = min(layouts, key=lambda k: layouts[k][1])
print(f"at this batch ({SETUP['global_batch_size']}), the {least.split(' (')[0]} layout sends the fewest bytes per step")

# %% [markdown]
# Bytes are counts, not timings: the same on every machine and in every run, so the next cell
# checks them against what each layout must send.

# %%
batch, width = SETUP["global_batch_size"], SETUP["width"]
sent = {name.split(" (")[0]: layout[1] for name, layout in layouts.items()}
assert sent["data parallel"] == 4 * sum(p.numel() for p in one_process.params.values())   # every gradient
assert sent["pipeline"] == batch * width * 4              # stage 0: every sample's activations, once
assert sent["tensor"] == 2 * batch * width * 4            # two all-reduces of batch x width numbers
print("bytes sent per step, fewest first:", " < ".join(sorted(sent, key=sent.get)))
print("data parallelism sends the most at this batch:", sent["data parallel"] == max(sent.values()))

# %% [markdown]
# Read it as the insurance company would. Each way of splitting the model **divides the memory**
# a rank needs for parameters (and so for their gradients and optimizer state); data
# parallelism does not divide it at all. What they send differs in kind: data parallelism sends
# every gradient, bytes fixed by the model; a pipeline and tensor parallelism send activations,
# bytes that grow with the batch. So data parallelism sends less only where a step's
# activations outweigh the parameters (a large batch on a small model: section 2's table); at
# this lesson's batch the cells above show it sending the most.

# %% [markdown]
# What the splits pay besides bytes: a pipeline its bubble (lesson 06); tensor parallelism its
# all-reduces *inside* the passes, where nothing else can run, so it wants the fastest links
# there are. For a model like ours, which fits on one worker many times over, data parallelism
# is the simpler choice: the ordinary training loop and one all-reduce per step. Model
# parallelism becomes necessary when a model, with its gradients and optimizer state, no longer
# fits; then real systems combine all three: tensor inside a machine, pipeline across a few
# machines, data across the rest.

# %% [markdown]
# ## Exercises
#
# **1.** With the block split across ranks, how many bytes does one rank pass to all-reduce per
# training step for a batch of 64 samples and a width of 512 (float32)?

# %%
from distlab.course import exercises

my_bytes = ...       # bytes per step, batch 64, width 512

exercises.tensor_parallel_bytes(my_bytes, batch=64, width=512)

# %% [markdown]
# **2.** In the 2-by-2-by-2 grid above, which rank sits at data replica 1, pipeline stage 1,
# tensor slice 0?

# %%
my_rank = ...        # the rank at (data 1, pipeline 1, tensor 0)

exercises.rank_in_grid(my_rank, 2, 2, 2, dict(data=1, pipeline=1, tensor=0))

# %% [markdown]
# **3.** For this depth-3 MLP at width 512, at what batch size does the split block all-reduce
# as many bytes per step as data parallelism does? (`count_parameters(build_model("mlp", 512,
# depth=3))` gives the number of gradients.)

# %%
my_batch = ...       # the batch at which both move the same bytes per step

exercises.equal_traffic_batch(my_batch, width=512)

# %% [markdown]
# **4. Build it: the split layers.** Write `my_split(worker, fc2, fc3)`: given the whole layers,
# return this rank's two layers, each an `nn.Module` keeping its slices as parameters named
# `weight` and `bias`: `fc2` column-wise (section 1: rank r's rows), `fc3` row-wise (its columns,
# the bias whole). Their forward and backward need Megatron's *f* and *g* (section 1): write them
# as two `torch.autograd.Function`s with `dist.all_reduce` (`torch`, `dist` and `worker.rank`,
# `worker.world_size` are there on the ranks). The checker trains with your layers on two real
# ranks and compares the parameters with one process, naming the first that differs.

# %%
from distlab.course import exercises_tensor


def my_split(worker, fc2, fc3):
    """This rank's column-parallel fc2 and row-parallel fc3: (new_fc2, new_fc3)."""
    ...


exercises_tensor.split_layers(my_split)

# %% [markdown]
# ## What we measured
#
# | | each rank holds | communication | bubble |
# |---|---|---|---|
# | data parallelism | the whole model | all-reduce of every gradient, once per step | none |
# | pipeline (lesson 06) | its stages | activations forward, gradients back, between neighbours | (p-1)/(m+p-1) and more |
# | tensor parallelism | a slice of every split layer | two all-reduces of activations per block, inside the passes | none |
# | 3D | a slice of its stages | all three, each in its own group | the pipeline's |

# %% [markdown]
# **Previous:** [06 · Splitting the model](06_splitting_the_model.ipynb) · **Next:** [08 · ZeRO: sharding what every worker used to copy](08_zero_sharding_what_every_worker_copied.ipynb) · [The course: map, glossary, solutions](../course/README.md)
