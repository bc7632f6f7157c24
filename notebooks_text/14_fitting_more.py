# %% [markdown]
# # Lesson 14 · Fitting more: precision, recomputation and offload
#
# **Goal of this lesson.** A more accurate reader for the insurance company means a bigger model,
# and a bigger model stops when a rank's memory is full. Lesson 08 counted where a rank's bytes go
# and sharded them with ZeRO. Here we change what the bytes hold instead: numbers in 16 bits
# (**mixed precision**, with **loss scaling** for fp16), in 8 bits (**FP8**'s rounding), activations
# dropped and computed again (**recomputation**), state moved off the accelerator (**offload**).
# Each lever is run on real ranks, its bytes counted against the model, its price measured.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. say what each precision policy keeps per parameter, and check it on real ranks;
# 2. judge, over seeds, whether computing in bf16 cost the training loss anything;
# 3. read a gradient's exponents, say what fp16 would flush to zero, and write the loss scaler that
#    prevents it (it runs on real ranks);
# 4. measure FP8's rounding error per tensor, per row and per tile, beside bf16's;
# 5. trade activation memory for arithmetic with full and selective recomputation, counted and timed;
# 6. read what offloading moves, and why a CPU run can only count it.

# %%
import math
import warnings

import torch
from torch.utils.flop_counter import FlopCounterMode

import distlab
from distlab.data import load_digits
from distlab.data_parallel import data_parallel as dp
from distlab.parallelize import trainer
from distlab.precision import fp8, fp8_lab, mixed
from distlab.predict import activations, flops, memory
from distlab.sequence import lines as L
from distlab.sequence.transformer import TransformerConfig, build_transformer, loss_and_accuracy
from distlab.train import recompute
from distlab.verdict import verdict
from distlab.widgets import fitting as pictures
from distlab.zero import fsdp

POLICIES = ("fp32", "bf16", "fp16", "bf16_master")
MLP = dict(world_size=2, global_batch_size=64, width=64, optimizer="adam", lr=3e-3, progress="none")

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. What a parameter costs, in four precisions
#
# Four policies (`distlab.precision.mixed`), each a transform of the model plus the micro-step's
# precision slot:
#
# * **fp32**: every number in 4 bytes;
# * **bf16** and **fp16** (autocast): the parameters stay fp32; each matrix product casts its
#   inputs to 16 bits, so what the forward keeps for backward is 16-bit;
# * **bf16_master**: the parameters themselves are bf16, and the optimizer updates an fp32
#   *master* copy (Micikevicius et al. 2018), because an update `lr x g` smaller than the gap
#   between two neighbouring bf16 numbers would round away.
#
# **Predict:** with Adam (two fp32 moments a parameter), which policy keeps the fewest bytes per
# parameter between steps?

# %%
print(f"{'policy':12} {'params':>7} {'grads':>6} {'master':>7} {'Adam':>5} {'total':>6}  bytes a parameter")
for policy in POLICIES:
    b = memory.bytes_per_parameter(policy, "adam")
    print(f"{policy:12} {b['params']:7} {b['grads']:6} {b['master']:7} {b['optimizer']:5} {sum(b.values()):6}")
assert len({sum(memory.bytes_per_parameter(p, "adam").values()) for p in POLICIES}) == 1

# %% [markdown]
# The same total for all four: with Adam, mixed precision moves bytes between categories but does
# not shrink the training state (the Ultra-Scale Playbook makes the same count). What 16 bits buy
# is elsewhere: the activations a forward keeps are half as large, the gradients an all-reduce
# carries under `bf16_master` are half as large (not measured in this lesson), and a GPU's tensor
# cores multiply 16-bit numbers many times faster. And the fp32 part (master copy and Adam's moments, 12 of the 16 bytes) is
# exactly what ZeRO-1 shards (lesson 08).

# %% [markdown]
# ## 2. Counted on real ranks
#
# Two ranks train lesson 01's MLP in each policy; after the last update rank 0 counts the bytes of
# every tensor it holds, by category, and what one mini-batch's forward kept for backward.
#
# **Predict:** which categories halve from fp32 to bf16 autocast, and which from fp32 to bf16_master?

# %%
runs = {policy: distlab.launch(dp.train, precision=policy, steps=40, seed=0, **MLP) for policy in POLICIES}
print(f"{'policy':12}" + "".join(f"{c:>15}" for c in ("params", "grads", "master", "optimizer", "activations",
                                                      "weight copies")) + "   bytes on rank 0")
worst = 1.0
for policy, records in runs.items():
    r = records[0]
    n = sum(p.numel() for p in r.params.values())
    want = {k: v * n for k, v in memory.bytes_per_parameter(policy, "adam").items()}
    want.update(activations.mlp_saved_bytes(r.config["batch_size"], r.config["width"], r.config["depth"],
                                            policy=policy))
    print(f"{policy:12}" + "".join(f"{r.memory[c]:>15,}" for c in want))
    worst = max([worst] + [max(r.memory[c] / v, v / r.memory[c]) for c, v in want.items() if v])
print(f"every category of every policy within a factor {worst:.3f} of the model (predict.memory, predict.activations)")
assert worst < 1.1

# %% [markdown]
# Parameters and gradients halve only where the parameters themselves are 16-bit (`bf16_master`);
# the master copy appears there and nowhere else. Autocast halves the activations but adds
# "weight copies": each fp32 weight is cast to 16 bits for its product, and the copy is kept for
# the backward pass; at this size they take back part of the saving (compare the two columns). At this size the activations of one mini-batch are small next to Adam's
# state; lesson 12's long lines are where they grow.

# %% tags=["nbval-ignore-output"]
pictures.policy_figure({p: runs[p][0].memory for p in POLICIES}, title="rank 0, after 40 steps of Adam")

# %% [markdown]
# ## 3. Does 16-bit arithmetic cost the loss anything?
#
# bf16 keeps fp32's range but only 8 significant bits (about 2-3 decimal digits), so every product
# is rounded coarsely. **Predict:** after 40 steps, is bf16's training loss clearly above fp32's? Three
# seeds a side, each an independent run on 2 ranks, judged by the course's one rule (lesson 01):

# %% tags=["nbval-ignore-output"]
SEEDS = (0, 1, 2)
final = {}
for policy in POLICIES:
    final[policy] = []
    for seed in SEEDS:
        records = runs[policy] if seed == 0 else distlab.launch(dp.train, precision=policy, steps=40, seed=seed,
                                                                **MLP)
        final[policy].append(sum(records[0].losses[-5:]) / 5)        # the mean of the last 5 steps
for policy in POLICIES[1:]:
    print(f"training loss, {policy} against fp32:",
          verdict(final[policy], final["fp32"], log=True, names=(policy, "fp32"), better="lower"))
    print("   seed by seed, over fp32's: " + ", ".join(f"{mine / base:.4f}" for mine, base in
                                                       zip(final[policy], final["fp32"])))
fp16_trace = runs["fp16"][0].loss_scale
print(f"fp16's loss scaler skipped {sum(s for _, s in fp16_trace)} of {len(fp16_trace)} updates "
      f"(scale {fp16_trace[0][0]:g} at the first, {fp16_trace[-1][0]:g} at the last)")
assert all(0.9 < mine / base < 1.1 for p in POLICIES for mine, base in zip(final[p], final["fp32"]))

# %% [markdown]
# Where the verdict says "no clear difference", three seeds allow either order: the rounding of
# 16-bit products did not move the loss by more than the seeds move it. Read the interval too: a
# seed changes the start and the mini-batches, so three seeds a side cannot see a difference smaller
# than it. Each seed's ratio (printed under each verdict) compares runs with the same start and
# batches: a closer look, though not a verdict. That is the usual finding
# for bf16 with fp32 master weights (Kalamkar et al. 2019), and why it is the default in large
# training runs today. `bench/memory_levers.py` asks the same over five seeds and 150 steps.

# %% [markdown]
# ## 4. fp16: where gradients go to zero
#
# fp16 has 5 exponent bits: its smallest normal number is 2^-14, its smallest subnormal 2^-24, and
# anything below half of that rounds to 0. Gradients are small numbers. **Predict:** what share of
# this MLP's gradients at step 0 would fp16 flush to zero, unscaled?

# %%
grads = [g["local"] for g in runs["fp32"][0].grads[0].values()]
hist = mixed.exponent_histogram(grads)
total = sum(g.numel() for g in grads)
print(f"{hist['count']:,} nonzero gradient values of {total:,} at step 0 (the exact zeros are zero in every "
      f"format: left out), exponents from 2^{min(hist['exponents'])} to 2^{max(hist['exponents'])}")
print(f"below 2^-25, half fp16's smallest subnormal (become 0): {hist['zero_in_fp16']:.2%}; "
      f"subnormal (fewer significant bits): {hist['subnormal_in_fp16']:.2%}")
pictures.exponent_figure(hist, title="lesson 01's MLP, rank 0's gradients at step 0")

# %% [markdown]
# Micikevicius et al. (2018, figure 3) found a large share of their SSD detector's nonzero
# *activation* gradients below fp16's smallest subnormal; the shares printed here are this small
# model's, at its first step. The cure does not depend on them: multiply the loss by a scale S before
# backward, and by the chain rule every gradient is S times larger, lifted into range; divide by S
# before the update; if any gradient overflowed (an inf or a nan), skip the update and halve S; after
# a run of clean updates, double it. That is **dynamic loss scaling** (`torch.amp.GradScaler` does it).

# %% tags=["nbval-ignore-output"]
pictures.loss_scale_figure(fp16_trace, title="fp16 on 2 ranks: the loss scale, update by update")
scaler = mixed.LossScaler()
print(f"largest gradient x the first scale: about 2^{max(hist['exponents']) + 1 + round(math.log2(scaler.scale_value))}"
      f" (fp16's largest is about 2^{math.log2(mixed.FP16_LARGEST):.0f}); the scale doubles after "
      f"{scaler.growth_interval:,} clean updates in a row; this run made {len(fp16_trace)}")

# %% [markdown]
# If the line above is flat, that is why: nothing overflowed and the run was too short to grow. The
# library's scaler, like `torch.amp.GradScaler`, starts at 2^16 and waits 2,000 clean updates before
# doubling (both settings). Exercise 3 starts far higher and grows after 4, so there you will see
# skipped updates and growth.

# %% [markdown]
# **Predict, then measure:** what does fp16 *without* a scale do to this run? `precision="fp16_unscaled"`
# is allowed, but before the ranks start, the library measures the run's first gradients and warns with
# what fp16 would flush:

# %% tags=["nbval-ignore-output"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    unscaled = distlab.launch(dp.train, precision="fp16_unscaled", steps=40, seed=0, **MLP)
said = [str(w.message) for w in caught if "fp16_unscaled" in str(w.message)]
print(said[0] if said else "no warning: every first gradient lies within fp16's normal range")
for name, records in (("fp32", runs["fp32"]), ("fp16, scaled", runs["fp16"]), ("fp16, unscaled", unscaled)):
    print(f"{name:15} training loss, mean of the last 5 steps: {sum(records[0].losses[-5:]) / 5:.4f}")

# %% [markdown]
# Read it as what it is: one seed, where section 3's seeds moved the loss far more than the last
# digits here, so no order among these three is a finding. The warning counts the averaged gradient
# of the whole global batch (what every rank holds after the all-reduce), rank 0's histogram above
# its own half: averaging gives smaller values, so the two shares differ. Where gradients do fall
# below fp16's range, unscaled training loses them: Micikevicius et al. (2018, section 4.2) report
# that their SSD detector did not train in fp16 without loss scaling. Scaling is cheap insurance.

# %% [markdown]
# ## 5. FP8: rounding to 8 bits, with a scale
#
# Two 8-bit formats (Micikevicius et al. 2022): **E4M3** (largest 448) for weights and activations,
# **E5M2** (largest 57,344) for gradients. With so little range, a tensor is divided by a *scale*
# first so that its largest value lands on the format's largest. One scale per tensor lets a few
# large values set it for all, pushing the small values towards the bottom of E4M3's range, where
# they turn subnormal, then 0. DeepSeek-V3 (2024, section 3.3.2) scales activations per 1x128
# *tile* and weights per 128x128 *block*, so an outlier sets only its own group's scale.
#
# **Predict:** on activations where a few channels are 20 times the rest (as large transformers
# show; synthetic here, said so), which scale gives the smallest error on a product?

# %%
x = fp8_lab.outlier_activations(512, 256, seed=0)
w = torch.randn(256, 256, generator=torch.Generator().manual_seed(1)) / 16
reference = x @ w.T
SCALES = {"tensor": "one per tensor", "row": "one per row", "tile": "1x128 tiles on both",
          "fine": "1x128 tiles on x, 128x128 blocks on w (DeepSeek-V3)"}
errors = {g: fp8.matmul_error(x, w, "e4m3", g, reference=reference) for g in SCALES}
for g, e in errors.items():
    print(f"E4M3, {SCALES[g]:52}: relative error of the product {e['fp8']:.4f} (bf16: {e['bf16']:.4f})")
assert errors["fine"]["fp8"] < errors["tensor"]["fp8"]
print(fp8_lab.device_part()["why"])

# %% [markdown]
# Compare each FP8 error with bf16's beside it first. Then the scales: FP8 is a float, so the quiet
# values keep their 3 fraction bits as long as they stay above E4M3's smallest normal number times
# the scale; outliers as modest as these leave them far above it. What finer scales change here is
# mostly the rounding of each group's largest values, which land exactly on 448 (one seed here;
# `bench/fp8_numerics.py` asks over five). The rounding is exact on any machine; the *speed* of
# FP8 is not measurable on a CPU: it needs the FP8 tensor cores of a Hopper-class GPU, and the line
# above says what this machine has.

# %% [markdown]
# ## 6. Recomputation: keep less, compute again
#
# Lesson 12 counted what the line reader keeps for backward: per block about `16 b s h` numbers plus
# the attention probabilities, `a b s^2`. **Full** recomputation keeps each block's input only and
# runs the block's forward again in backward; **selective** recomputation (Korthikanti et al. 2022)
# recomputes only attention's core (the scores `QKᵀ`, the softmax, and their product with V), the
# `s^2` part: few multiply-adds when the width is large next to the line (GPT-3: 2,048 tokens, width
# 12,288), more when it is not (here 256 tokens, width 64).
#
# **Predict:** at lines of 16 digits (256 tokens), which saves more bytes, and which costs more time?

# %%
READER = dict(width=64, heads=4, depth=2, digits=16, global_batch_size=8, steps=3, lr=3e-3, test_lines=16)
cfg = TransformerConfig(d_model=64, heads=4, layers=2, max_digits=16)
kept = {}
for mode in recompute.MODES:
    kept[mode] = trainer.train_single(recompute=mode, **READER)
    model = activations.transformer_activation_bytes(cfg, 8, 256, recompute=mode)["total"]
    print(f"{mode:9}: kept {kept[mode].activation_bytes:>11,} bytes, predicted {model:>11,} "
          f"({kept[mode].activation_bytes / model:.3f})")
    assert abs(kept[mode].activation_bytes / model - 1) < 0.1
assert kept["full"].losses == kept["selective"].losses == kept["none"].losses

# %% [markdown]
# The losses are identical in all three modes: recomputation changes what is kept, never what is
# computed. Now the price, in floating-point operations (a multiply-add is two) counted by PyTorch's
# `FlopCounterMode` over one forward and backward (element-wise work such as the softmax is not
# counted), against `predict.flops.recomputed_flops`:

# %%
data = load_digits()
batch = L.train_lines(data, 8, 16, seed=0, step=0)
counted = {}
for mode in recompute.MODES:
    net = build_transformer(cfg, seed=0)
    recompute.apply(net, mode)
    with FlopCounterMode(display=False) as counter:
        loss_and_accuracy(net, batch)[0].backward()
    counted[mode] = counter.get_total_flops()
for mode in ("full", "selective"):
    extra = counted[mode] - counted["none"]
    print(f"{mode:9}: {extra:,} FLOPs recomputed, {extra / counted['none']:.1%} of a step without "
          f"(predicted {flops.recomputed_flops(cfg, 8, 256, mode):,})")
    assert extra == flops.recomputed_flops(cfg, 8, 256, mode)

# %% [markdown]
# Selective buys back the `a b s^2` bytes for part of full's arithmetic (the printed shares).
# Korthikanti et al., with sequence parallelism too, report the time recomputation adds cut by over 90% (their
# abstract). Time on this machine, three repeats of a few steps in each mode, judged by the one rule:

# %% tags=["nbval-ignore-output"]
timed = {mode: [] for mode in recompute.MODES}
for repeat in range(3):
    for mode in recompute.MODES:
        r = trainer.train_single(recompute=mode, **dict(READER, steps=4, seed=repeat))
        timed[mode].append(r.wall_time / len(r.steps) * 1e3)
print("time a step, full against none:", verdict(timed["full"], timed["none"], log=True, unit=" ms",
                                                 names=("full", "none"), better="lower"))
print("time a step, selective against full:", verdict(timed["selective"], timed["full"], log=True, unit=" ms",
                                                      names=("selective", "full"), better="lower"))
print("time a step, selective against none:", verdict(timed["selective"], timed["none"], log=True, unit=" ms",
                                                      names=("selective", "none"), better="lower"))

# %% [markdown]
# Read the verdicts as printed: where one says "no clear difference", three repeats cannot order the
# two. FLOPs leave out the softmax, element-wise work that selective recomputes too and that costs
# time beyond its FLOPs (`bench/recompute.py` measures the ratio over more rounds), so selective's
# price in time need not follow its share of the FLOPs.

# %% [markdown]
# ## 7. Offload: a second memory, if there is one
#
# ZeRO-Offload (Ren et al. 2021), built on ZeRO-2, keeps each GPU's partition of the gradients, the
# optimizer's state and the fp32 master copy in the host's memory and runs the update there: the
# gradients go down each step, the updated parameters come back. FSDP2's `CPUOffloadPolicy`, on
# ZeRO-3, keeps the parameter shards there too. **Predict:** for Llama 2 7B on 8 GPUs, bf16 with fp32
# master weights and Adam, how much leaves each GPU, and what crosses each step?

# %%
PCIE = 32e9          # bytes a second each way: PCIe 4.0 x16's specified peak
for stage, what in ((2, "none"), (2, "optimizer"), (3, "none"), (3, "params")):
    o = memory.offload_bytes(memory.KNOWN_MODELS["Llama 2 7B"], 8, offload=what, stage=stage, optimizer="adam")
    print(f"ZeRO-{stage}, offload {what:9}: on the GPU {o['device'] / 1e9:5.1f} GB, in the host "
          f"{o['host'] / 1e9:5.1f} GB, crossing each step {o['traffic'] / 1e9:4.1f} GB "
          f"(at most {o['traffic'] / PCIE:.2f} s at PCIe 4.0 x16's peak one way)")
try:
    distlab.launch(fsdp.train, world_size=2, offload="params", steps=1)
except ValueError as err:
    print("refused before start:", err)

# %% [markdown]
# These ranks are CPU processes: their memory *is* the host's, so there is nowhere to offload to, and
# the run is refused before it starts (on a GPU, `fsdp.train(offload="params")` uses FSDP2's
# `CPUOffloadPolicy`; this course has not yet run it on one). What offload costs is the traffic printed
# above, every step (the time divides both directions' bytes by one direction's peak: an upper bound),
# which is why ZeRO-Offload overlaps the copies with the backward pass.

# %% [markdown]
# ## 8. All the levers in one picture
#
# Lesson 08's memory model behind controls, with this lesson's levers beside ZeRO's stage. For the
# course's MLP, its parameter, gradient, master and optimizer bars are the ones counted in section 2
# (checked below); its activations are the models of section 6 (the course's reader, 8 lines of 256
# tokens, counted there) and of Korthikanti et al. (a published model, one line of its full length);
# autocast's weight copies are drawn at 2 bytes a parameter, all of them kept.

# %%
n = sum(p.numel() for p in runs["fp32"][0].params.values())
for policy, records in runs.items():
    bar = pictures.fitting_bars(n, 2, stage=0, policy=policy, offload="none", activations=0)[0]
    ratios = {c: records[0].memory[c] / bar[c] for c in ("params", "grads", "master", "optimizer") if bar[c]}
    print(f"{policy:12} counted / drawn: " + ", ".join(f"{c} {r:.3f}" for c, r in ratios.items()))
    assert all(0.9 < r < 1.1 for r in ratios.values())

# %% [markdown]
# **Predict:** Llama 2 7B on 8 ranks, ZeRO-1, bf16 with master weights: does it fit an 80 GB GPU,
# and which one lever would you pull first? Then move the controls.

# %% tags=["nbval-ignore-output"]
pictures.fitting_calculator(reader_params=sum(p.numel() for p in kept["none"].params.values()))

# %% [markdown]
# ## Exercises
#
# **1.** A model of 7 billion parameters trains with Adam and bf16 master weights on 8 ranks with
# ZeRO-1 (the master copy and Adam's moments sharded). How many bytes per parameter does one rank hold?

# %%
from distlab.course import exercises_fitting, exercises_precision

my_bytes = ...       # bytes per parameter, on one rank

exercises_fitting.zero1_mixed_bytes(my_bytes, ranks=8)

# %% [markdown]
# **2.** A block of lesson 12's line reader, width 64, 4 heads, keeps `16 b s h + a b s^2` fp32
# numbers. With selective recomputation the `a b s^2` part goes. For 8 lines of 256 tokens, how many
# bytes does one block save?

# %%
my_saved = ...       # bytes

exercises_fitting.selective_saving(my_saved, batch=8, tokens=256, heads=4)

# %% [markdown]
# **3. Build it: a loss scaler.** After backward of `loss x scale`, write `scaler_step`: divide every
# gradient by `scale`; if all are finite, step the optimizer; return the new scale and count of clean
# updates: on an overflow `scale / 2` and 0, else one more clean update, doubling the scale (and back
# to 0) when the count reaches `GROWTH` = 4 (the ranks get only your function's text: write 4, or import
# `GROWTH` from `distlab.course.exercises_precision` inside it; `torch` is there already). The checker trains in fp16 on 2 real
# ranks with your scaler and with the library's, and compares every scale and every update.

# %%
def scaler_step(optimizer, scale, clean):
    """Unscale, step unless a gradient overflowed, then the new (scale, clean)."""
    ...


exercises_precision.loss_scaler(scaler_step)

# %% [markdown]
# ## What we measured
#
# | question | printed in |
# |---|---|
# | bytes per parameter, per policy | sections 1 (model) and 2 (counted on 2 ranks) |
# | does bf16 cost the loss? | section 3, verdicts over three seeds |
# | what would fp16 flush to zero? | section 4, the histogram and the warning |
# | FP8's error per scale | section 5, beside bf16's |
# | recomputation's bytes, FLOPs, time | section 6, against the model; time by verdict |
# | what offload moves | section 7, the accounting |
#
# Each lever plugs into the same run: precision is the micro-step's slot, recomputation a model
# transform after the splits, offload a sharding option; nothing forks the training loop.

# %% [markdown]
# **For the insurance company.** A bigger reader needs room. bf16 with fp32 master weights halves the
# parameters and gradients but adds a 4-byte master copy: the same bytes as fp32 with Adam until ZeRO
# shards the master copy with Adam's moments (exercise 1); whether 16 bits cost the loss anything is
# section 3's verdict; recomputation trades activation bytes for arithmetic that can be counted in
# advance; offload needs an accelerator with a host behind it. On rented GPUs, these are levers to pull
# before renting more of them.

# %% [markdown]
# **Read further.** Micikevicius et al., *Mixed Precision Training* (2018),
# [arXiv:1710.03740](https://arxiv.org/abs/1710.03740); Kalamkar et al., *A Study of BFLOAT16 for Deep
# Learning Training* (2019), [arXiv:1905.12322](https://arxiv.org/abs/1905.12322); Micikevicius et al.,
# *FP8 Formats for Deep Learning* (2022), [arXiv:2209.05433](https://arxiv.org/abs/2209.05433);
# DeepSeek-AI, *DeepSeek-V3 Technical Report* (2024), [arXiv:2412.19437](https://arxiv.org/abs/2412.19437);
# Chen et al., *Training Deep Nets with Sublinear Memory Cost* (2016),
# [arXiv:1604.06174](https://arxiv.org/abs/1604.06174); Korthikanti et al., *Reducing Activation
# Recomputation in Large Transformer Models* (2022), [arXiv:2205.05198](https://arxiv.org/abs/2205.05198);
# Ren et al., *ZeRO-Offload* (2021), [arXiv:2101.06840](https://arxiv.org/abs/2101.06840); the
# [Ultra-Scale Playbook](https://huggingface.co/spaces/nanotron/ultrascale-playbook) (Hugging Face, 2025),
# its chapters on mixed precision and activation recomputation.

# %% [markdown]
# **Previous:** [13 · Experts: a bigger model for the same compute](13_experts.ipynb) · **Next:** [15 · Where the time goes](15_where_the_time_goes.ipynb) · [The course: map, glossary, solutions](../course/README.md)
