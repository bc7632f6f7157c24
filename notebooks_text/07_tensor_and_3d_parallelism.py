# %% [markdown]
# # Lesson 07 · Tensor and 3D parallelism
#
# **Goal of this lesson.** Lesson 06 gave each rank whole layers. When a single layer is too
# big for one worker, or when the pipeline's bubble is too costly, a *layer* can be split
# instead: every rank holds a slice of each weight matrix that is split, and all ranks work on
# the same batch at once (**tensor parallelism**, as Megatron-LM does it:
# [Shoeybi et al. 2019](https://arxiv.org/abs/1909.08053)). Large models combine the three
# splits (data, pipeline, tensor) in one grid of ranks: DeepSpeed calls it **3D parallelism**
# ([DeepSpeed: training your large model](https://www.deepspeed.ai/tutorials/large-models-w-deepspeed/)),
# Megatron-LM's paper *PTD-P* ([Narayanan et al. 2021](https://arxiv.org/abs/2104.04473)).

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
# The block is `fc2` (256 -> 256), a ReLU, `fc3` (256 -> 256). *Column* and *row* name the
# paper's Y = XA, A being *inputs x outputs*; PyTorch stores the transpose. With t ranks:
#
# * **`fc2` column-wise** (A's columns: output features). Rank r keeps rows r·256/t to
#   (r+1)·256/t of `fc2.weight`, and of its bias: from the whole input it computes its own 256/t
#   hidden units. No communication.
# * **ReLU** acts on each unit alone, so each rank applies it to its own units.
# * **`fc3` row-wise** (A's rows: input features). Rank r keeps the matching 256/t *columns* of
#   `fc3.weight`: it gets a **partial sum** of every output. Adding the partial sums of all ranks
#   (one all-reduce) gives the whole output on every rank; then `fc3`'s whole bias is added, once.
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
# The backward pass mirrors it. The gradient of the block's output is whole on every rank, so
# each rank computes its own slices' gradients with no communication; but each slice of `fc2`
# gives only *part* of the gradient of the block's *input*, and one all-reduce adds the parts.
# Shoeybi et al. (2019, section 3, figure 3) write the two all-reduces as two conjugate
# operators, and `tensor_parallel.py` as two tiny autograd functions:
#
# * ***f***, where the split begins (before `fc2`): the identity forward, an all-reduce of the
#   gradient backward;
# * ***g***, where it ends (after `fc3`'s partial sums): an all-reduce forward, the identity
#   backward (the gradient of a sum is the same for every term).
#
# That is one all-reduce each way per block. The layers left whole (`fc1`, `out`) see the same
# input and gradient on every rank, so they stay identical with nothing to send.

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
# fixed number of bytes, whatever the batch, which DDP's buckets can send while backward goes on
# (lesson 05). Tensor parallelism all-reduces an activation forward and its gradient backward:
# bytes that grow with the batch, twice per block per step, *inside* the passes. The forward
# one sits on the critical path: the next layer needs its result. (Megatron-LM starts the
# backward one asynchronously and computes the weights' gradients meanwhile.) The two formulas,
# for this model:

# %%
dp_bytes = traffic.gradient_bytes("mlp", 256, depth=3)
for batch in (16, 128, 1024):
    tp = sum(traffic.tensor_parallel_bytes(batch, 256).values())
    print(f"batch {batch:>5}: tensor parallel {tp / 1e3:>8.0f} kB per step, data parallel {dp_bytes / 1e3:.0f} kB "
          f"({tp / dp_bytes:.2f}x)")

# %% [markdown]
# At the table's smaller batches tensor parallelism moves fewer bytes, so bytes alone do not
# decide where it runs. On a real cluster it stays *inside* one machine (GPUs joined by
# [NVLink](https://www.nvidia.com/en-us/data-center/nvlink/), hundreds of GB/s) because its
# all-reduces come in every split layer (four per transformer layer), wait on the critical path,
# and carry every token of the batch; data parallelism's one all-reduce per step can cross the
# slower network between machines ([Narayanan et al. 2021](https://arxiv.org/abs/2104.04473),
# section 3). [`bench/model_parallel.py`](../bench/model_parallel.py) counts the bytes that
# really cross the loopback interface in both cases and compares them with these predictions.

# %% [markdown]
# ## 3. PyTorch's own tensor parallelism
#
# PyTorch does the same with `parallelize_module(model, mesh, {"fc2": ColwiseParallel(),
# "fc3": RowwiseParallel()})` ([PyTorch's tensor parallelism](https://docs.pytorch.org/docs/stable/distributed.tensor.parallel.html)).
# `mesh` is a *DeviceMesh*: the ranks laid out in a named grid, each axis giving its process
# groups (section 4 draws one; here a single axis of 2 CPU ranks over gloo). The split
# parameters become *DTensors*: each rank stores its slice, and the tensor knows how the slices
# make the whole (`Shard(0)` for `fc2`'s weight, `Shard(1)` for `fc3`'s). Same model, same
# batches, same result:

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
# data group). The last axis varies fastest, so a tensor group is consecutive ranks; torchrun
# numbers the ranks machine by machine (node rank x ranks per node + local rank), so a tensor
# group no larger than a machine stays on one machine, as Megatron-LM orders its groups too.
# For 8 ranks, 2 by 2 by 2:

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
# the bytes each of its ranks sent per step, as recorded (for an all-reduce, the bytes handed to
# it: in a group of two, a ring sends as many, lesson 03). **Predict first**, from sections 1
# and 2 and lesson 06: with each replica on half of the batch, how many bytes should a rank send
# along its pipeline, across its tensor group, and across its data group?

# %% tags=["nbval-ignore-output"]
pictures.mesh_widget(meshes["data x pipeline"])

# %% tags=["nbval-ignore-output"]
show(pictures.mesh_figure(meshes["data x tensor"], "tensor"))
for name, records in meshes.items():
    print(f"{name}: bytes each rank sent per step, by group\n{pictures.traffic_table(records)}\n")

# %% [markdown]
# Byte counts, unlike timings, are the same in every run, so the cell below checks each rank's
# record against the prediction: across the data group, every gradient of the parameters the
# rank holds; along the pipeline, its half-batch's activations forward (stage 0) or their
# gradients backward (stage 1); across the tensor group, section 2's two all-reduces at half the
# batch.

# %%
half = SETUP["global_batch_size"] // 2                     # each data replica's share of the batch
for name, records in meshes.items():
    for r in records:
        assert r.traffic["data"] == 4 * sum(p.numel() for p in r.params.values())
        if name == "data x pipeline":
            assert r.traffic["pipeline"] == half * SETUP["width"] * 4
        else:
            assert r.traffic["tensor"] == sum(traffic.tensor_parallel_bytes(half, SETUP["width"]).values())
    print(f"{name}: every rank's recorded bytes are the predicted counts")

# %% [markdown]
# ## 5. When is model parallelism worth its complexity?
#
# Put the three layouts side by side on 2 ranks, for the same model and batch: what each rank
# holds, and what it sends per step (for data and tensor parallelism the bytes it passes to
# all-reduce; on 2 ranks a ring all-reduce makes each rank send as many, lesson 03). The
# pipeline and tensor rows come from their runs' records, the data-parallel row from section
# 2's formula (the second code cell below checks it against section 4's records).
#
# **Predict first:** at this batch, which layout sends the fewest bytes per step, and which the
# most? Which holds the fewest parameters?

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
# checks them against what each layout must send, and data parallelism's formula against what
# section 4's replicas recorded: the two stages of one replica together all-reduce every
# gradient once, as a data-parallel rank does.

# %%
batch, width = SETUP["global_batch_size"], SETUP["width"]
sent = {name.split(" (")[0]: layout[1] for name, layout in layouts.items()}
assert sent["data parallel"] == 4 * sum(p.numel() for p in one_process.params.values())   # every gradient
assert sent["pipeline"] == batch * width * 4              # stage 0: every sample's activations, once
assert sent["tensor"] == 2 * batch * width * 4            # two all-reduces of batch x width numbers
replica = [r for r in meshes["data x pipeline"] if r.config["mesh"]["data"] == 0]
assert sum(r.traffic["data"] for r in replica) == sent["data parallel"]   # as recorded in section 4
print("data parallelism's bytes: the formula equals what section 4's replica recorded")
print("bytes sent per step, fewest first:", " < ".join(sorted(sent, key=sent.get)))
print("data parallelism sends the most at this batch:", sent["data parallel"] == max(sent.values()))

# %% [markdown]
# Read it as the insurance company would. Each way of splitting the model **divides the memory**
# a rank needs for parameters (and so for their gradients and optimizer state); data
# parallelism does not divide it at all. What they send differs in kind: data parallelism sends
# every gradient, bytes fixed by the model; a pipeline and tensor parallelism send activations
# and their gradients, bytes that grow with the batch. So data parallelism sends less only
# where a step's activations outweigh the parameters (a large batch on a small model: section
# 2's table); at this lesson's batch the cells above show it sending the most.

# %% [markdown]
# What the splits pay besides bytes: a pipeline its bubble (lesson 06); tensor parallelism
# all-reduces *inside* the passes, where the next layer waits, so it wants the fastest links.
# This lesson times nothing: fewer bytes is not a faster step, and which layout is
# faster on a given machine is a question for repeated timed runs and `distlab.verdict`
# (lesson 01's rule, as lessons 05 and 06 use it), not for these counts.

# %% [markdown]
# For a model like ours, which fits on one worker many times over, data parallelism is the
# simpler choice: the ordinary training loop and one all-reduce per step. When a model, with its
# gradients and optimizer state, no longer fits, either shard what data parallelism copies
# (ZeRO, lesson 08) or split the model itself. Real systems combine the three splits, tensor
# inside a machine, pipeline across machines, data across the rest
# ([Narayanan et al. 2021](https://arxiv.org/abs/2104.04473)), and can add ZeRO to the data
# groups (lesson 08).

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
# depth=3))` gives the number of gradients; the answer need not be a whole number.)

# %%
from distlab.models import count_parameters  # noqa: F401 (yours to use in the answer)

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
# On real ranks, each result asserted: the split block, by hand and with PyTorch's
# `parallelize_module`, on 2 ranks and inside 2 x 2 grids, trains to the parameters of one
# process; every byte count a rank recorded (tensor, pipeline, data) equals its prediction. From
# those counts: each split divides the parameters a rank holds, data parallelism does not; data
# parallelism's bytes are fixed by the model, the splits' grow with the batch. Nothing here was
# timed, so no layout is named faster.
#
# For the insurance company: model parallelism buys memory at the price of simplicity. While
# the model fits on one worker, data parallelism is the simpler choice; when it no longer fits,
# lesson 08's ZeRO and this lesson's splits divide what each worker holds.

# %% [markdown]
# | | each rank holds | communication | idle time |
# |---|---|---|---|
# | data parallelism | the whole model | all-reduce of every gradient, once per step (can overlap backward) | waits at the all-reduce |
# | pipeline (lesson 06) | its stages | activations forward, their gradients back, between neighbours | bubble (p-1)/(m+p-1) plus messages |
# | tensor parallelism | a slice of each split layer, the other layers whole | per block, one all-reduce forward (*g*) and one backward (*f*), inside the passes | waits at every all-reduce; no bubble |
# | 3D | a slice of its stages | each of the three in its own group | the pipeline's bubble and the others' waits |

# %% [markdown]
# **Previous:** [06 · Splitting the model](06_splitting_the_model.ipynb) · **Next:** [08 · ZeRO: sharding what every worker used to copy](08_zero_sharding_what_every_worker_copied.ipynb) · [The course: map, glossary, solutions](../course/README.md)
