# %% [markdown]
# # Lesson 15 · Where the time goes
#
# **Goal of this lesson.** Lesson 05 measured whether a second worker pays; this lesson measures
# *why* a step takes the time it takes, and pulls the levers that decide it in practice. First the
# roof: how fast this machine multiplies and moves bytes, and how close each run comes (**MFU**).
# Then the communication that can travel while the rank still computes: the gradients sent from
# hooks, in **buckets**, with **reduce-scatter**; the ring attention's hops; and the pipeline
# bubble that a zero-bubble schedule (**ZB-H1**) shrinks. Each is measured on real ranks, from their own
# records and from a **profiler trace**.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. measure this machine's peak FLOP/s and memory bandwidth, read its roofline, and place a run on it;
# 2. say which communication is *exposed* (waited for) and which is *hidden* behind computation;
# 3. send gradients during backward from hooks, in buckets, and explain why both very small and
#    very large buckets can lose;
# 4. explain how splitting backward into its input and weight halves fills part of a pipeline's bubble;
# 5. explain how posting the ring's next hop before computing hides it, and predict when it does;
# 6. read a `torch.profiler` trace of a real two-rank step;
# 7. write a bucketed gradient reducer yourself (it runs on real ranks).

# %%
import statistics

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.measure import exposed
from distlab.measure import roofline as R
from distlab.verdict import verdict
from distlab.widgets import time_levers as pictures
from distlab.widgets.display import show

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. The roof of this machine
#
# A step's arithmetic cannot run faster than the machine multiplies, and its bytes cannot move
# faster than memory delivers them. The **roofline** (Williams, Waterman and Patterson 2009) puts
# both on one picture: a run doing `I` FLOPs per byte it moves reaches at most `min(P, I x B)`,
# where `P` is the peak FLOP/s and `B` the memory bandwidth; the **ridge** `P / B` is the
# intensity where the roof turns (below it, memory bounds a step). Datasheet peaks are not what a
# program gets, so we measure both here: square matrix products (the best rate of a few) and one
# large copy.
#
# **Predict:** how many times faster is a product in bf16 than in fp32 on this CPU?

# %% tags=["nbval-ignore-output"]
peaks = {(dtype, threads): R.peak_matmul(dtype, threads=threads) for dtype in ("float32", "bfloat16")
         for threads in (1, None)}
for (dtype, threads), value in peaks.items():
    print(f"{dtype:9} on {'one thread' if threads else 'all threads'}: {value / 1e9:6.1f} GFLOP/s")
bandwidth = R.memory_bandwidth(128)
peak = max(peaks[("float32", 1)], peaks[("float32", None)])     # the roof: the best fp32 rate measured
print(f"memory bandwidth (a copy): {bandwidth / 1e9:.1f} GB/s; the ridge: {R.ridge(peak, bandwidth):.1f} FLOPs a byte")
print(f"bf16 over fp32: {peaks[('bfloat16', None)] / peaks[('float32', None)]:.1f} times on all threads, "
      f"{peaks[('bfloat16', 1)] / peaks[('float32', 1)]:.1f} on one")

# %% [markdown]
# On an H100, bf16 on its tensor cores runs about fifteen times plain fp32 (twice TF32, its 32-bit
# tensor-core format). A CPU gains only if it has bf16 instructions (AVX-512 BF16 or AMX); the ratio
# printed above says whether this one does. The rest of the lesson computes in fp32.

# %% [markdown]
# ## 2. Each run on the roofline, and its MFU
#
# **MFU** (model FLOPs utilisation, Chowdhery et al. 2022, appendix B) is the FLOPs a step needs,
# per second of the step, over the peak. PaLM divides by the datasheet peak; we use the measured
# one, which is lower, so our MFU reads higher than PaLM's would. Our count is what ran (PyTorch's
# counter): with recomputation it would include work the model does not need, which PaLM leaves
# out. The bytes a step moves are harder to count: we *estimate* them as every byte the rank holds
# read once and written once.
#
# **Predict:** which side of the ridge is lesson 01's small MLP on, and how close to its bound?

# %% tags=["nbval-ignore-output"]
runs = {"lesson 01's MLP": dp.train_single(global_batch_size=64, steps=30),           # one process each
        "the wide MLP of section 3": dp.train_single(world_size=2, **exposed.MODEL, steps=10)}
points = {name: R.place_on_roofline(record, peak, bandwidth) for name, record in runs.items()}
for name, p in points.items():
    bound = "memory" if p["memory_bound"] else "compute"
    print(f"{name:28} {p['intensity']:7.1f} FLOPs a byte (estimated), {p['achieved'] / 1e9:6.2f} GFLOP/s, "
          f"MFU {p['mfu']:.3f}: on the {bound} side of the ridge")
show(pictures.roofline_figure(peak, bandwidth, points))

# %% [markdown]
# Compare the two MFUs the cell printed. Lesson 01's MLP does so little arithmetic per operator
# that its step is likely dominated by Python and PyTorch's per-operator dispatch: a third bound the
# roofline leaves out (Horace He calls it *overhead*, beside compute and memory bandwidth). The
# wider model does far more arithmetic per operator, so the same overhead weighs less. Section 8's
# trace files list every operator of a step, if you want to look.

# %% [markdown]
# ## 3. Sending gradients while backward still runs
#
# Backward computes the *last* layer's gradients first. Lesson 01 waited for all of them, then
# all-reduced; here they leave as soon as they are written (`distlab.train.overlap`), three ways:
#
# * **hooks**: one asynchronous all-reduce per tensor, launched from a hook on the parameter;
# * **buckets**: tensors grouped, in backward's order, up to a cap (`bucket_mb`); a bucket leaves
#   when its last gradient is written (DistributedDataParallel's design, Li et al. 2020; DDP's own
#   first bucket is smaller, so it leaves sooner);
# * **reduce-scatter**: each bucket reduce-scattered during backward, its slices all-gathered
#   after (the two halves of a ring all-reduce). The all-gather half always waits for backward's
#   end, so it hides at most half; it pays when each rank updates only its slice (ZeRO-2).

# %% [markdown]
# Beside them, lesson 01's ways after backward (`by_hand`: one all-reduce per tensor; `fused`: one
# flat all-reduce) and DDP. The **exposed** communication is what is still to wait for once
# backward has ended.

# %%
from distlab.comm import cost_model, measure_costs
from distlab.course.exercises_overlap import expected_buckets
from distlab.models import build_model

wide = build_model(exposed.MODEL["model"], exposed.MODEL["width"], depth=exposed.MODEL["depth"])
tensors = list(wide.parameters())
print(f"the wide MLP: {sum(p.numel() for p in tensors):,} parameters in {len(tensors)} tensors, "
      f"{sum(p.numel() for p in tensors) * 4 / 2 ** 20:.2f} MiB of fp32 gradients")
for cap in (0.25, 4.0, 16.0):
    print(f"  buckets of at most {cap:g} MiB: {len(expected_buckets(wide, cap * 2 ** 20))} messages a step")

# %% [markdown]
# This machine's link, fitted as in lesson 03 (a ping-pong and an add), prices a message's start-up:

# %% tags=["nbval-ignore-output"]
link = cost_model.fit_link(**distlab.launch(measure_costs.measure_link, world_size=2, progress="none")[0])
print(link)
print(f"start-ups alone: {len(tensors)} messages x alpha = {len(tensors) * link.alpha * 1e3:.2f} ms a step")

# %% [markdown]
# **Predict:** which cap leaves the least exposed: the smallest, the largest, or one between?

# %% tags=["nbval-ignore-output"]
ways = exposed.ways(bucket_sizes=(0.25, 4.0, 16.0))         # DDP at its default cap (25 MiB)
sweep = distlab.launch(exposed.sweep, world_size=2, ways=ways, rounds=5, steps=6, progress="none")
summary = exposed.summarise(sweep)
print(f"{'way':22} {'exposed, ms: median (lowest-highest)':>38} {'step, ms':>9}   2 ranks, 5 rounds")
for name, row in summary.items():
    shown = "inside backward" if row["exposed"] is None else \
        f"{statistics.median(row['exposed']) * 1e3:6.1f} ({min(row['exposed']) * 1e3:.1f}-{max(row['exposed']) * 1e3:.1f})"
    print(f"{name:22} {shown:>38} {statistics.median(row['step']) * 1e3:9.1f}")
show(pictures.sweep_figure(summary))

# %% [markdown]
# Each dot is one round, each bar their mean: every way ran once per round, in turn, on the same
# two ranks, so a slow stretch of the machine is shared by all the ways. DDP's wait happens inside
# its own backward, so it has a step time and no exposed time (`bench/time_levers.py` sweeps its
# `bucket_cap_mb`). The course's one rule (lesson 01) decides, over the rounds, in milliseconds:

# %% tags=["nbval-ignore-output"]
def ms(name, key):
    return [v * 1e3 for v in summary[name][key]]


buckets = [name for name in summary if name.startswith("buckets")]
best = min(buckets, key=lambda name: statistics.geometric_mean(summary[name]["exposed"]))
print("exposed communication:")
for other in ("by_hand", "fused", "hooks", buckets[0], buckets[-1]):
    if other != best:
        print(" ", verdict(ms(best, "exposed"), ms(other, "exposed"), names=(best, other), better="lower", log=True,
                           unit=" ms").text)
print("the whole step:")
for other in ("fused", "ddp 25 MiB"):
    print(" ", verdict(ms(best, "step"), ms(other, "step"), names=(best, other), better="lower", log=True,
                       unit=" ms").text)


# %% [markdown]
# Why both ends *can* lose (the verdicts above say whether they did here). **Many small
# messages** each pay a start-up, lesson 03's alpha; the start-ups alone are far less than the gaps
# measured here (the link cell printed them), so on this machine something else weighs more: many
# collectives queued one behind another on the core backward is using. **One huge bucket** cannot
# leave before backward's last gradient is written, so nothing overlaps: it is the fused all-reduce
# after backward again. Between them, a bucket leaves early enough to travel while the rest of
# backward computes. On a CPU the overlap is partial at best: gloo's copies and additions need a
# core, the same core backward is using.

# %% [markdown]
# The timeline of one step per way (the last step of the last round; the table above gives the
# spread), from the ranks' own records: blue is forward and backward, each green bar one bucket from
# its launch to the moment the rank's wait for it returned (queued or travelling: the record cannot
# tell which), red the wait after backward. The part of a green bar within the blue span was
# launched while the rank computed.

# %% tags=["nbval-ignore-output"]
timelines = {name: exposed.bucket_timeline(sweep, name) for name in summary if summary[name]["exposed"]
             and name not in ("by_hand", "fused")}
for name, timeline in timelines.items():
    print(f"{name:22} {exposed.overlapped_share(timeline):4.0%} of the buckets' time from launch to wait lay inside "
          "backward")
pictures.timeline_explorer(timelines)

# %% [markdown]
# ## 4. Accumulating micro-batches: send once
#
# With gradient accumulation, `m` micro-batches add into `.grad` before one update. Sending after
# every micro-batch's backward would all-reduce every gradient `m` times; the hooks are armed only
# for the last one (DDP's `no_sync` does the same). The five-axis transformer of lessons 12-13 on
# its data axis, with buckets of at most ten kilobytes (several buckets even for this small model)
# and four micro-batches, counts what left.
#
# **Predict:** how many bytes leave a rank per step: one gradient's, or four?

# %%
from distlab.parallelize import trainer

LINE = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=4, lr=0.05, optimizer="sgd", seed=0,
            test_lines=32, progress="none")
accumulated = distlab.launch(trainer.train, world_size=2, data=2, micro_batches=4, method="buckets", bucket_mb=0.01,
                             **LINE)
gradient_bytes = sum(p.numel() * p.element_size() for p in accumulated[0].params.values())
sent = [sum(b["bytes"] for b in step) for step in accumulated[0].buckets]
print(f"gradient: {gradient_bytes:,} bytes; sent per step: {sorted(set(sent))} bytes in "
      f"{len(accumulated[0].buckets[0])} buckets; after every micro-batch it would be {4 * gradient_bytes:,}")
reference = trainer.train_single(world_size=2, data=2, micro_batches=4, method="buckets", bucket_mb=0.01,
                                 **{k: v for k, v in LINE.items() if k != "progress"})
difference = distlab.max_param_difference(trainer.assemble(accumulated), reference.params)
assert set(sent) == {gradient_bytes}, "a step sent other than one gradient's bytes"
assert difference < 1e-5, "the accumulated run's parameters are not one process's"
print("parameters against one process: within 1e-5 (the same steps)")

# %% [markdown]
# The byte count shows each bucket left once a step. That the hooks waited for the *last*
# micro-batch is shown by the parameters: a bucket sent after the first micro-batch would carry a
# quarter of the sum, and the steps would part from one process's.

# %% [markdown]
# ## 5. The ring's hops, hidden
#
# Lesson 12's ring attention, as first written, passed each rank's K/V block to the next rank only
# *after* the block it held was used, so every hop was waited for in full (`overlap=False`; the
# library now posts first by default). Ring attention's point (Liu et al. 2023; Hugging Face's
# minimal trainer [picotron](https://github.com/huggingface/picotron) posts its hops this way too)
# is to **post** the next hop's exchange, compute with the block held, and only then wait: a hop's
# compute grows with the square of the block's tokens, its transfer only with the tokens, so past
# some block size the transfer hides.
#
# **Predict:** at `1024` tokens a rank (4 heads of 16 dimensions each; with 2 ranks, one hop forward
# and one back), does posting the hop first make a step clearly faster than sending it after?

# %% tags=["nbval-ignore-output"]
from distlab.context import ring_overlap

TOKENS = 1024
ring = ring_overlap.measure(tokens=TOKENS, heads=4, head_dim=16, repeats=5)
for way in ring_overlap.WAYS:
    print(f"{way:10}: step {statistics.median(r[way]['step_s'] for r in ring) * 1e3:6.1f} ms, waited for hops "
          f"{statistics.median(r[way]['wait_s'] for r in ring) * 1e3:5.1f} ms (median of the ranks' medians)")
slowest = {way: [max(x) * 1e3 for x in zip(*(r[way]["step_runs"] for r in ring))] for way in ring_overlap.WAYS}
print(verdict(slowest["overlapped"], slowest["serial"], names=("overlapped", "serial"), better="lower", log=True,
              unit=" ms").text, "(each repeat one forward and backward, the slower rank's)")
print("the two ways gave the same bits:", all(r["identical"] for r in ring))
rate = ring[0]["flops"] / ring[0]["serial"]["compute_s"]
hides = ring_overlap.hiding_tokens(4, 16, link, rate)
print(f"attention computed at {rate / 1e9:.1f} GFLOP/s here: the model says a hop hides from "
      f"{hides['both']} tokens a rank (forward {hides['forward']}, backward {hides['backward']})")
assert all(r["identical"] for r in ring)

# %% [markdown]
# The model's threshold uses section 3's link and the attention rate the ranks reached (far below
# the matrix-product peak: the products have an inner dimension of only 16, and the softmax's work
# is timed but not counted). Posting first can remove at most the serial way's wait: a larger step
# gap is something else (noise, or the order the ways ran in). What the overlapped ranks still wait
# for is not only bytes in flight: a hop cannot arrive before the neighbour has finished its own
# block, so a rank that computed faster waits for a slower one.

# %% [markdown]
# ## 6. When can communication hide?
#
# The Ultra-Scale Playbook (appendix A3) compares, for three kinds of parallelism, the time a
# collective takes with the compute it could hide behind: data parallelism's all-reduce against
# backward, ZeRO-3's all-gather of the next layer against this layer's forward, tensor
# parallelism's all-gather against the next matrix product. The scaling-book (Austin et al. 2025,
# "How to parallelize a transformer for training") turns the first into a rule: data parallelism
# stays compute-bound when the tokens each device processes per step exceed its FLOP/s over its
# link's bandwidth (both directions of a ring that sends both ways; this course's ring sends one
# way, which doubles the tokens). `distlab.predict.overlap_conditions` writes them with lesson 03's
# alpha-beta.
#
# **Predict:** a 7B model, 4,096 tokens per GPU in bf16, eight H100s: which of the three hide
# inside one node? Across nodes?

# %%
from distlab.predict import overlap_conditions as oc

H100 = R.HARDWARE["H100 SXM"]
WIDE_MLP_PARAMS = sum(p.numel() for p in runs["the wide MLP of section 3"].params.values())
# the first column ("this machine") is not wanted here: a placeholder link and peak, its column dropped by [1:]
seven_b = oc.where_it_hides(oc.datasheet_link(1e9), 1e11, params=6.74e9, layer_params=202e6, d_model=4096,
                            tokens=4096, degree=8, gpu=H100, itemsize=2)
places = [key for key in seven_b[0] if key not in ("parallelism", "hidden behind", "ratio")][1:]
print(f"{'7B, bf16, 4,096 tokens a GPU, 8 GPUs':38}" + "".join(f"{p:>24}" for p in places))


def said(row, place):
    return f"{'hides' if row[place] else 'exposed'} ({row['ratio'][place]:.2f})"


for row in seven_b:
    print(f"{row['parallelism']:38}" + "".join(f"{said(row, p):>24}" for p in places))
print("(communication / compute in brackets; hides when at most 1)")

# %% [markdown]
# The ratios are arithmetic, so they hold on any machine with these datasheet figures. Data
# parallelism and ZeRO-3 move bytes in proportion to the parameters and compute in proportion to
# parameters times tokens: with enough tokens a GPU they hide inside a node, and across nodes, with
# a ninth of the bandwidth, they need nine times the tokens. Tensor parallelism's ratio does not
# shrink with tokens (its bytes grow with them too): at the datasheet peak its all-gather is exposed
# even over NVLink, though far less than across nodes, which is why it is kept inside a node. The
# same test for section 3's wide MLP, with this machine's link and one core's peak (a rank has one
# core):

# %% tags=["nbval-ignore-output"]
core = peaks[("float32", 1)]
mine = oc.where_it_hides(link, core, params=WIDE_MLP_PARAMS, layer_params=512 * 512, d_model=512,
                         tokens=exposed.MODEL["batch_size"], degree=2, gpu=H100, itemsize=4)
here = [key for key in mine[0] if key not in ("parallelism", "hidden behind", "ratio")][0]
print(f"{'the wide MLP, fp32, 64 samples a rank, 2 ranks':48}{here:>20}")
for row in mine:
    print(f"{row['parallelism']:48}{said(row, here):>20}")
tokens_needed = oc.min_tokens_data_parallel(WIDE_MLP_PARAMS, 2, link, core, itemsize=4)
print(f"data parallelism would hide here from about {tokens_needed:,.0f} samples a rank")
dp_model = oc.data_parallel_overlap(WIDE_MLP_PARAMS, exposed.MODEL["batch_size"], 2, link, core, itemsize=4)
print(f"the condition's times: all-reduce {dp_model['comm_s'] * 1e3:.1f} ms, forward and backward "
      f"{dp_model['compute_s'] * 1.5 * 1e3:.1f} ms (6 FLOPs a parameter and sample at one core's peak)")
print(f"section 3 measured: the fused way's exposed wait (its all-reduce, and waiting for the slower rank) "
      f"{statistics.median(summary['fused']['exposed']) * 1e3:.1f} ms, forward and backward "
      f"{statistics.median(summary['fused']['compute']) * 1e3:.1f} ms")

# %% [markdown]
# Set the condition's times beside the measured ones: the condition prices the all-reduce with
# lesson 03's link and the compute at one core's peak, while section 3's ranks reached neither (the
# cell above prints both). On a CPU the all-reduce also needs the core that backward is using, a
# cost no condition here counts. On a GPU, NCCL's collectives run as kernels on a few of the GPU's
# streaming multiprocessors, on a stream of their own beside the compute: they still take some of
# the GPU's cores and memory bandwidth, which no condition here counts either.

# %% [markdown]
# ## 7. Filling the bubble: zero-bubble pipelines
#
# Lesson 06's 1F1B leaves each stage idle for `p - 1` forward-plus-backward slots a step, split
# between filling and draining. Backward does two jobs: the gradient of the stage's *input* (**B**),
# which the previous stage is waiting for, and the gradients of its *weights* (**W**), which nobody
# waits for until the update. **ZB-H1** (Qi et al. 2024, "Zero Bubble Pipeline Parallelism") sends B
# back at once and defers some W passes into the cool-down, where 1F1B idles. With forward, B and W
# each one pass-time (`T_F = T_B = T_W`), a stage is busy `3m` of them and idles `p - 1` instead of
# 1F1B's `3(p - 1)`, with 1F1B's peak memory (ZB-H2 fills the rest, with more memory).
#
# **Predict:** two stages, four micro-batches: what share of the step does each schedule idle, by
# the formulas (`predict.bubbles`)?

# %%
from distlab.pipeline import zero_bubble
from distlab.predict import bubbles

P, M = 2, 4
print(f"1F1B  (p - 1) / (m + p - 1)              = {bubbles.bubble_fraction(P, M):.3f}")
print(f"ZB-H1 with T_F = T_B = T_W (Qi et al.)    = {bubbles.zb_h1_bubble_fraction(P, M):.3f}")

# %% [markdown]
# Now on real ranks, four rounds of each schedule side by side (a three-layer MLP of width 512, cut
# into two stages). Beside each measured bubble: the textbook's; the simulation with the run's own
# pass times and free messages; and the simulation with the run's measured costs
# (`distlab.pipeline.zero_bubble`): each receive as gloo's rendezvous (it starts only when both
# sides are ready), the time between passes, each cost drawn from the run's own.

# %% tags=["nbval-ignore-output"]
PIPE = dict(model="mlp", width=512, depth=3, global_batch_size=128, micro_batches=M, steps=8, lr=0.01)
pipe = zero_bubble.summarise_rounds(distlab.launch(zero_bubble.rounds, world_size=P, schedules_=("1f1b", "zb_h1"),
                                                   rounds=4, progress="none", **PIPE))
print(f"{'schedule':9} {'measured':>9} {'textbook':>9} {'simulated':>10} {'+ costs':>8} {'per message':>12} "
      f"{'step':>9}")
for name in ("1f1b", "zb_h1"):
    for row in pipe:
        c = row[name]
        print(f"{name:9} {c['measured']:9.3f} {c['textbook']:9.3f} {c['simulated']:10.3f} {c['with_messages']:8.3f} "
              f"{c['message_s'] * 1e3:9.2f} ms {c['step_s'] * 1e3:6.1f} ms")
activation = PIPE["global_batch_size"] // M * PIPE["width"] * 4
print(f"lesson 03's model for one activation ({activation:,} bytes): {link.message_seconds(activation) * 1e3:.2f} ms")
print("bubble:", verdict([row["zb_h1"]["measured"] for row in pipe], [row["1f1b"]["measured"] for row in pipe],
                         names=("zb_h1", "1f1b"), better="lower").text)
print("step:", verdict([row["zb_h1"]["step_s"] * 1e3 for row in pipe], [row["1f1b"]["step_s"] * 1e3 for row in pipe],
                       names=("zb_h1", "1f1b"), better="lower", log=True, unit=" ms").text)

# %% [markdown]
# Read the columns against each other: the simulation with free messages stays near the textbook,
# and the gap to the measured bubble is what the run's costs must explain. A message here costs far
# more than lesson 03's model of one activation (printed above): gloo's receive waits for both sides,
# and a send from a rank that is computing waits for its core. A lower bubble is not by itself a
# shorter step (ZB-H1 runs more, smaller passes): the step has its own verdict. PyTorch's own
# zero-bubble schedules (`ScheduleInterleavedZeroBubble`, `ScheduleZBVZeroBubble`,
# `ScheduleDualPipeV`) run through `distlab.pipeline.torch_pipeline` on the same ranks and give the
# same parameters as one process (tested in `tests/test_zero_bubble.py`).

# %% [markdown]
# ## 8. One step under the profiler
#
# The records so far are the ranks' own clock readings. `torch.profiler` sees far more: every
# operator of the main thread, and every collective on gloo's own threads (not the rank's wait for
# it, nor the Python between operators). One step of two ranks with section 3's best bucket cap,
# traced on both (`distlab.measure.traces`), written as files that [Perfetto](https://ui.perfetto.dev)
# opens, and drawn here from the trace itself.
#
# **Predict:** will the trace's exposed time be larger or smaller than the rank's own record, and why?

# %% tags=["nbval-ignore-output"]
import tempfile

from distlab.measure import traces
from distlab.widgets import traces as trace_pictures

TRACES = tempfile.mkdtemp(prefix="distlab-lesson15-")
traced = distlab.launch(traces.train, world_size=2, **ways[best], steps=4, trace_step=2, trace_dir=TRACES,
                        progress="none", **exposed.MODEL)
read = [traces.read_trace(traces.trace_path(TRACES, rank)) for rank in (0, 1)]
from_trace = traces.exposed_by_rank(read)
for r in traced:
    step = r.steps[2]
    print(f"rank {r.rank}: exposed communication {from_trace[r.rank] * 1e3:.1f} ms in the trace, "
          f"{(step.t_comm_end - step.t_comm_start) * 1e3:.1f} ms in the rank's own record")
print("trace files:", *(traces.trace_path(TRACES, rank) for rank in (0, 1)))
show(trace_pictures.trace_figure(traces.timeline(read), from_trace))

# %% [markdown]
# The trace and the record agree up to what the record counts and the trace does not call
# communication: copying each bucket's averages back into `.grad`, and the Python between the waits.
# Open a file in Perfetto to see the `gloo:all_reduce` spans on gloo's threads beside backward's
# operators.

# %% [markdown]
# ## Exercises
#
# **1.** Four pipeline stages, eight micro-batches, forward, B and W each one pass-time. What share
# of the step does ZB-H1 leave idle? (1F1B's would be `(p - 1) / (m + p - 1)`.)

# %%
from distlab.course import exercises_overlap, exercises_time

my_bubble = ...      # a fraction between 0 and 1

exercises_time.zb_h1_bubble(my_bubble, stages=4, micro_batches=8)

# %% [markdown]
# **2.** A 7-billion-parameter model, bf16 gradients all-reduced with a ring over 64 GPUs, each with
# `50e9` bytes/s of network each way and a `989e12` FLOP/s peak, latency left out. Backward computes
# 4 FLOPs a parameter and token. From how many tokens per GPU does backward last as long as the
# all-reduce?

# %%
my_tokens = ...      # tokens per GPU per step

exercises_time.tokens_to_hide(my_tokens, params=7e9, ranks=64, bandwidth=50e9, flops=989e12)

# %% [markdown]
# **3. Build it: buckets sent during backward.** Write `attach_buckets(model, worker, cap_bytes)`:
# cut the parameters into buckets of at most `cap_bytes`, in the order backward writes their
# gradients (the model's order reversed; a tensor larger than the cap goes alone); register a hook
# on each parameter (`p.register_post_accumulate_grad_hook(fn)`, `fn(p)` called once `p.grad` is
# written) that, when the next bucket is full, lays its gradients end to end (`torch.cat`) and
# launches `worker.all_reduce(flat, op="avg", async_op=True)` (it averages `flat` in place); return
# `finish()`, which waits for each bucket (`.wait()`), copies the averages back into each `.grad`,
# and resets your counts (it runs after every step's backward). Fill each bucket in order until the
# next tensor would overflow it, and launch buckets in order: every rank must start its collectives
# in the same order. The checker trains on 2 real ranks with yours and with the library's buckets.

# %%
def attach_buckets(model, worker, cap_bytes):
    """Hooks that send each full bucket during backward; returns finish(), called after backward."""
    ...


exercises_overlap.buckets(attach_buckets)

# %% [markdown]
# ## What we measured
#
# | question | printed in |
# |---|---|
# | this machine's peaks, bandwidth and ridge | section 1 |
# | each run's intensity, FLOP/s and MFU | section 2, on the roofline |
# | exposed communication of each way to send gradients | section 3, judged over rounds |
# | bytes sent with accumulated micro-batches | section 4, against one process |
# | serial and overlapped ring hops, and the block that hides | section 5 |
# | what hides where, by the Playbook's conditions | section 6 |
# | 1F1B and ZB-H1 bubbles, measured and predicted | section 7, judged over rounds |
# | exposed communication in a profiler trace | section 8, against the rank's record |
#
# Every lever here is a module plugged into the same run: the overlapped reducer is the one
# gradient reducer's method, ZB-H1 is one more schedule, the ring's overlap a switch (`overlap=`) of the same
# context split; nothing forks the training loop.

# %% [markdown]
# **For the insurance company.** Renting more GPUs buys speed only as far as the communication
# hides. Whether it hides is arithmetic before it is a measurement: the FLOPs a GPU does per byte it
# must exchange (section 6). On this laptop-sized machine much of the communication stayed exposed
# (section 3), one reason a second worker paid little in lesson 05 (the other: a rank's compute did
# not halve); on a GPU node, with enough tokens per GPU and
# tensor parallelism kept inside the node, gradients and parameters travel behind the compute. MFU
# is the number to ask a provider's benchmark for.

# %% [markdown]
# **Read further.** Williams, Waterman and Patterson, *Roofline* (2009),
# [doi:10.1145/1498765.1498785](https://doi.org/10.1145/1498765.1498785); Chowdhery et al., *PaLM*
# (2022), appendix B on MFU, [arXiv:2204.02311](https://arxiv.org/abs/2204.02311); Li et al., *PyTorch
# Distributed* (2020), [arXiv:2006.15704](https://arxiv.org/abs/2006.15704); Qi et al., *Zero Bubble
# Pipeline Parallelism* (2024), [arXiv:2401.10241](https://arxiv.org/abs/2401.10241); Liu et al., *Ring
# Attention* (2023), [arXiv:2310.01889](https://arxiv.org/abs/2310.01889); the
# [Ultra-Scale Playbook](https://huggingface.co/spaces/nanotron/ultrascale-playbook), appendix A3; Austin
# et al., [How to Scale Your Model](https://jax-ml.github.io/scaling-book/) (2025), its chapter on
# training; Horace He, [Making Deep Learning Go Brrrr From First Principles](https://horace.io/brrr_intro.html).

# %% [markdown]
# **Previous:** [14 · Fitting more: precision, recomputation and offload](14_fitting_more.ipynb) · [The course: map, glossary, solutions](../course/README.md)
