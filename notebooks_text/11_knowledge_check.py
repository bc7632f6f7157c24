# %% [markdown]
# # Lesson 11 · What did you find? A knowledge check, and the answer for the insurance company
#
# **Goal of this lesson.** The insurance company asked: *does more data, trained on more workers,
# give a more accurate model, and does distributing the training help?*
# The lessons before this one measured pieces of the answer on real processes. This one
#
# 1. checks what you took from lessons 01 to 10 (and 12, 13 if you took them) with short
#    questions, several about **your own runs**: the checkers read what lessons 01, 04, 05, 08 and
#    10 stored when you ran them (`distlab.course.results`, a small file in your home folder), so
#    your right answers may differ from your neighbour's; sections 14 and 16 also read 05b;
# 2. draws your measurements across the course in one figure;
# 3. puts them together into the answer for the company.

# %% [markdown]
# Run the lessons first; a question about a skipped lesson says which one to run. Everything below
# comes from **one sitting**: the results your lessons kept since the results file
# began (or since `course_results.new_sitting()`). A lesson last run in another sitting is named, not
# quoted, so this lesson never mixes a Tuesday run with a Friday one.

# %% tags=["nbval-ignore-output"]
from distlab.course import results as course_results
from distlab.course import knowledge_check as check

stored = course_results.this_sitting()
print(f"sitting {course_results.sitting()}: lessons with results (and when each ran):",
      ", ".join(f"{k} ({v.get('when', '?')})" for k, v in sorted(stored.items())) or "none yet")
elsewhere = sorted(set(course_results.load()) - set(stored))
if elsewhere:
    print("from another sitting, not used here (run them again):", ", ".join(elsewhere))

# %% [markdown]
# ## 1. Dividing the work (lessons 01, 06, 08)
#
# For each situation, which way of dividing the work does it call for: `"data"` (data
# parallelism), `"model"` (pipeline or tensor parallelism) or `"zero"` (sharding what every rank copies)?

# %%
my_choices = {"the data takes too long on one worker": ...,
              "the model does not fit in one worker's memory": ...,
              "the optimizer's state does not fit, the model does": ...}
check.which_parallelism(my_choices)

# %% [markdown]
# ## 2. One global update (lesson 01)
#
# In lesson 01 your ranks averaged their gradients at every step. Did they train like one process
# on the whole global batch, up to floating-point rounding (parameters within 1e-5), `True` or
# `False`? Your run's numbers:

# %% tags=["nbval-ignore-output"]
lesson01 = course_results.recall("01")
print(lesson01)

# %%
my_same = ...
check.same_as_one_big_batch(my_same, lesson01)

# %% [markdown]
# ## 3. Horovod (lesson 02)
#
# A step's six gradient tensors all become ready within one of Horovod's cycles, and together they
# fit in its fusion buffer. How many all-reduces does Horovod run for them?

# %%
my_all_reduces = ...
check.horovod_fusion(my_all_reduces, tensors=6)

# %% [markdown]
# ## 4. Parameter server or all-reduce (lesson 03)
#
# As the number of ranks grows, whose busiest link carries more bytes per step: the
# `"parameter server"`'s or a `"ring"` rank's?

# %%
my_busiest = ...
check.busiest_link(my_busiest)

# %% [markdown]
# ## 5. Synchronisation (lesson 04)
#
# In lesson 04 one rank was made slower by a fixed delay per step. How many **seconds** longer,
# per step, did the *fast* rank wait in your run? Predict it from the delay, then look:

# %% tags=["nbval-ignore-output"]
lesson04 = course_results.recall("04")
print({k: v for k, v in (lesson04 or {}).items() if k in ("straggler_seconds", "when")})   # the delay, not the answer

# %%
my_wait = ...
check.straggler_wait(my_wait, lesson04)

# %% [markdown]
# ## 6. Speedup and overhead (lesson 05)
#
# Lesson 05 measured three regimes on 1 and 2 ranks (`worst`, `probe`, `best`: how much
# each step computes against its all-reduce). Which one had the **highest median speed-up** of 2
# ranks over one process in your run? A median names a leader, not a winner, and it need not be a
# gain: section 18 (the answer for the insurance company) says which regimes the rule calls clear.

# %% tags=["nbval-ignore-output"]
lesson05 = course_results.recall("05")
print(lesson05)

# %%
my_regime = ...
check.best_regime(my_regime, lesson05)

# %% [markdown]
# ## 7. Pipelines (lesson 06)
#
# Same stages, same micro-batches: what does the 1F1B schedule shrink against GPipe, the idle
# `"bubble"` or the activation `"memory"` the first stage holds?

# %%
my_shrinks = ...
check.pipeline_schedule(my_shrinks, stages=4, micro_batches=8)

# %% [markdown]
# ## 8. Tensor parallelism (lesson 07)
#
# Double the batch of lesson 07's MLP block. Whose bytes per step grow: `"tensor"` parallelism's
# (the block split across ranks) or `"data"` parallelism's (a copy of the block on each rank)?

# %%
my_grows = ...
check.tensor_parallel_traffic(my_grows, width=512)

# %% [markdown]
# ## 9. ZeRO (lesson 08)
#
# How many times less memory did rank 0 hold at ZeRO stage 3 than at stage 0 in your run
# (parameters, gradients and optimizer state together)?

# %% tags=["nbval-ignore-output"]
lesson08 = course_results.recall("08")
print(lesson08)

# %%
my_saving = ...
check.zero3_saving(my_saving, lesson08)

# %% [markdown]
# Now the ZeRO paper's accounting: Adam in mixed precision holds 16 bytes per parameter on every
# rank (2 of fp16 weights, 2 of gradient, 12 of optimizer state). How many bytes per parameter
# does each of **8** ranks hold at **ZeRO-2**?

# %%
my_bytes = ...
check.zero2_bytes_per_parameter(my_bytes, world_size=8)

# %% [markdown]
# ## 10. A cluster or a cloud (lesson 09)
#
# Which `distlab` command writes an Azure Machine Learning job for the config `run.yaml`? Like the
# config lesson 09 wrote, it names no container image yet; the image to use is
# `myregistry.azurecr.io/distlab:0.1`. The checker runs your command for real, in a scratch
# folder holding such a `run.yaml`, so any spelling distlab accepts is right.

# %%
my_command = ...
check.azure_ml_command(my_command)

# %% [markdown]
# A `run.yaml` says `launch.nodes: 2`, `launch.processes_per_node: 4` and
# `training.global_batch_size: 96`. How many samples does each rank compute per step?

# %%
my_batch = ...
check.per_rank_batch_from_config(my_batch, nodes=2, processes_per_node=4, global_batch_size=96)

# %% [markdown]
# ## 11. Failure at scale (lesson 10)
#
# How many training steps did the worker you killed in lesson 10 cost the job: how many did the
# job train twice?

# %% tags=["nbval-ignore-output"]
lesson10 = course_results.recall("10")
print({k: v for k, v in (lesson10 or {}).items() if k in ("reached", "resumed_from", "when")})   # not the answer

# %%
my_cost = ...
check.failure_cost(my_cost, lesson10)

# %% [markdown]
# Each machine fails on average once in 3 years, at random. How many **hours** pass, on average,
# between two failures of a job that needs all of 512 such machines?

# %%
my_hours = ...
check.job_hours_between_failures(my_hours, machines=512, years_between_failures=3)

# %% [markdown]
# ## 12. Long lines (lesson 12, optional: skip if you have not taken it yet)
#
# For each trouble with a transformer on long lines, which split answers it: `"tensor"`
# parallelism (heads and MLP units across ranks), `"sequence"` parallelism (the line in pieces
# between the split regions) or `"context"` parallelism (the line in pieces through the whole block)?

# %%
my_splits = {"one block's weights and heads are too much work for one rank": ...,
             "every tensor rank keeps the same LayerNorm activations of the whole line": ...,
             "the attention of one line no longer fits in one rank's memory": ...}
check.long_line_split(my_splits)

# %% [markdown]
# ## 13. Experts (lesson 13, optional: skip if you have not taken it yet)
#
# For each trouble with a mixture of experts, what answers it: a `"capacity"` (each expert takes
# at most so many requests from a group, the rest are dropped), the `"balancing loss"` (added to the
# training loss, smallest when the experts share the tokens evenly) or `"expert parallelism"` (the
# experts spread over ranks, the tokens sent to them with all-to-all)?

# %%
my_fixes = {"the router sends most tokens to the same few experts": ...,
            "each expert's buffer needs a size known before the tokens are routed": ...,
            "the experts together hold more parameters than one rank can keep": ...}
check.expert_troubles(my_fixes)

# %% [markdown]
# ## 14. Fitting more (lesson 14, optional: skip if you have not taken it yet)
#
# For each trouble of a rank running out of memory or precision, which lever answers it: `"loss
# scaling"`, `"selective recomputation"`, `"full recomputation"`, `"offload"` or `"bf16 master
# weights"`? One of the five answers none of them.

# %%
my_levers = {"in fp16 the smallest gradients become zero": ...,
             "the attention probabilities of long lines fill the accelerator's memory": ...,
             "every block's activations, not only attention's, fill the accelerator's memory": ...,
             "Adam's moments and the fp32 master copy do not fit, and the host has memory to spare": ...}
check.memory_levers(my_levers)

# %% [markdown]
# ## 15. Where the time goes (lesson 15, optional: skip if you have not taken it yet)
#
# For each place a step loses time, which lever wins it back: `"buckets"`, `"zero bubble"`, `"post
# the hop first"`, `"no_sync"` or `"one bucket as large as the model"`? One of the five answers none.

# %%
my_time_levers = {"the gradients' all-reduce starts only once backward has ended": ...,
                  "a pipeline's stages idle in the cool-down of every step": ...,
                  "each ring-attention hop is waited for in full before its block is used": ...,
                  "gradient accumulation all-reduces every gradient after each micro-batch": ...}
check.time_levers(my_time_levers)

# %% [markdown]
# ## 16. Build it: the rule behind every verdict
#
# Every winner this course named came from lesson 01's rule. Write it: `my_verdict(a, b, margin)`
# gets two lists of independent runs, higher is better, and the smallest gap that matters; it
# returns `"a"`, `"b"` or `None` (no clear difference). At least 3 runs a side; with
# `v = s²/n` for each side (`s²`: the sample variance), the gap of the means must exceed the 99%
# interval `t · sqrt(v_a + v_b)`, where `t = distlab.verdict.t_quantile(df)` at Welch's
# `df = (v_a + v_b)² / (v_a²/(n_a − 1) + v_b²/(n_b − 1))`, and exceed `margin`. The checker
# asks your function about made-up runs that catch the usual mistakes, then about this sitting's
# runs of lessons 05 and 05b (as logarithms, as the course judged them), against `distlab.verdict`.

# %%
import math          # noqa: F401  (for your function)
import statistics     # noqa: F401

from distlab.course import exercises_verdict
from distlab.verdict import t_quantile     # noqa: F401


def my_verdict(a, b, margin):
    ...   # "a", "b" or None


exercises_verdict.verdict_rule(my_verdict, stored)

# %% [markdown]
# ## 17. Your course in one picture
#
# Every panel is what one lesson stored when you ran it; a lesson you have not run says so.
# Read it before the answer below: what did distributing change in the result, what did it cost,
# and what did it buy?

# %% tags=["nbval-ignore-output"]
from distlab.widgets.course import course_figure
from distlab.widgets.display import show

show(course_figure(stored))

# %% [markdown]
# ## 18. The answer for the insurance company
#
# Built from what **you** measured (each line says which lesson it comes from; a lesson you
# did not run is named instead of a number):

# %% tags=["nbval-ignore-output"]
def line(lesson, text):
    found = stored.get(lesson)
    print(f"- lesson {lesson}: " + (text(found) if found else "not run in this sitting: run it to fill in this line"))


line("01", lambda r: f"distributing does not change what is learned: {r['world_size']} ranks ended "
                     f"{r['max_param_difference']:.1e} from one big-batch process; test accuracy "
                     f"{r['test_accuracy']['ranks']:.3f} against {r['test_accuracy']['one_process']:.3f}.")
from distlab.verdict import against


def speed(r):
    """Lesson 05's speed-ups, each judged by the course's one rule over its repeats."""
    runs = r.get("speedup_2_ranks_runs", {})
    parts = []
    for k, v in r["speedup_2_ranks"].items():
        said = against(runs[k], 1.0, names=("2 ranks", "1 process"), log=True) if k in runs else None
        word = ("no verdict: no repeats stored" if said is None else "a clear gain" if said.winner == "2 ranks"
                else "a clear loss" if said.winner else "no clear difference")
        parts.append(f"{k} {v:.2f} ({word})")
    text = "speed-up of 2 ranks over one process, median of the repeats: " + ", ".join(parts)
    if "compute_ratio_2_ranks" in r:
        text += ("; each rank's compute per step at 2 ranks, over one process's: "
                 + ", ".join(f"{k} {v:.2f}" for k, v in r["compute_ratio_2_ranks"].items()) + " (ideal 0.50)")
    return text


def more_data(r):
    """Lesson 05b's answer: its curve's verdicts (the one rule, over seeds) and the time to target."""
    curve, timed = r.get("curve"), r.get("time_to_target")
    if not curve or not timed:
        return "more data: not measured yet: run lesson 05b to fill in this line"
    ends = {v["dataset"]: v for v in curve["verdicts"]}     # each data set's last: smallest against largest
    mean = {(m["dataset"], m["samples"]): m["mean"] for m in curve["summary"]}
    epochs = {"mnist_5k": curve["epochs"], "distorted_mnist_5k": curve.get("distorted_epochs", curve["epochs"])}
    text = "; ".join(f"{d} ({epochs.get(d, '?')} epochs): {v['small']:,} -> {v['large']:,} training digits"
                     + (" (the real 4,000 and distorted copies of them)" if d.startswith("distorted") else "")
                     + f", test accuracy {mean[d, v['small']]:.1%} -> {mean[d, v['large']]:.1%} "
                     f"(means over seeds): {v['said']}" for d, v in ends.items())
    return (f"more data: {text}; to {timed['target']:.0%} test accuracy, 2 ranks against 1: {timed['sooner']}")


line("05b", more_data)
line("05", lambda r: f"whether it pays depends on each step's compute against the all-reduce's cost (its "
                     f"messages' latency and its bytes) and on whether the compute really splits: in your run "
                     f"{speed(r)}.")
line("04", lambda r: f"every rank waits for the slowest: a rank {r['straggler_seconds'] * 1e3:.0f} ms slower made "
                     f"the others wait {r['extra_wait_of_rank_0'] * 1e3:.0f} ms more per step.")
line("08", lambda r: "when the model's training state no longer fits, ZeRO-3 held "
                     f"{r['bytes_held_by_rank_0']['0'] / r['bytes_held_by_rank_0']['3']:.1f} times less per rank.")
line("10", lambda r: f"at scale failures are normal: a killed worker cost {r['steps_redone']} steps trained "
                     f"again, after a restart of {r['seconds_to_restart']:.1f} s, and the run still ended where it would have "
                     f"(difference {r['largest_difference']:.1e}).")

# %% [markdown]
# So: at the same global batch and learning rate, the number of workers does not change what is
# learned (lesson 01); adding workers at a fixed batch per rank grows the global batch, which can
# change it (Goyal et al. 2017; lesson 05, section 5, measured it on the digits). Whether a larger
# training set bought accuracy in your run is the more-data line above, judged by the rule's 99%
# interval over seeds. In one line each, from the verdicts of this sitting:

# %% tags=["nbval-ignore-output"]
def answer(r05, r05b):
    """The company's two questions, answered only from this sitting's verdicts."""
    if not (r05 and r05b and r05b.get("curve") and r05b.get("time_to_target")):
        return "run lessons 05 and 05b first: the answer is built from their verdicts"
    said = r05b["curve"]["verdicts"]
    runs = r05.get("speedup_2_ranks_runs", {})
    gains = [k for k in runs if against(runs[k], 1.0, names=("2 ranks", "1 process"), log=True).winner == "2 ranks"]
    data = "more data, by the rule over seeds: " + "; ".join(
        f"{v['small']:,} -> {v['large']:,} {v['dataset']}: {v['said']}" for v in said)
    ranks = (f"a second worker was clearly faster in: {', '.join(gains)}" if gains else
             "a second worker was clearly faster in none of lesson 05's regimes")
    sooner = r05b["time_to_target"]["sooner"].split(" (")[0]
    return f"{data};\n{ranks}; reaching {r05b['time_to_target']['target']:.0%} on 2 workers: {sooner}."


print(answer(stored.get("05"), stored.get("05b")))

# %% [markdown]
# ## Summary
#
# What the mechanisms say beyond this machine: more workers reach an accuracy *sooner* only when
# one worker is too slow, **and** each step computes long enough to outweigh the all-reduce's cost
# (its messages' latency and its bytes), **and** each rank's compute really splits, **and** the
# larger global batch still learns as much per sample (below its critical size). Compare with one
# process using all the threads before distributing; shard with ZeRO or split the model when its
# state outgrows a worker; on a cluster, write the run down as a config and keep checkpoints,
# because something will fail.
#
# **Previous:** [10 · Failure is normal at scale](10_failure_is_normal_at_scale.ipynb) · **Next:** [12 · Long lines: splitting the heads and the sequence](12_long_lines.ipynb) · [The course: map, glossary, solutions](../course/README.md)
