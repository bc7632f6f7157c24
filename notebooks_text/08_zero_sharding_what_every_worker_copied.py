# %% [markdown]
# # Lesson 08 · ZeRO: sharding what every worker used to copy
#
# **Goal of this lesson.** Data parallelism gives every rank a full copy of the model, its
# gradients and its optimizer's state. Adding ranks adds speed, never room: a model that does
# not fit one worker does not fit N of them either. The insurance company's question "when do
# we need more than data parallelism?" is a question about memory. DeepSpeed's **Zero
# Redundancy Optimizer (ZeRO)** answers it by keeping one shard of each copy per rank.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. **predict** the bytes each rank holds for parameters, gradients and optimizer state, for
#    plain data parallelism and ZeRO stages 1, 2 and 3, in fp32 or mixed precision;
# 2. **measure** them on real ranks (ZeRO-1 and ZeRO-2 written by hand, ZeRO-3 with PyTorch's
#    FSDP2, its Fully Sharded Data Parallel) and check that training gives the same parameters
#    as plain data parallelism;
# 3. say what each stage costs in **communication**;
# 4. find the model that plain data parallelism cannot hold in a given memory, while ZeRO-3 can;
# 5. write the **DeepSpeed config** of the same job.

# %%
import json

import distlab
from distlab.data import load_digits
from distlab.train import memory_held
from distlab.models import build_model, count_parameters
from distlab.data_parallel import data_parallel
from distlab.zero import deepspeed_zero, fsdp, zero
from distlab.predict import activations, memory
from distlab.widgets import memory as pictures
from distlab.widgets.display import show

SETUP = dict(model="mlp", width=256, global_batch_size=64, lr=0.01, optimizer="adam")
STEPS = 5

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. Where the memory goes, on paper
#
# Training keeps, for each of the model's Ψ parameters:
#
# | what | fp32 training | mixed precision (16-bit weights and gradients) |
# |---|---|---|
# | the parameter | 4 bytes | 2 bytes |
# | its gradient | 4 bytes | 2 bytes |
# | optimizer state | SGD 0, momentum 4, Adam 8 (two moments) | the same, **plus** an fp32 master copy of the parameter, 4 |
#
# So Adam in mixed precision keeps 2 + 2 + 12 = 16 bytes per parameter, and so does Adam in
# fp32 (4 + 4 + 8). Activations come on top: they grow with the batch and with the layers'
# outputs, not with Ψ itself (section 4 counts them).

# %% [markdown]
# ZeRO's three stages shard, over the N data-parallel ranks, more and more of that:
# stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the parameters.
#
# **Predict** before running the next cell: our MLP at width 256 has how many parameters, and
# how many bytes does each of 2 ranks hold with Adam in fp32, with no sharding?

# %%
params = count_parameters(build_model("mlp", 256))
print(f"the MLP at width 256: {params:,} parameters")
for stage in memory.STAGES:
    m = memory.per_rank(params, 2, stage=stage, optimizer="adam", precision="fp32")
    print(f"stage {stage} ({memory.STAGE_NAMES[stage]:>32}): {m.total / 1e6:.3f} MB per rank "
          f"= params {m.params / 1e6:.3f} + grads {m.grads / 1e6:.3f} + optimizer {m.optimizer / 1e6:.3f}")

# %% [markdown]
# The same model reproduces the ZeRO paper's own example (Rajbhandari et al., [ZeRO: memory
# optimizations toward training trillion parameter models](https://arxiv.org/abs/1910.02054),
# 2019; SC20, Figure 1): 7.5 billion parameters, 64 ranks, Adam in mixed precision.

# %%
paper = memory.zero_paper_example()
print("per rank, GB:", {stage: round(gb, 1) for stage, gb in paper.items()})
assert [round(paper[s], 1) for s in memory.STAGES] == [120.0, 31.4, 16.6, 1.9]

# %% [markdown]
# How much does each stage give back? Stage 1 divides the K bytes of optimizer state by N,
# stage 2 also the gradient's bytes, so the share saved grows with N and with the part of the
# bytes per parameter that is optimizer state. In fp32, Adam's K = 8 is half of 16 bytes; in
# mixed precision K = 12 (two moments and the master copy) is three quarters. **Predict**, then
# read the fractions saved: at our N = 2 in fp32, and at the paper's N = 64 in mixed precision.

# %%
def saved(n, precision, stage):
    """The fraction of plain data parallelism's bytes per rank that ZeRO's ``stage`` gives back."""
    plain = memory.per_rank(params, n, stage=0, optimizer="adam", precision=precision).total
    return 1 - memory.per_rank(params, n, stage=stage, optimizer="adam", precision=precision).total / plain


for n, precision in ((2, "fp32"), (64, "mixed")):
    print(f"N = {n:2d}, {precision:5s}: ZeRO-1 saves {saved(n, precision, 1):5.1%}, "
          f"ZeRO-2 {saved(n, precision, 2):5.1%}, ZeRO-3 {saved(n, precision, 3):5.1%} of each rank's bytes")
assert saved(2, "fp32", 2) < 0.5 < saved(64, "mixed", 1)     # "most of the memory" only in the second case

# %% [markdown]
# Try it with any model: choose a size (or a model by name), the ranks, the optimizer, the
# precision and the stage. The bars are the ranks; the dashed line is one GPU's memory. The
# text under the picture says, stage by stage, whether one rank's share fits.

# %% tags=["nbval-ignore-output"]
pictures.memory_calculator({"our MLP (width 256)": params})

# %% [markdown]
# ## 2. Measured on real ranks
#
# `zero.py` writes stages 0 to 2 by hand, in one flat buffer of parameters:
#
# * stage 0 all-reduces the gradients and every rank updates everything (plain data parallelism);
# * stages 1 and 2 **reduce-scatter** the gradients (rank r receives the sum of everyone's
#   gradients for its shard only), update their shard, then **all-gather** the new parameters.
#   Stage 1 keeps the full gradient buffer; stage 2 drops it once the reduce-scatter is done.
#
# `fsdp.py` runs stage 3 with PyTorch's FSDP2 ([`fully_shard`](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html) on each layer): parameters are
# kept as shards and each layer's are gathered just before it runs. One launch runs the same job
# at all four stages; each rank counts the bytes of the tensors it holds after its last update.

# %% tags=["nbval-ignore-output"]
runs = distlab.launch(fsdp.every_stage, world_size=2, steps=STEPS, progress="none", **SETUP)

# %%
for stage in memory.STAGES:
    records = [r[stage] for r in runs]
    predicted = memory.per_rank(params, 2, stage=stage, optimizer="adam", precision="fp32").as_dict()
    print(f"stage {stage}: {pictures.ratio_line(records, predicted)}")
    for r in records:
        for category in ("params", "grads", "optimizer"):
            assert abs(r.memory[category] / predicted[category] - 1) <= 0.10


# %%
from distlab.course import results as course_results

course_results.remember("08", world_size=2, parameters=params,          # for lesson 11
                        bytes_held_by_rank_0={stage: sum(runs[0][stage].memory.values())
                                              for stage in memory.STAGES})

# %% [markdown]
# The ranks hold what the model says, to the byte or nearly: a shard is rounded up so that N
# shards cover the whole buffer (FSDP2 pads each parameter's first dimension to a multiple of
# N), and Adam keeps a step counter, one number per tensor it updates. With our 85,002
# parameters on 2 ranks neither shows at three decimals. The bars, model and measured:

# %% tags=["nbval-ignore-output"]
for stage in (0, 3):
    predicted = memory.per_rank(params, 2, stage=stage, optimizer="adam", precision="fp32").as_dict()
    show(pictures.compare_figure([r[stage] for r in runs], predicted, title=memory.STAGE_NAMES[stage]))

# %% [markdown]
# Sharding must not change what is learned: every stage must end with the parameters of one
# process training the whole batch (lesson 01's reference), here with Adam.

# %%
one_process = data_parallel.train_single(world_size=2, steps=STEPS, record_grads_at=(), **SETUP)
gaps = {stage: max(distlab.max_param_difference(r[stage].params, one_process.params) for r in runs)
        for stage in memory.STAGES}
for stage, gap in gaps.items():
    print(f"stage {stage}: every rank's parameters within 1e-5 of one process's: {gap <= 1e-5}")
    assert gap <= 1e-5

# %% tags=["nbval-ignore-output"]
# the differences themselves: rounding, so they change with the processor (the check above does not)
print("largest difference from one process, by stage:", {stage: f"{gap:.1e}" for stage, gap in gaps.items()})

# %% [markdown]
# Our stage 2 is the naive one: backward makes every full gradient, *then* one reduce-scatter
# runs, then the full gradients are dropped. The optimised version (`overlap=True`, FSDP's
# way) shards each parameter on its own and, from a hook, starts that parameter's
# reduce-scatter the moment backward has finished its gradient: the communication runs while
# backward computes the earlier layers. FSDP and DeepSpeed (which fills buckets of
# `reduce_bucket_size` as backward makes gradients) also free each full gradient once its
# reduce-scatter is done, so the full gradients need never all exist together. Ours only starts
# early: each padded gradient copy stays alive until its reduce-scatter is waited for, after
# backward, and bytes are counted between steps, so no lower peak can show here. Same numbers, and the same bytes held
# between steps (give or take Adam's step counters, one per tensor it updates: 6 here, not 1):

# %% tags=["nbval-ignore-output"]
overlapped = distlab.launch(zero.train, world_size=2, stage=2, overlap=True, steps=STEPS, progress="none", **SETUP)

# %%
gap = max(distlab.max_param_difference(o.params, r[2].params) for o, r in zip(overlapped, runs))
naive = runs[0][2].memory
assert gap <= 1e-6 and all(abs(overlapped[0].memory[c] / naive[c] - 1) < 1e-3 for c in naive)
early = sum(s.t_comm_start < s.t_compute_end for s in overlapped[0].steps)
assert early == STEPS
print(f"overlapped stage 2: parameters within 1e-6 of the naive one, the same bytes held; in {early} of "
      f"{STEPS} steps its first reduce-scatter started before backward had finished")

# %% [markdown]
# ## 3. What sharding costs in communication
#
# An all-reduce *is* a reduce-scatter followed by an all-gather (lesson 03's ring does exactly
# that). Stages 1 and 2 do the same two halves, only with the optimizer step in between: they
# send **the same bytes** as plain data parallelism. Stage 3 must gather the parameters again for
# the backward pass, since it dropped them after the forward: half as many bytes again. With a
# ring each rank sends (N-1)/N Ψ per reduce-scatter or all-gather: 2(N-1)/N Ψ numbers for
# stages 0 to 2, 3(N-1)/N Ψ for stage 3 (at N = 2, the 0.5 Ψ pieces below; the ZeRO paper,
# section 7). These are the model's numbers: this lesson counts bytes held, not bytes sent.

# %%
for stage in memory.STAGES:
    v = memory.zero_volume(params, 2, stage=stage, precision="fp32")
    print(f"stage {stage}: each rank sends {v['bytes'] / 1e3:7.1f} kB per step "
          f"({v['reduce_scatter_elements'] / params:.2f} Ψ reduce-scattered, "
          f"{v['all_gather_elements'] / params:.2f} Ψ all-gathered)")

# %% [markdown]
# ## 4. Growing the model until plain data parallelism no longer fits
#
# Suppose each rank may hold at most `BUDGET`, 50 million bytes of training state (think of it as a small GPU).
# **Predict:** which is the widest MLP (among widths 512 to 4096) that plain data parallelism can
# train on 2 ranks with Adam in fp32, and which widths does ZeRO-3 still hold?

# %%
BUDGET = 50e6
for width in (512, 1024, 2048, 4096):
    n = count_parameters(build_model("mlp", width))
    need = {s: memory.per_rank(n, 2, stage=s, optimizer="adam", precision="fp32").total for s in (0, 3)}
    print(f"width {width:>4}: {n:>10,} parameters; per rank: plain {need[0] / 1e6:5.1f} MB "
          f"({'fits' if need[0] <= BUDGET else 'too big'}), ZeRO-3 {need[3] / 1e6:5.1f} MB "
          f"({'fits' if need[3] <= BUDGET else 'too big'})")

# %% [markdown]
# At width 2048, plain data parallelism needs more than the budget on every rank, while ZeRO-3
# needs half of what plain data parallelism needs (each of the N = 2 ranks keeps 1/N of
# everything), which is within the budget. Run both for real (two steps are enough to hold everything) and count:

# %% tags=["nbval-ignore-output"]
big = distlab.launch(fsdp.every_stage, world_size=2, steps=2, progress="none", **dict(SETUP, width=2048))

# %%
for stage in (0, 3):
    held = max(sum(r[stage].memory.values()) for r in big)
    print(f"stage {stage}: the fullest rank holds {held / 1e6:.1f} MB: "
          + ("within" if held <= BUDGET else "over") + f" the {BUDGET / 1e6:.0f} MB budget")
assert max(sum(r[0].memory.values()) for r in big) > BUDGET >= max(sum(r[3].memory.values()) for r in big)

# %% [markdown]
# ZeRO-3 is not free: between steps a rank holds 1/N of everything, but while a layer computes
# it holds that layer's **full** parameters (gathered), and the activations of its batch are not
# sharded at all. On a real GPU the budget must leave room for both. What the width-2048 MLP
# keeps for its backward pass, for one rank's 32 samples, counted and predicted (each layer's
# input, the log-probabilities and the labels):

# %%
digits = load_digits()
x, y = digits.x_train[:32].clone(), digits.y_train[:32].clone()    # a batch of its own, as training takes
counted = memory_held.activation_bytes(build_model("mlp", 2048), x, y)
print(f"activations: {counted / 1e3:.1f} kB counted, {activations.mlp_activation_bytes(32, 2048) / 1e3:.1f} kB predicted")
assert abs(counted / activations.mlp_activation_bytes(32, 2048) - 1) < 0.01
state3 = max(sum(r[3].memory.values()) for r in big)     # the training state a ZeRO-3 rank held above
print(f"that is {counted / state3:.1%} of the parameters, gradients and optimizer state a ZeRO-3 rank held")
assert counted < 0.1 * state3

# %% [markdown]
# Small here next to the training state (the cell prints the share); in a large language model,
# with long sequences and big batches, activations can outweigh everything else (Korthikanti et
# al., [2022](https://arxiv.org/abs/2205.05198)). They shrink with 1F1B, which holds at most p
# micro-batches on a stage (lesson 06's pipelines), with tensor parallelism (lesson 07: each rank
# keeps its slice of the split layers' activations) or by recomputing them in backward.

# %% [markdown]
# The model-parallel layouts of lessons 06 and 07 combine with ZeRO: each rank first holds its
# part of the model (the layers lesson 06's cut gives its pipeline stage, and its slice of the
# layer tensor parallelism splits: `fc2`, column-wise as in lesson 07; its row-split partner here
# would be `out`, the smallest layer, counted whole), then ZeRO shards that part over the
# ranks that hold the same part. For the width-2048 MLP on 8 ranks, at ZeRO stage 1, pipeline
# stage by pipeline stage, next to what an even cut of the parameters would give:

# %%
from distlab.tensor import tensor_parallel

mlp2048 = memory.layers(build_model("mlp", 2048), x[:1], tensor=tensor_parallel.SPLIT)
print("each layer's share of the parameters:",
      ", ".join(f"{layer.name} {layer.params / sum(one.params for one in mlp2048):.1%}" for layer in mlp2048))
n2048 = count_parameters(build_model("mlp", 2048))
fullest, even = {}, {}
for pipe, tens in ((1, 1), (2, 1), (1, 2), (2, 2)):
    setting = dict(stage=1, optimizer="adam", precision="fp32", pipeline=pipe, tensor=tens)
    ranks = memory.per_stage(mlp2048, 8, **setting)
    fullest[pipe, tens] = max(m.total for m in ranks)
    even[pipe, tens] = memory.per_rank(n2048, 8, **setting).total
    print(f"{pipe} pipeline stage(s) x {tens} tensor slice(s) x {8 // (pipe * tens)} data replicas: "
          + ", ".join(f"pipeline stage {s} {m.total / 1e6:.1f} MB" for s, m in enumerate(ranks))
          + f" per rank (an even cut: {even[pipe, tens] / 1e6:.1f} MB)")
assert fullest[2, 1] > fullest[1, 1]                     # the real two-stage cut holds more, not less
assert fullest[1, 1] / 2 < even[2, 1] < fullest[1, 1]    # an even cut: less, but not half
assert fullest[1, 2] > even[1, 2]                        # tensor parallelism splits only fc2

# %% [markdown]
# A pipeline cuts only *between* layers, and here one layer, `fc2`, holds nearly all the
# parameters (and does as much of the work): whatever the cut balances, work or memory, the
# stage that holds `fc2` holds almost the whole model. With two stages that stage's state is
# shared by 4 data replicas instead of 8, so its ranks hold *more* than with no pipeline at all.
# An even cut, which no real cut of this model can reach, would give each rank half the
# parameters but more than half the bytes, its optimizer state too being shared 4 ways, not 8.
# Tensor parallelism halves only the layer it splits, `fc2`; `fc1` and `out` stay whole on every
# rank. The cell above asserts all three.
# A model of many equal blocks (a transformer) comes close to the even cut; a model dominated by
# one layer must split that layer to gain room.

# %% [markdown]
# ## 5. The same job as a DeepSpeed config
#
# DeepSpeed, where ZeRO comes from, is driven by a config file: batch sizes, precision, ZeRO
# stage and its buckets, the optimizer. `deepspeed_zero.config` writes it from the settings we
# used (`SETUP`: Adam), and `deepspeed_zero.train` hands exactly this dict to
# `deepspeed.initialize`, which builds the optimizer from it. Two entries undo DeepSpeed
# defaults that would change the update: `"adam_w_mode": false` (DeepSpeed's "Adam" is
# otherwise AdamW, with decoupled weight decay) and `"gradient_clipping": 0.0` (by default
# DeepSpeed scales the gradients down whenever their norm exceeds 1.0; none of our runs clips).

# %%
ds_config = deepspeed_zero.config(2, stage=2, optimizer=SETUP["optimizer"], lr=SETUP["lr"],
                                  global_batch_size=SETUP["global_batch_size"])
print(json.dumps(ds_config, indent=2))

# %% tags=["nbval-ignore-output"]
print(deepspeed_zero.status())   # whether DeepSpeed itself runs on this machine, and if not, why

# %% [markdown]
# Where it runs (on a CPU machine its CPU accelerator uses gloo, as our ranks do), the same job
# at each ZeRO stage with DeepSpeed's engine, against our plain data parallelism (stage 0 of
# section 2), both with Adam. Each run keeps the config it ran; the cell checks that it is the
# one printed above, with the run's own stage in `zero_optimization`. Two differences show in
# the counts: DeepSpeed's stages 1 and 2 keep an fp32 copy of each rank's shard for the update
# even when training in fp32 (the cell compares the optimizer state with our model, that copy
# counted), and DeepSpeed frees the gradients after each step, so between steps its stages 1 and
# 2 hold the same bytes: stage 2's saving (a gradient shard instead of whole gradients) exists
# only from backward to the update.

# %% tags=["nbval-ignore-output"]
ours = [r[0] for r in runs]                    # section 2's plain data parallelism, Adam
if deepspeed_zero.available() is None:
    for stage in memory.STAGES:
        theirs = distlab.launch(deepspeed_zero.train, world_size=2, stage=stage, steps=STEPS, progress="none",
                                **SETUP)
        assert theirs[0].config["deepspeed"] == deepspeed_zero.config(
            2, stage=stage, optimizer=SETUP["optimizer"], lr=SETUP["lr"], global_batch_size=SETUP["global_batch_size"])
        assert stage != 2 or theirs[0].config["deepspeed"] == ds_config
        gap = max(distlab.max_param_difference(t.params, o.params) for t, o in zip(theirs, ours))
        assert gap <= 1e-6
        theory = memory.per_rank(params, 2, stage=stage, optimizer="adam", precision="fp32", master_copy=stage in (1, 2))
        print(f"DeepSpeed stage {stage}: ran the config above; parameters within {gap:.0e} of ours; "
              f"rank 0 holds {theirs[0].memory}; its optimizer state / the model's "
              f"(fp32 copy {'counted' if stage in (1, 2) else 'left out'}): "
              f"{theirs[0].memory['optimizer'] / theory.optimizer:.3f}")
else:
    print("DeepSpeed does not run here:", deepspeed_zero.available())

# %% [markdown]
# **Predict.** What if we had left DeepSpeed's default `gradient_clipping` of 1.0? While the
# gradients' global norm stays below 1.0 nothing changes; once a step's norm exceeds it, that
# gradient is scaled down. Adam's update is a ratio of running averages of the gradients,
# m̂ / (√v̂ + ε) (Kingma and Ba, [2015](https://arxiv.org/abs/1412.6980)): scaling only the newest
# gradient moves each average only by that gradient's weight in it, (1 − β₁) and (1 − β₂), so
# the update changes by a fraction of the learning rate. Small next to a whole update; but is
# it rounding? The cell prints it next to section 2's rounding gaps. After it the two runs
# compute different gradients, and the gap grows. The same job at stage 0, clipped:

# %% tags=["nbval-ignore-output"]
if deepspeed_zero.available() is None:
    clipped = distlab.launch(deepspeed_zero.train, world_size=2, stage=0, steps=STEPS, progress="none",
                             gradient_clipping=1.0, **SETUP)
    same = next((i for i, (a, b) in enumerate(zip(clipped[0].losses, ours[0].losses)) if a != b), STEPS)
    assert 1 <= same < STEPS                   # update number `same` is the first one clipped
    first = {name: distlab.launch(fn, world_size=2, stage=0, steps=same, progress="none", **kw, **SETUP)
             for name, fn, kw in (("ours", zero.train, {}), ("clipped", deepspeed_zero.train, {"gradient_clipping": 1.0}))}
    gap_first = max(distlab.max_param_difference(t.params, o.params) for t, o in zip(first["clipped"], first["ours"]))
    gap = max(distlab.max_param_difference(t.params, o.params) for t, o in zip(clipped, ours))
    rounding = max(gaps.values())               # section 2: the same sums in another order
    assert 10 * rounding < gap_first < 0.1 * SETUP["lr"] < gap
    print(f"clipped at norm 1.0: the first {same} losses equal ours, so update {same} is the first one clipping changed; "
          f"right after it the parameters differ by up to {gap_first / SETUP['lr']:.1%} of the learning rate "
          f"({gap_first:.1e}: {gap_first / rounding:.0f} times section 2's largest rounding gap, {rounding:.1e}), "
          f"after {STEPS} updates by up to {gap / SETUP['lr']:.0%}")

# %% [markdown]
# ## Exercises
#
# **1.** How many bytes does each of 4 ranks hold for a model of 10 million parameters trained
# with Adam in fp32 at ZeRO stage 2?

# %%
from distlab.course import exercises

my_bytes = ...       # bytes per rank: parameters + gradients + optimizer state

exercises.bytes_per_rank(my_bytes, params=10_000_000, world_size=4, stage=2)

# %% [markdown]
# **2.** A 7-billion-parameter model, Adam in mixed precision, 8 GPUs of 80 GB each. What is the
# lowest ZeRO stage at which one rank's share (parameters, gradients and optimizer state;
# activations aside) fits? (Answer 0, 1, 2 or 3, or None if none fits.)

# %%
my_stage = ...       # 0, 1, 2, 3 or None

exercises.smallest_stage_that_fits(my_stage, params=7e9, world_size=8, budget_gb=80)

# %% [markdown]
# **3.** How many times the bytes of plain data parallelism does ZeRO-3 send per step?

# %%
my_ratio = ...       # ZeRO-3's bytes per step / plain data parallelism's

exercises.zero3_traffic_ratio(my_ratio)

# %% [markdown]
# **4. Build it: ZeRO-1's update.** Write the step section 2 describes, called on every rank after
# backward: `flat` holds the whole model's parameters (each parameter a view of it), `flat_grad`
# this rank's own full gradients (not yet combined with the other rank's), `shard` this rank's
# slice of `flat` and `optimizer` the optimizer over `shard` alone. Give `shard` its gradient
# (everyone's, for this slice, averaged: `worker.reduce_scatter` sums them, so divide by
# `worker.world_size`), step the optimizer, then
# all-gather the shards into `flat` (`worker.all_gather` returns every rank's tensor, in rank
# order). The checker trains one step with it on two real ranks and compares each rank's
# update with one process's.

# %%
from distlab.course import exercises_zero


def my_zero1_update(worker, flat, flat_grad, shard, optimizer):
    """Reduce-scatter the gradients, update my shard, all-gather the parameters."""
    ...


exercises_zero.zero1_update(my_zero1_update)

# %% [markdown]
# ## What we measured (and what the model says)
#
# The middle column, in fp32 and between steps, was counted on real ranks (section 2; the layer
# gathered while it computes was not); the last column is the model's (section 3).
#
# | stage | each rank holds (Ψ parameters, N ranks, K bytes of optimizer state) | sends per step (ring, model) |
# |---|---|---|
# | 0: plain data parallelism | (4 + 4 + K) Ψ in fp32 | 2(N-1)/N Ψ (all-reduce) |
# | 1: optimizer state sharded | (4 + 4) Ψ + K Ψ / N | 2(N-1)/N Ψ (reduce-scatter + all-gather) |
# | 2: and gradients | 4 Ψ + (4 + K) Ψ / N | 2(N-1)/N Ψ |
# | 3: and parameters (FSDP) | (4 + 4 + K) Ψ / N, plus one layer gathered at a time | 3(N-1)/N Ψ |
#
# (The ZeRO paper rounds the last column to 2 Ψ and 3 Ψ, its value for large N.)

# %% [markdown]
# For the insurance company: while the model, its gradients and Adam's state fit on one worker,
# data parallelism is the simplest choice. When they no longer fit, ZeRO-1 and ZeRO-2 give back
# most of the memory for no extra traffic only with many ranks and mixed precision, where the
# optimizer state is most of the bytes (section 1 printed both cases); at our N = 2 in fp32 they
# give back a quarter and three eighths. ZeRO-3 shards the parameters too, leaving each rank
# 1/N of the training state, for half as much traffic again; the activations it does not shard.
# The model parallelism of lessons 06 and 07 divides what is left, as far as the model's layers
# let it (section 4's last table).

# %% [markdown]
# **Previous:** [07 · Tensor and 3D parallelism](07_tensor_and_3d_parallelism.ipynb) · **Next:** [09 · From laptop to cluster](09_from_laptop_to_cluster.ipynb) · [The course: map, glossary, solutions](../course/README.md)
