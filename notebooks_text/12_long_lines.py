# %% [markdown]
# # Lesson 12 · Long lines: splitting the heads and the sequence
#
# **Goal of this lesson.** The insurance company reads whole lines of handwriting: a policy
# number whose last digit must repeat the first. A transformer reads such a line as a sequence
# of tokens, and today's large models are transformers on long sequences, whose activations
# outgrow one rank's memory (section 7). Lesson 07 split each layer of an MLP across ranks; here we
# split a transformer two more ways: its **heads** (tensor and sequence parallelism) and its
# **line** (context parallelism, ring attention), on real ranks, and check each against one process.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. split attention by heads and the MLP by hidden units, and predict the bytes each rank sends;
# 2. say what **sequence parallelism** adds between the split regions, and show where each rank
#    holds the whole line and where a piece of it;
# 3. pass K and V round a **ring**, merge partial attentions with the log-sum-exp rule (you write
#    the merge, and it runs on real ranks), and count what the ring sends against the all-gather;
# 4. see why a causal line split in order overloads the last rank, and how **zig-zag** pieces fix it;
# 5. predict a rank's activation memory for any line length, count it, and find the longest line that fits.

# %%
import torch

import distlab
from distlab.data import load_digits
from distlab.context import context_parallel as cp
from distlab.parallelize import trainer
from distlab.sequence import lines
from distlab.context import pytorch_context_parallel as torch_cp
from distlab.tensor import heads_split
from distlab.predict import traffic
from distlab.predict.activations import score_block_bytes, transformer_activation_bytes
from distlab.sequence.memory import SavedTensors
from distlab.sequence.transformer import TransformerConfig, build_transformer, loss_and_accuracy
from distlab.widgets import long_lines as pictures
from distlab.verdict import against, verdict
from distlab.widgets.display import show

# the runs that must equal one process: lines of 3 digits (48 tokens), 2 blocks of 4 heads, 20 Adam steps
LINE = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=20, lr=3e-3, seed=0)   # width: d_model
RANKS = 4
data = load_digits()

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. A line of handwriting, as a transformer reads it
#
# A line of k digits from the real 8x8 digits, the last one a check digit. Each digit is cut into
# 2x2 patches, 16 **tokens** of 4 pixels, left to right: a line of 32 digits is 512 tokens. The
# model (pre-norm blocks: LayerNorm, multi-head attention, MLP) predicts every digit, and whether
# the check digit repeats the first: a question about the two *ends* of the line, which only
# attention across the whole line can answer. Lines are made on each rank from the training
# digits, seeded by their number, so every rank can make any batch without a file.

# %%
line = lines.train_lines(data, 1, 6, seed=0, step=0)
show(pictures.line_figure(line.tokens[0], line.digits[0], bool(line.valid[0])))
print("the model reads", tuple(line.tokens.shape[1:]), "(tokens, pixels per token); it must predict",
      line.digits[0].tolist(), "and whether the line checks out")

# %% [markdown]
# **Predict:** after 120 steps on one process, lines of 3 digits, will it read the digits better
# than chance (one in ten)? And the check, better than a coin? Three seeds, each an independent
# run, judged by the course's one rule (`distlab.verdict`, lesson 01):

# %% tags=["nbval-ignore-output"]
readers = [trainer.train_single(width=32, heads=2, depth=1, digits=3, global_batch_size=32, steps=120, seed=seed)
           for seed in (0, 1, 2)]
print("digits:", against([r.test_accuracy for r in readers], 0.10, better="higher",
                                         names=("digits read right", "chance")))
print("check: ", against([r.config["test_check_accuracy"] for r in readers], 0.50,
                                         better="higher", names=("check read right", "a coin")))
# a reader that gives every line the answer more common among its seed's test lines needs no attention at all
test_count = trainer.spec_of().data.test_lines            # the test lines each run is read on
constant = [max(p, 1 - p) for p in (lines.test_lines(data, test_count, 3, seed).valid.float().mean().item()
                                    for seed in (0, 1, 2))]
print("always the more common answer, on each seed's test lines:", [round(c, 3) for c in constant])
print("check, seed by seed, minus that:",
      against([r.config["test_check_accuracy"] - c for r, c in zip(readers, constant)], 0.0, better="higher",
              names=("check minus the constant answer", "zero")))

# %%
assert all(r.test_accuracy > 0.2 for r in readers)
print("each of the three runs read more than twice as many digits right as chance:",
      all(r.test_accuracy > 0.2 for r in readers))

# %% [markdown]
# Three short runs spread widely, and the rule asks for a wide interval over so few: read whether
# it can already name a winner. The check is the harder half: the first digit's tokens must reach the
# last digit's, across the line, and then be compared. A reader that does none of that can still beat
# a coin where a seed's test lines are not half valid, by always giving the more common answer: the
# last verdict reads the check against that, seed by seed. Where a check verdict finds no clear
# difference, this small reader has not shown it learned the check, and this lesson trains none that
# has. What shows that a split keeps attention's reach across the line is that every split below ends
# with one process's parameters. The reason to split the line is memory (section 7).

# %% [markdown]
# ## 2. Heads across ranks: tensor parallelism on a transformer
#
# Lesson 07 split an MLP column-wise then row-wise. A block has two such regions:
#
# * **attention**: heads are independent, so each rank keeps whole heads: its rows of Q, K and V,
#   and the matching columns of the output projection, whose partial sums add up to the output;
# * **the MLP**: the first layer's hidden units column-wise, the second row-wise.
#
# Each region begins with Megatron's *f* (nothing forward, an all-reduce of the input's gradient
# backward) and ends with *g* (an all-reduce of the partial sums forward, nothing backward).

# %% [markdown]
# **Predict:** per step, how many bytes does one rank pass to all-reduce? (Per block: two regions,
# each one all-reduce of batch x tokens x width numbers forward and one backward.)

# %% tags=["nbval-ignore-output"]
one = trainer.train_single(**LINE)       # the reference: nothing split
heads = distlab.launch(trainer.train, world_size=RANKS, tensor=RANKS, **LINE)   # each rank one head of four

# %%
merged = heads_split.merge_params([r.params for r in heads])
assert distlab.max_param_difference(merged, one.params) <= 1e-5
print("rank 0 holds attn.q.weight", tuple(heads[0].params["blocks.0.attn.q.weight"].shape), "of",
      tuple(one.params["blocks.0.attn.q.weight"].shape), "and mlp.fc1.weight",
      tuple(heads[0].params["blocks.0.mlp.fc1.weight"].shape), "of", tuple(one.params["blocks.0.mlp.fc1.weight"].shape))
print(f"after {LINE['steps']} steps the slices, put together, are one process's parameters (within 1e-5)")
b, s, h, L = LINE["global_batch_size"], LINE["digits"] * 16, LINE["width"], LINE["depth"]
print("bytes passed to all-reduce per step, counted: ", heads[0].traffic)
print("predicted (2 regions x blocks x b s h x 4 bytes):", traffic.tensor_parallel_bytes(b, h, tokens=s, regions=2 * L))
assert heads[0].traffic == traffic.tensor_parallel_bytes(b, h, tokens=s, regions=2 * L)

# %% [markdown]
# ## 3. Sequence parallelism: the line in pieces between the regions
#
# Between the regions (the LayerNorms, the residual additions) every tensor rank does the same
# work on the whole line and keeps the same activations. **Sequence parallelism** (Korthikanti et
# al. 2022) cuts the line there instead: each rank keeps its piece of the tokens, an **all-gather**
# makes the line whole where a region begins, and a **reduce-scatter** where it ends both adds the
# partial sums and cuts the line again. An all-reduce *is* a reduce-scatter then an all-gather.
#
# **Predict:** does sequence parallelism send more bytes per step than tensor parallelism alone?

# %% tags=["nbval-ignore-output"]
pieces = distlab.launch(trainer.train, world_size=RANKS, tensor=RANKS, sequence_parallel=True, progress="none",
                        **LINE)

# %%
merged_sp = heads_split.merge_params([r.params for r in pieces])
assert distlab.max_param_difference(merged_sp, one.params) <= 1e-5
print("TP + SP: the slices, put together, are one process's parameters (within 1e-5)")
print("tensors passed to collectives per step, bytes: TP", heads[0].traffic, " TP + SP", pieces[0].traffic)
assert pieces[0].traffic == traffic.tensor_parallel_bytes(b, h, tokens=s, regions=2 * L, sequence_parallel=True)
for sp in (False, True):
    print(f"{'TP + SP' if sp else 'TP':>7}: on the wire with ring collectives, per rank per step (model): "
          f"{traffic.tensor_parallel_wire_bytes(b, s, h, L, RANKS, sequence_parallel=sp):,} bytes"
          + (", plus the token-wise parameters' gradients (left out here)" if sp else ""))

# %% [markdown]
# Twice the tensors, each half the work of an all-reduce: on the wire, the same bytes, plus a
# little for the read-out's gather and the LayerNorms' gradients (each rank saw only its tokens,
# so those gradients are summed). `bench/long_sequences.py` counts the bytes that really cross the
# loopback interface and compares them with this model. What sequence parallelism buys is
# memory: the table shows the shape each rank held at each point of the first block. Note the
# MLP's hidden units and Q: inside a region the line is whole again, gathered.

# %%
print(pictures.holdings_table({"TP": heads, "TP + SP": pieces}))

# %% [markdown]
# PyTorch does the same with `parallelize_module`: `ColwiseParallel` for Q, K, V and the MLP's
# first layer, `RowwiseParallel` for the projections back, `SequenceParallel` for the LayerNorms.
# Same model, same lines, same result:

# %% tags=["nbval-ignore-output"]
theirs = distlab.launch(trainer.train, world_size=RANKS, tensor=RANKS, use_torch=True, sequence_parallel=True,
                        progress="none", **LINE)

# %%
assert distlab.max_param_difference(theirs[0].params, one.params) <= 1e-5
print("parallelize_module with SequenceParallel: one process's parameters (within 1e-5)")

# %% [markdown]
# ## 4. The line across ranks: context parallelism
#
# Tensor parallelism talks inside every region, and stops at the number of heads. **Context
# parallelism** gives each rank a piece of the line for the *whole* block: embeddings, LayerNorms
# and the MLP act on each token alone, so they need nothing from the other pieces. Only attention
# does: every query must see every key. The plainest way: each rank **all-gathers** K and V, the
# whole line's, and attends its own queries to them (Llama 3's long-context training did, Dubey et al. 2024).

# %% tags=["nbval-ignore-output"]
gathered = distlab.launch(trainer.train, world_size=RANKS, context=RANKS, attention="all_gather",
                          progress="none", **LINE)

# %% [markdown]
# **Ring attention** (Liu et al. 2023) never holds the whole line: K and V pass from rank to rank
# round a ring, and each rank attends its queries to the block it holds, then merges. Softmax over
# all keys can be built block by block: keep, with each partial output, the log-sum-exp of its
# scores; two partial results combine weighted by their shares of the total (Milakov and
# Gimelshein 2018). Checked here on one head:

# %%
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 8, 4, generator=g) for _ in range(3))
whole = torch.softmax(q @ k.transpose(-2, -1) / 2, dim=-1) @ v
first, lse_first = cp.block_attention(q, k[:, :4], v[:, :4], 0, 0, causal=False)
second, lse_second = cp.block_attention(q, k[:, 4:], v[:, 4:], 0, 1, causal=False)
out, _ = cp.merge(first, lse_first, second, lse_second)
assert torch.allclose(out, whole, atol=1e-6)
print("two halves of the keys, merged by their log-sum-exp: attention over all eight keys (within 1e-6)")

# %% tags=["nbval-ignore-output"]
ring = distlab.launch(trainer.train, world_size=RANKS, context=RANKS, progress="none", **LINE)

# %%
for name, records in (("all-gathered K and V", gathered), ("ring attention", ring)):
    assert max(distlab.max_param_difference(r.params, one.params) for r in records) <= 1e-5
    print(f"{name}: every rank holds one process's parameters after {LINE['steps']} steps (within 1e-5)")

# %% [markdown]
# **Predict:** which sends more bytes per step, the ring or the all-gather? The ring passes a piece
# of K and V n - 1 hops forward; backward, K, V and their gradients travel together, and the
# gradients take one more hop home. The all-gather sends (n - 1)/n of K and V forward, as much of
# their gradients back. Counted by each run's own log, against `predict.traffic`:

# %%
ring_predicted = traffic.context_parallel_bytes(b, s, h, RANKS, layers=L)
assert ring[0].ring["bytes"] == ring_predicted
print("ring, bytes one rank sent in the last step, counted:", ring[0].ring["bytes"], " predicted:", ring_predicted)
gathered_predicted = traffic.context_parallel_bytes(b, s, h, RANKS, layers=L, attention="all_gather")
assert gathered[0].ring["bytes"] == gathered_predicted
print("all-gather, the whole line's K, V (forward) and their gradients (backward) one rank passed to its collectives,"
      " counted:", gathered[0].ring["bytes"], " predicted:", gathered_predicted)
on_wire = {way: traffic.context_parallel_wire_bytes(b, s, h, RANKS, layers=L, attention=way) for way in ("ring", "all_gather")}
print(f"on the wire per rank per step: ring {on_wire['ring']:,} bytes, all-gather (ring collectives) "
      f"{on_wire['all_gather']:,}: the ring sends {on_wire['ring'] / on_wire['all_gather']:.2f}x, "
      f"(3n-2)/(2(n-1)) at n = {RANKS}")

# %% [markdown]
# The ring, replayed from the messages each rank logged in its last forward pass: at every hop a
# rank attends to the K and V it holds, then passes them on. Press play, or drag the slider.

# %%
pictures.ring_animation(ring)

# %% [markdown]
# **Predict:** which keeps fewer bytes of activations per rank for the backward pass, the
# all-gather or the ring? The gathered rank keeps the whole line's K and V and its queries'
# probabilities; the ring keeps its own Q, K, V and one log-sum-exp per query, and recomputes the
# probabilities in its backward pass (as FlashAttention does, Dao et al. 2022). Counted with
# `torch.autograd.graph.saved_tensors_hooks`, against `predict.activations`' model:

# %%
WAYS = {"one process": (dict(), [one]), "TP, 4 ranks": (dict(tensor=RANKS), heads),
        "TP + SP, 4 ranks": (dict(tensor=RANKS, sequence_parallel=True), pieces),
        "CP all-gather, 4": (dict(context=RANKS, attention="all_gather"), gathered),
        "CP ring, 4": (dict(context=RANKS), ring)}
cfg = TransformerConfig(d_model=h, heads=LINE["heads"], layers=L, max_digits=LINE["digits"])
print(f"{'activations kept per rank':<26}{'predicted':>12}{'counted':>12}  ratio")
for name, (layout, records) in WAYS.items():
    predicted = transformer_activation_bytes(cfg, b, s, **layout)["total"]
    counted = records[0].activation_bytes
    assert 0.98 <= predicted / counted <= 1.02
    print(f"{name:<26}{predicted:>12,}{counted:>12,}  {predicted / counted:.3f}")

# %% [markdown]
# TP + SP and the all-gathered CP keep the same bytes, different tensors: per block, each keeps
# two tensors of the whole line (TP + SP the gathered inputs of its two split regions, CP the
# gathered K and V) and a quarter of everything else, so on as many ranks the counts agree at
# any length (for this reader, which has no causal mask: a causal reader's mask is kept whole by TP
# and in pieces by CP). The ring keeps no whole-line tensor at all.

# %% [markdown]
# Korthikanti et al. (2022, section 4) count one layer's activations as `sbh(34 + 5as/h)` bytes
# (s tokens, b lines, h the width, a heads; 16-bit numbers and dropout masks), `sbh(10 + 24/t +
# 5as/(ht))` with tensor parallelism over t, and `sbh/t (34 + 5as/h)` with sequence parallelism as
# well. This model (32-bit, no dropout) keeps `16bsh + abs^2` numbers a block: the same `s^2` term
# (`predict.activations`). Their SP divides *everything* by t: Megatron keeps each region's input
# in pieces and gathers it again in the backward. This code keeps the gathered input, so it saves less:

# %%
from distlab.predict.activations import korthikanti_layer_bytes

saving = 1 - pieces[0].activation_bytes / heads[0].activation_bytes
regathered = transformer_activation_bytes(cfg, b, s, tensor=RANKS, sequence_parallel=True, regather=True)["total"]
print(f"TP + SP keeps {saving:.0%} less than TP here (counted); gathering the regions' inputs again in the "
      f"backward, as Megatron does, it would keep {1 - regathered / heads[0].activation_bytes:.0%} less (predicted)")
for name, kw in (("one rank", {}), ("TP, 4", dict(tensor=RANKS)), ("TP + SP, 4", dict(tensor=RANKS, sequence_parallel=True))):
    print(f"{name:>11}: one layer, Korthikanti's formula {korthikanti_layer_bytes(s, b, h, LINE['heads'], **kw):>10,.0f}"
          " bytes (16-bit, dropout)")

# %% [markdown]
# ## 5. A causal line: who waits?
#
# A causal reader lets each token see only the tokens before it. Split in order, rank 0's queries
# see only its own keys, while the last rank's see every piece: most of the mask's blocks fall to
# the ranks near the end. **Zig-zag** cuts the line into twice as many chunks and gives rank r
# chunk r and its mirror from the other end (Brandon et al. 2023 stripe the line for the same reason).
#
# **Predict:** with the contiguous split on 4 ranks, which rank finishes its attention first and
# waits longest for the others? On lines of 512 tokens:

# %% tags=["nbval-ignore-output"]
LONG = dict(LINE, digits=32, global_batch_size=8, causal=True, steps=4,
            test_lines=32)     # about time and memory, not accuracy: a few test lines keep the ranks small
causal = {split: distlab.launch(trainer.train, world_size=RANKS, context=RANKS, split=split, progress="none", **LONG)
          for split in ("contiguous", "zigzag")}

# %%
for split, records in causal.items():
    chunks = records[0].ring["chunks"]
    print(f"{split:>10}: {chunks} chunks; blocks of the mask each rank computes per layer:",
          [r.ring["score_blocks"] // LONG["depth"] for r in records],
          "; its chunks:", [cp.chunk_ids(r.rank, RANKS, split) for r in records])

# %% tags=["nbval-ignore-output"]
show(pictures.mask_figure(causal))

# %% [markdown]
# A zig-zag chunk is half as long, so each of its blocks holds a quarter of the scores: every rank
# computes the same area of the mask. Each rank also timed its own attention (its thread's CPU time,
# so a rank waiting for a core is not charged). The steps of one run share their machine and their
# start, so they are not independent: two more runs a split, other seeds, give three runs a side,
# each one number (its slowest rank's time over its fastest's, the first step left out), and the
# course's rule reads them. A rank with less to compute reaches each hop's exchange first and waits
# there for its neighbours: the cell also names, run by run, the rank that attended least.

# %% tags=["nbval-ignore-output"]
def imbalance(records):
    """Slowest rank's attention time / fastest's, over the steps after the first (which pays for warming up)."""
    per_rank = [sum(r.ring["attention_seconds_by_step"][1:]) for r in records]
    return max(per_rank) / min(per_rank)


more = {split: [distlab.launch(trainer.train, world_size=RANKS, context=RANKS, split=split, progress="none",
                               **dict(LONG, seed=seed)) for seed in (1, 2)] for split in causal}
ratios = {split: [imbalance(r) for r in [causal[split], *more[split]]] for split in causal}
least = [min(records, key=lambda r: sum(r.ring["attention_seconds_by_step"][1:])).rank
         for records in [causal["contiguous"], *more["contiguous"]]]
print("contiguous: the rank that spent least time attending (steps after the first), run by run:", least)
print(verdict(ratios["zigzag"], ratios["contiguous"], names=("zig-zag", "contiguous"),
                              better="lower", log=True))

# %% [markdown]
# ## 6. PyTorch's own context parallelism
#
# PyTorch has an experimental `context_parallel` (`torch.distributed.tensor.experimental`): inside
# it, `scaled_dot_product_attention` on a `DeviceMesh` becomes what its documentation calls ring
# attention, block by block with the log-sum-exp merge and its own zig-zag load balancer. How K and V
# travel is a setting, `set_rotate_method`: by default ("allgather") each rank gathers every piece at
# once, holding the whole line's K and V as our all-gather does; "alltoall" passes them on hop by hop,
# as our ring does. We try it for real on these ranks, against attention on the whole line:

# %% tags=["nbval-ignore-output"]
attempt = distlab.launch(torch_cp.attempt, world_size=RANKS, progress="none")
print(f"PyTorch {attempt[0]['torch']} on {attempt[0]['device']}:",
      f"ran, largest difference {attempt[0]['max_diff']:.1e}" if attempt[0]["ran"] else attempt[0]["error"])

# %% [markdown]
# On CPU it stops. Its ring works by giving each attention *kernel* a rule for splitting it
# across ranks, and it has such rules for the GPU kernels (flash, memory-efficient and cuDNN
# attention) but none for the kernel PyTorch picks on a CPU: the error above names it. PyTorch's
# tutorial runs it on GPUs; this course has not (`attempt` keeps Q, K and V on the CPU), so the cell
# above says nothing about a GPU. Our ring in section 4 is written in plain tensor operations, which
# is why it runs here; unlike a fused kernel, it writes each block of scores to memory (section 7
# counts that block).

# %% [markdown]
# ## 7. How long a line fits?
#
# Activations, not parameters, fill a rank's memory on long lines, and without a split the
# attention probabilities grow with the **square** of the line. **Predict:** doubling the line
# from 256 to 512 tokens, how much more does one process keep? We count a few lengths on this
# process with `SavedTensors` (the causal model, 8 lines a batch):

# %%
BATCH = 8
long_cfg = dict(d_model=h, heads=LINE["heads"], layers=L, causal=True)
counted = {}
for k in (4, 8, 16, 32):
    model = build_transformer(TransformerConfig(max_digits=k, **long_cfg))
    with SavedTensors(model) as saved:
        loss_and_accuracy(model, lines.train_lines(data, BATCH, k, seed=0, step=0))
    counted[k * 16] = saved.bytes
model_cfg = TransformerConfig(max_digits=512, **long_cfg)
for tokens, kept in counted.items():
    predicted = transformer_activation_bytes(model_cfg, BATCH, tokens)["total"]
    assert 0.98 <= predicted / kept <= 1.02
    print(f"{tokens:>4} tokens: counted {kept:>11,} bytes, predicted {predicted:>11,}")
print(f"doubling the line from 256 to 512 tokens: {counted[512] / counted[256]:.1f} times the bytes kept")
for tokens in (256, 512):
    parts = transformer_activation_bytes(model_cfg, BATCH, tokens)
    square = parts["attention probabilities"] + parts["causal masks"]     # the terms in s^2
    print(f"at {tokens} tokens the probabilities and the causal mask, which grow with the square of the line, "
          f"are {square / parts['total']:.0%} of what one process keeps (model); the rest grows with the line")
print("model and count agree within 2 in 100 at every length counted; the ring's 4 ranks at 512 tokens too:",
      0.98 <= transformer_activation_bytes(model_cfg, BATCH, 512, context=RANKS)["total"]
      / causal["zigzag"][0].activation_bytes <= 1.02)

# %% [markdown]
# The model, checked where we could count, now predicts lines too long to count here. What a rank
# keeps is not all it holds: while attending it also builds scores it does not keep (the ring, one
# block of `a b (s/c)^2` each hop, `predict.activations.score_block_bytes`), so its peak is at least
# the two together. Give each rank a budget (`BUDGET`, below) and grow the line:

# %%
BUDGET = 2**30                                   # bytes a rank may hold: kept activations and one block of scores
SPLITS = {"one rank": dict(), "TP + SP, 4": dict(tensor=4, sequence_parallel=True),
          "CP all-gather, 4": dict(context=4, attention="all_gather"),
          "CP ring, 2": dict(context=2), "CP ring, 4": dict(context=4)}
LENGTHS = [64 * 2**i for i in range(8)]          # 64 to 8,192 tokens
keep = {name: {t: transformer_activation_bytes(model_cfg, BATCH, t, **layout)["total"] for t in LENGTHS}
        for name, layout in SPLITS.items()}
need = {name: {t: keep[name][t] + score_block_bytes(model_cfg, BATCH, t, **SPLITS[name]) for t in LENGTHS}
        for name in SPLITS}
print(f"the ring on 4 ranks at {LENGTHS[-1]:,} tokens: keeps "
      f"{transformer_activation_bytes(model_cfg, BATCH, LENGTHS[-1], context=4)['total'] / 2**20:,.0f} MiB, and builds "
      f"{score_block_bytes(model_cfg, BATCH, LENGTHS[-1], context=4) / 2**20:,.0f} MiB of scores at each hop")
for name, by_length in need.items():
    fits = [t for t in LENGTHS if by_length[t] <= BUDGET]
    print(f"{name:>17}: longest line whose kept bytes and scores fit: {max(fits):>5,} tokens" + ("" if max(fits) < LENGTHS[-1] else
                                                                              " (every length tried)"))
first_over = min(t for t in LENGTHS if need["one rank"][t] > BUDGET)
assert need["CP ring, 2"][first_over] <= BUDGET and need["CP ring, 4"][first_over] <= BUDGET
print(f"at {first_over:,} tokens one rank needs more than its budget; the ring on 2 and on 4 ranks still fits")

# %%
points = {name: [(t, keep[name][t], None) for t in LENGTHS] for name in ("one rank", "CP all-gather, 4", "CP ring, 4")}
points["one rank"] += [(t, transformer_activation_bytes(model_cfg, BATCH, t)["total"], c) for t, c in counted.items()]
points["CP ring, 4"].append((512, keep["CP ring, 4"][512], causal["zigzag"][0].activation_bytes))
points["CP ring, 4, kept + a block of scores"] = [(t, need["CP ring, 4"][t], None) for t in LENGTHS]
for name in ("one rank", "CP ring, 4"):
    print(f"{name:>10}: what a rank keeps, over what it kept at half the length (model):",
          [round(keep[name][t] / keep[name][t // 2], 2) for t in LENGTHS[1:]])
show(pictures.memory_figure(points, budget=BUDGET))

# %% [markdown]
# Read the slopes (the figure draws what each rank keeps, and for the ring also what it holds while a
# block of scores is built; the cell prints each doubling's factor).
# If a share q of the bytes grows with the square of the line and the rest with the line, a doubling
# multiplies them by 4q + 2(1 - q), the answer to section 7's question: one rank's line climbs towards
# four-fold as the probabilities come to dominate; the all-gathered ranks keep a quarter of them, still
# quadratic; the ring's rank keeps none, so what it keeps climbs only two-fold. The square is not gone,
# it moved: each hop's block of scores still grows as `(s/c)^2`, built and dropped. FlashAttention-style
# kernels cut that block into tiles too. Tensor and sequence parallelism divide the probabilities among
# the heads' ranks but cannot go further than the number of heads.

# %% [markdown]
# ## Exercises
#
# **1.** With every block's heads and MLP split across ranks (no sequence parallelism), how many
# bytes does one rank pass to all-reduce per step for 8 lines of 512 tokens, width 64, 4 blocks?

# %%
from distlab.course import exercises_long_lines

my_bytes = ...       # bytes per step

exercises_long_lines.tp_bytes(my_bytes, batch=8, tokens=512, d_model=64, layers=4)

# %% [markdown]
# **2.** Ring attention on 4 ranks, 8 lines of 512 tokens, width 64: how many bytes does one rank
# send in one block's forward pass (K and V, every hop)?

# %%
my_ring_bytes = ...  # bytes one rank sends, one block, forward

exercises_long_lines.ring_bytes(my_ring_bytes, batch=8, tokens=512, d_model=64, ranks=4)

# %% [markdown]
# **3.** With the zig-zag split over 8 ranks, which chunks of the line does rank 2 hold?

# %%
my_chunks = ...      # a list of chunk numbers

exercises_long_lines.zigzag_chunks(my_chunks, rank=2, ranks=8)

# %% [markdown]
# **4. Build it: the merge at the heart of the ring.** Each rank holds, for its queries, an output
# normalised over the keys seen so far and each query's log-sum-exp of their scores; a new block
# of keys brings another such pair. Write `merge`, returning the pair over both sets of keys (5
# lines or fewer; `torch` is there). The checker runs it inside ring attention on 4 real ranks and
# compares every rank's output and log-sum-exp, hop by hop, with plain softmax over the keys seen so
# far, in one process; it names the rank, the hop and what differs.

# %%
def merge(out_a, lse_a, out_b, lse_b):
    """Two partial attentions of the same queries over disjoint keys -> (output, log-sum-exp) over both."""
    ...


exercises_long_lines.merge_partials(merge)

# %% [markdown]
# ## What we measured
#
# | split | each rank holds | talks | per step (ring collectives) |
# |---|---|---|---|
# | tensor (heads, MLP units) | its heads' Q, K, V, its hidden units; the line whole | all-reduce in every region | 2 per block each way |
# | + sequence | as TP, and a piece of the line between the regions | all-gather in, reduce-scatter out | the same bytes on the wire |
# | context, all-gather | a piece of the line; everyone's K and V in attention | all-gather of K, V per block | (n-1)/n of the line's K, V forward, their gradients back |
# | context, ring | a piece of the line; one other piece's K, V at a time | K, V n-1 hops; back K, V, dK, dV, one hop more | 2(3n-2)/n of the line's K against the all-gather's 4(n-1)/n |

# %% [markdown]
# Every split trained to one process's parameters. Memory decides between them for long lines:
# the ring pays for keeping no whole-line tensor with more bytes on the wire. On a causal line,
# zig-zag pieces give every rank the same area of the mask (counted in section 5, where the course's
# rule also read the ranks' attention times); section 7 printed the longest line each split fits in
# a rank's budget, scores included. For the insurance company: a line too long for one rank can be
# split along its length and still read as one process reads it. Whether a reader learns the check
# digit is another question: section 1's verdicts say how far this small one got.

# %% [markdown]
# **Read further.** Shoeybi et al., *Megatron-LM* (2019), [arXiv:1909.08053](https://arxiv.org/abs/1909.08053)
# (f and g, figure 3); Korthikanti et al., *Reducing Activation Recomputation in Large Transformer
# Models* (2022), [arXiv:2205.05198](https://arxiv.org/abs/2205.05198) (sequence parallelism; activation
# memory, their section 4); Liu, Zaharia and Abbeel, *Ring Attention with Blockwise Transformers* (2023),
# [arXiv:2310.01889](https://arxiv.org/abs/2310.01889); Milakov and Gimelshein, *Online normalizer
# calculation for softmax* (2018), [arXiv:1805.02867](https://arxiv.org/abs/1805.02867); Dao et al.,
# *FlashAttention* (2022), [arXiv:2205.14135](https://arxiv.org/abs/2205.14135); Brandon et al.,
# *Striped Attention* (2023), [arXiv:2311.09431](https://arxiv.org/abs/2311.09431); Dubey et al., *The
# Llama 3 Herd of Models* (2024), [arXiv:2407.21783](https://arxiv.org/abs/2407.21783) (context
# parallelism with all-gathered K and V, their section 3.3.2); the
# [Ultra-Scale Playbook](https://huggingface.co/spaces/nanotron/ultrascale-playbook) (Hugging Face,
# 2025), its chapters on tensor, sequence and context parallelism; PyTorch's tutorials on tensor
# parallelism and on context parallel.

# %% [markdown]
# **Previous:** [11 · What did you find? A knowledge check, and the answer for the insurance company](11_knowledge_check.ipynb) · **Next:** [13 · Experts: a bigger model for the same compute](13_experts.ipynb) · [The course: map, glossary, solutions](../course/README.md)
