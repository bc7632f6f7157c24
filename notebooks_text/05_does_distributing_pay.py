# %% [markdown]
# # Lesson 05 · Does distributing pay?
#
# **Goal.** The insurance company asks the question that matters to whoever pays for the
# machines: *if we train on two workers instead of one, is it twice as fast?* By the end you can
# answer from measurements made on this machine a minute ago:
#
# 1. the **speedup** of N ranks over one process, and where a step's time goes;
# 2. **which regime has a chance to pay**, and which gained here today;
# 3. what **Amdahl's law** and the **alpha-beta model** predict, and where they fail;
# 4. what a larger global batch does to **accuracy**, with and without learning-rate scaling;
# 5. the **drawbacks** of distributed training, each with a number measured here.
#
# Whether **more data** buys accuracy, and whether two workers reach it sooner, is lesson 05b.

# %% [markdown]
# Everything is measured live on real worker processes. Other programs share the cores: read the
# numbers as "about", and rerun a cell to see how much they move.

# %% tags=["nbval-ignore-output"]
import inspect
import os
import time
import warnings

from distlab.measure import large_batch, scaling, speedup
from distlab.predict import alpha_beta, flops, traffic
from distlab.predict import speedup as predicted
from distlab.data_parallel import data_parallel
from distlab.widgets import speedup as pictures
from distlab.widgets.display import show

print(f"this machine has {os.cpu_count()} CPU cores")

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. Predict first: how much work per byte?
#
# Every step, each rank computes on its own mini-batch (work that **shrinks** as ranks are
# added: N ranks share the global batch) and then all-reduces its **whole** gradient (work that
# does **not** shrink). So the question is how much arithmetic a step does for each byte it must
# send. We count it, without timing anything: training costs about three forward passes.
#
# The three configurations of this lesson (global batch = what all ranks together process per
# step):

# %%
REGIMES = speedup.REGIMES
print(f"{'regime':<7}{'configuration':<24}{'gradient':>10}{'FLOPs/sample':>14}{'FLOPs/byte (2 ranks)':>22}")
for name, cfg in REGIMES.items():
    per_rank = cfg["global_batch_size"] // 2
    print(f"{name:<7}{cfg['model'] + str(cfg['width']) + ', global batch ' + str(cfg['global_batch_size']):<24}"
          f"{traffic.gradient_bytes(cfg['model'], cfg['width']) / 1e3:>8.0f}kB"
          f"{3 * flops.flops_per_sample(cfg['model'], cfg['width']):>14,}"
          f"{flops.compute_per_byte(cfg['model'], cfg['width'], per_rank):>22,.0f}")

# %%
intensity = {name: flops.compute_per_byte(cfg["model"], cfg["width"], cfg["global_batch_size"] // 2)
             for name, cfg in REGIMES.items()}
per_sample = {name: flops.flops_per_sample(cfg["model"], cfg["width"]) for name, cfg in REGIMES.items()}
print(f"per sample, the CNN computes {per_sample['best'] / per_sample['worst']:,.0f} times the small MLP's FLOPs; "
      f"per byte of gradient (at its larger batch) {intensity['best'] / intensity['worst']:,.0f} times")

# %% [markdown]
# The CNN's convolutions reuse each of their few weights at all 64 pixel positions, so it does
# far more arithmetic per sample than the small MLP (whose every weight is used once per sample);
# per byte of gradient the gap grows further, because the CNN's regime also takes a larger batch
# per step: both factors are printed above.
#
# **Your prediction.** For each regime, how many times faster will **2 ranks x 1 thread** train
# than **1 process x 1 thread** on this machine's two cores? (2.0 would be perfect.)

# %%
my_guess = {"worst": ..., "probe": ..., "best": ...}   # <- replace each ... by your guess

# %% [markdown]
# ## 2. Measure: strong and weak scaling on 1 and 2 ranks
#
# `scaling.run_scaling` launches one job per world size and trains every configuration back to
# back in it with lesson 01's `data_parallel.train` (start-up, several seconds per launch, is
# **not** in the throughput). Inside a launch the configurations take turns three times (three
# **repeats**, a few seconds apart); the first steps of each run are skipped (they pay for memory
# allocation). One process is launched twice: with **1 thread** (the per-core question) and
# with **2 threads** (one process using both cores: the single-machine alternative).
#
# * **strong** scaling: the global batch is fixed, N ranks split it (each rank's batch shrinks);
# * **weak** scaling: each rank's batch is fixed (here 448), N ranks process N times more per step.

# %% [markdown]
# From every rank's timeline (five time stamps per step, lesson 04), a step splits into
# **compute** (forward and backward), **waiting** (arrived at the all-reduce before the last
# rank did), **communication** (from the last arrival to the end of the all-reduce) and the
# **rest** (optimizer step, picking the batch).

# %% tags=["nbval-ignore-output"]
CONFIGS = [REGIMES["worst"], REGIMES["probe"], REGIMES["best"],
           dict(model="mlp", width=1024, batch_size=448)]          # weak scaling
started = time.time()
rows = scaling.run_scaling(CONFIGS, world_sizes=(1, 2), steps=8, skip=2, repeats=3)
elapsed = time.time() - started
print(f"3 launches in {elapsed:.0f} s\n")
print(pictures.speedup_table(rows))

# %% [markdown]
# *s/epoch* is the time for one pass over the 1,438 training digits at that speed;
# *speedup* is over 1 process x 1 thread: the ratio of the two samples/s in each repeat, median
# over the repeats (the verdicts below print the same number with its range);
# *eff.* (efficiency) is speedup / N;
# *vs 1 proc x N thr* compares with one process using N threads; the last column is the time
# spent communicating and waiting per unit of compute. How close were your guesses?

# %% tags=["nbval-ignore-output"]
table = speedup.speedups(rows)
measured = {name: next(r["speedup"] for r in table if r["world_size"] == 2
                       and speedup.config_key(r) == speedup.config_key(dict(cfg, scaling="strong")))
            for name, cfg in REGIMES.items()}
for name in REGIMES:
    guess = "nothing" if my_guess[name] is ... else f"{my_guess[name]:.2f}"
    print(f"{name:>6}: you guessed {guess}, measured {measured[name]:.2f}")


# %%
from distlab.course import results as course_results

ranges = {name: [r["speedup_lo"], r["speedup_hi"]] for name, cfg in REGIMES.items() for r in table
          if r["world_size"] == 2 and speedup.config_key(r) == speedup.config_key(dict(cfg, scaling="strong"))}
runs = {name: speedup.repeat_ratios(rows, speedup.config_key(r), 2, r["threads"], 1, method=r["method"])
        for name, cfg in REGIMES.items() for r in table
        if r["world_size"] == 2 and speedup.config_key(r) == speedup.config_key(dict(cfg, scaling="strong"))}
course_results.remember("05", speedup_2_ranks=measured, speedup_2_ranks_repeats=ranges,   # for lesson 11
                        speedup_2_ranks_runs=runs, regimes=REGIMES)

# %% [markdown]
# Which configurations gained, and by more than the spread? Each configuration ran three times
# (three repeats, a few seconds apart); each repeat's ratio of 2 ranks over one process is one
# run, and the course's one rule (lesson 01, `distlab.verdict`, on the ratios as ratios) says
# "faster", "slower" or "no clear difference".

# %% tags=["nbval-ignore-output"]
print(speedup.verdicts(rows))

# %% [markdown]
# ## 3. The picture: speedup, efficiency and where the time goes
#
# Left: speedup against N with the ideal line (speedup = N), each point labelled with its
# efficiency; the orange square is one process using both cores. Middle: a step's time split
# up, with the communication-to-computation ratio. Right: every configuration measured so far,
# speedup of 2 ranks against FLOPs per byte of gradient.
#
# Choose another model, width and batch and press **measure** to add a real measurement
# (three launches, some seconds each).

# %% tags=["nbval-ignore-output"]
def measure(config):
    """What the widget's measure button runs: 1 process (1, then 2 threads), then 2 ranks."""
    return scaling.run_scaling([config], (1, 2), steps=8, skip=2, repeats=2)


pictures.speedup_widget(rows, key=speedup.config_key(dict(REGIMES["best"], scaling="strong")), measure=measure)

# %% [markdown]
# **Why the regimes differ.** Per step, 2 ranks save half the compute and pay an all-reduce of
# the whole gradient, waiting, and an optimizer step each. The small MLP at batch 64 does little
# arithmetic per byte (section 1): its all-reduce, ruled by the fixed cost per message *alpha*, can
# outlast the compute it saves. The CNN, with a gradient as small and tens of times the compute
# per sample at a larger batch, has the best *chance*. A chance is not a result: the cell below
# lists the regimes by arithmetic per byte beside what each gained.

# %% tags=["nbval-ignore-output"]
def regime_rows(name):
    """This regime's rows of the speedup table (strong scaling), by world size."""
    key = speedup.config_key(dict(REGIMES[name], scaling="strong"))
    return {r["world_size"]: r for r in table if speedup.config_key(r) == key}


two_ranks = {name: regime_rows(name)[2] for name in REGIMES}
print(f"{'regime':<7}{'FLOPs/byte':>11}{'comm+wait/compute':>19}   speedup of 2 ranks (repeats)")
for name in sorted(REGIMES, key=intensity.get):
    r = two_ranks[name]
    print(f"{name:<7}{intensity[name]:>11,.0f}{r['comm_to_compute']:>19.2f}   "
          f"{r['speedup']:.2f} ({r['speedup_lo']:.2f} to {r['speedup_hi']:.2f})")
from distlab.verdict import verdict

top = max(REGIMES, key=lambda n: two_ranks[n]["speedup"])
ratios = {n: speedup.repeat_ratios(rows, speedup.config_key(dict(REGIMES[n], scaling="strong")), 2, 1, 1)
          for n in REGIMES}
overlap = []
for n in REGIMES:
    if n != top:
        v = verdict(ratios[top], ratios[n], names=(top, n), better="higher", log=True)
        print(f"{top} against {n}: {v}")
        overlap += [] if v.winner == top else [n]
print(f"\ngained most: {top}" + (f", but not clearly more than {' and '.join(overlap)}" if overlap
                                 else ", clearly more than the others"))
if top != "best" or overlap:
    print("the most arithmetic per byte (best) did not clearly gain most: a small communication share "
          "was not the whole story here")

# %% [markdown]
# A small communication share is necessary, not enough. It does not say whether each rank's
# compute really halved, nor what the two ranks lose by sharing this machine's cores with each
# other, with their communication threads and with whatever else runs (the load average at the
# top of the lesson). Section 4 measures the first. At N = 2 the weak-scaling row (448 a rank) is
# the same 2-rank job as the *probe* regime (896 split two ways): only the baseline differs, one
# process at 448 instead of at 896. Weak and strong scaling part only from N = 3 on.

# %% [markdown]
# **By hand or DDP?** This lesson averages by hand (lesson 01: one all-reduce per parameter
# tensor, after the backward pass) so that communication can be timed apart from compute; each
# of the 6 all-reduces pays the fixed cost *alpha*. `DistributedDataParallel` packs the gradients
# into buckets, filled from the last layer backwards: the **first** bucket is small (PyTorch's
# `_DEFAULT_FIRST_BUCKET_BYTES`, printed below), the later ones up to `bucket_cap_mb=25`. A bucket's
# all-reduce starts as soon as its gradients are ready, while backward still computes the earlier
# layers: that is the overlap. The next cell says which of section 1's gradients fit in one
# bucket (one all-reduce, after backward: nothing to overlap, DDP saves only the extra calls'
# *alpha*) and which get more than one (the first can be reduced while backward goes on).
# `bench/scaling.py` measures both side by side.

# %%
import torch.distributed as dist

first_bucket = dist._DEFAULT_FIRST_BUCKET_BYTES
for name, cfg in REGIMES.items():
    size = traffic.gradient_bytes(cfg["model"], cfg["width"])
    fits = "fits in the first bucket: one all-reduce" if size <= first_bucket else \
        "more than the first bucket: at least two all-reduces, the first during backward"
    print(f"{name:>6}: gradient {size / 2**20:.2f} MiB against a first bucket of {first_bucket / 2**20:.0f} MiB: {fits}")

# %% [markdown]
# **Two ranks or two threads?** One process with 2 threads also uses both cores, with **one**
# model, **one** optimizer step and **nothing** to send; but its threads split each matrix
# product, and small products leave a core idle. Which cost is larger depends on the model, the
# batch and the machine: each configuration's second verdict line says which won here. Ranks are
# what you need anyway when the work no longer fits on one machine.

# %% [markdown]
# ## 4. Models that predict the speedup, and where they fail
#
# **Amdahl's law**: if a fraction *s* of one process's work cannot be shared, N workers give
# speedup `1 / (s + (1 - s) / N)`, never more than `1 / s`. We fit *s* to the measured speedup at
# N = 2 (`speedup.fit_amdahl`). A speedup below 1 needs *s* > 1: Amdahl's law cannot describe
# work that *grows* with N, and communication does.
#
# **The alpha-beta model** (lesson 03) predicts that growth: a ring all-reduce of *n* bytes in
# *k* calls on N ranks costs `2(N-1) k alpha + 2(N-1)/N n beta`. We fit alpha and beta to the
# all-reduces measured inside training, then predict each step as compute / N + rest +
# all-reduce. Below, 4 ranks also run on the 2 cores, **oversubscribed** (distlab warns).

# %% tags=["nbval-ignore-output"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    rows4 = scaling.run_scaling([REGIMES["worst"], REGIMES["best"]], world_sizes=(4,), steps=6, skip=2)
print("warning:", caught[0].message if caught else "none (this machine has 4 or more cores)")
all_rows = rows + rows4
alpha, beta = speedup.fit_alpha_beta([r for r in rows if r["world_size"] == 2])
bandwidth = 1 / beta / 1e9 if beta else float("inf")
print(f"fitted: alpha = {alpha * 1e6:.0f} us per all-reduce round, 1/beta = {bandwidth:.2f} GB/s\n")
print(f"{'regime':<7}{'serial s':>9}{'N':>3}{'measured':>10}{'Amdahl':>8}{'alpha-beta':>12}")
for name in ("worst", "best"):
    key = speedup.config_key(dict(REGIMES[name], scaling="strong"))
    mine = {r["world_size"]: r for r in speedup.speedups(all_rows) if speedup.config_key(r) == key}
    s = speedup.fit_amdahl([2], [mine[2]["speedup"]])
    for n in (2, 4):
        print(f"{name:<7}{s:>9.2f}{n:>3}{mine[n]['speedup']:>10.2f}{predicted.amdahl_speedup(n, s):>8.2f}"
              f"{predicted.predicted_speedup(mine[1], n, alpha, beta):>12.2f}")

# %% [markdown]
# At N = 2 Amdahl matches by construction (one point, one unknown). The alpha-beta column is a
# real prediction, and where it promises more than was measured, one of its assumptions failed.
# Its communication term was fitted to these very runs; its other bet is that each rank's
# compute is one process's compute / N. The next cell measures that bet: each rank's forward and
# backward time at 2 ranks over one process's, repeat by repeat (ideal in strong scaling: 1/2),
# then redoes the prediction with the compute the ranks really spent.

# %% tags=["nbval-ignore-output"]
print("forward+backward per rank and step, 2 ranks over 1 process x 1 thread (ideal 0.50 strong, 1.00 weak):")
compute = speedup.compute_ratios(rows)
for c in compute:
    model, width, kind, batch = c["key"]
    print(f"  {model}{width}, {kind}, batch {batch:<5} {c['median']:.2f} "
          f"(repeats {c['ratios'][0]:.2f} to {c['ratios'][-1]:.2f})")
print(f"\n{'regime':<7}{'measured (repeats)':>22}{'alpha-beta, compute / 2':>26}{'alpha-beta, measured compute':>31}")
for name in REGIMES:
    one, r = regime_rows(name)[1], two_ranks[name]
    print(f"{name:<7}{r['speedup']:>8.2f} ({r['speedup_lo']:.2f} to {r['speedup_hi']:.2f})"
          f"{predicted.predicted_speedup(one, 2, alpha, beta):>26.2f}"
          f"{predicted.predicted_speedup(one, 2, alpha, beta, compute_s=r['compute_s']):>31.2f}")
course_results.remember("05", compute_ratio_2_ranks={name: c["median"] for c in compute for name, cfg in REGIMES.items()
                                                     if c["key"] == speedup.config_key(dict(cfg, scaling="strong"))})

# %% [markdown]
# A ratio well above 1/2 means the second core did not buy half the compute: smaller matrix
# products use a core less well, and two busy processes share the caches, the memory bandwidth
# and the machine's other work. Where the last column lands near the measured speedup, the
# missing speedup was compute that did not split, not communication.

# %% [markdown]
# At N = 4 both models assume four workers with a core each; the measurement has four ranks
# taking turns on two cores, and every all-reduce must wait for a rank that is not even running.
# Models are only as good as their assumptions: check them against a measurement before buying
# machines.
#
# **Which alpha?** Lesson 03 measured alpha with a ping-pong: two idle ranks bouncing one
# message. The alpha above was fitted to all-reduces *inside training*. Measure the first kind
# again now, on the same two ranks, and compare:

# %% tags=["nbval-ignore-output"]
import distlab
from distlab.comm import cost_model, measure_costs

idle = distlab.launch(measure_costs.measure, world_size=2, sizes=(1_000,), repeats=3, algorithms=("ring",),
                      ping_pong_bytes=(8, 8_000, 80_000), ping_pong_repeats=20, progress="none")[0]
idle_alpha = cost_model.fit_link(idle["ping_pong"]).alpha
print(f"alpha: {idle_alpha * 1e6:.0f} us from an idle ping-pong, {alpha * 1e6:.0f} us fitted inside "
      f"training ({alpha / idle_alpha:.1f}x)")

# %% [markdown]
# The two answer different questions. Inside training, an all-reduce waits for the slower rank,
# queues behind the other rank's computation on shared cores, and pays a Python call per tensor;
# the fit puts all that into alpha. The fitted alpha describes *this machine while it trains*;
# the ping-pong's is closer to what ranks with a core (or a GPU) each would pay. Section 7 uses
# both.

# %% [markdown]
# ## 5. Large batches: what more ranks do to the optimisation
#
# N ranks of batch B take exactly the steps of one process at batch N x B (lesson 01), so we can
# study the *optimisation* in this process with `train_single`. For a fixed number of epochs, N
# times the batch means N times **fewer steps**:

# %%
from distlab.data import load_digits, steps_per_epoch

n_train = load_digits().n_train
for n in (1, 2, 4, 8):
    print(f"N = {n}: global batch {8 * n:>2}, {2 * steps_per_epoch(n_train, n, 8):>3} steps in 2 epochs")

# %% [markdown]
# Three rules for the learning rate: keep the single-worker rate (0.1); the **linear scaling
# rule** (multiply it by N, so that N times fewer steps move the weights as far); and linear
# scaling with a **warm-up** that starts at the single-worker rate and reaches N x 0.1 after half
# an epoch (`data_parallel.warmup_lr`). Test accuracy after 2 epochs, mean of two seeds (MLP of
# width 64, 8 samples per rank):

# %% tags=["nbval-ignore-output"]
big = large_batch.large_batch_study((1, 2, 4, 8), batch_size=8, epochs=2, lr=0.1, warmup_epochs=0.5, seeds=(0, 1))
acc = {(r["world_size"], r["rule"]): r["accuracy"] for r in big}
for n in (1, 2, 4, 8):
    print(f"N = {n}: " + ", ".join(f"{rule} {acc[n, rule]:.2f}"
                                   for rule in ("same lr", "linear scaling", "linear + warm-up")))
show(pictures.large_batch_figure(big))
assert acc[8, "same lr"] < acc[1, "same lr"] - 0.2          # fewer steps, same rate: it learns less
assert acc[4, "linear scaling"] > acc[4, "same lr"] + 0.1   # the linear rule wins most of it back
assert acc[8, "linear scaling"] < acc[4, "linear scaling"]  # ... until the rate is too large
assert acc[8, "linear + warm-up"] < acc[4, "linear scaling"] - 0.2   # and warm-up does not make up the steps
assert acc[8, "linear scaling"] > acc[8, "same lr"]                 # rate 0.8 did not diverge: too few steps

# %% [markdown]
# What the measurement says, for this small model and a short training:
#
# * with the **same rate**, accuracy falls steadily with N: the big batch averages away noise,
#   but takes N times fewer steps;
# * the **linear rule** recovers it up to N = 4 (rate 0.4);
# * at N = 8 (rate 0.8) the linear rule falls behind N = 4 yet still beats the same rate at
#   N = 8: nothing diverged. What is missing is steps (44 in 2 epochs), and **warm-up** spends some
#   of those few at a lower rate: it was made for deep networks whose first steps are fragile,
#   and it does not replace steps.
#
# So a faster clock is not the whole story: past some global batch, distributing buys time per
# epoch but needs more epochs (or a different optimiser) for the same accuracy.

# %% [markdown]
# ## 6. The drawbacks, measured
#
# Distributing has costs besides the clock. Each one below comes with a number from this lesson.

# %% tags=["nbval-ignore-output"]
import distlab.processes
from distlab.data_parallel import gradient_sync

worst, best = regime_rows("worst"), regime_rows("best")
measured_seconds = sum(r["step_s"] * 6 for r in rows)        # the timed steps of every run
print("OVERHEAD")
print(f"  the 3 launches took {elapsed:.0f} s; the timed training steps in them {measured_seconds:.1f} s")
print(f"  even alone, the small MLP's all-reduce costs {worst[1]['comm_s'] * 1e3:.2f} ms per step "
      f"({worst[1]['comm_s'] / worst[1]['compute_s']:.1f}x its compute); with 2 ranks it waits and "
      f"talks {worst[2]['comm_to_compute']:.1f}x its compute")
print("COMPLEXITY")
def lines(f):
    return len(inspect.getsource(f).splitlines())
def module_lines(package):
    folder = os.path.dirname(package.__file__)
    return sum(len(open(os.path.join(folder, f)).read().splitlines()) for f in os.listdir(folder) if f.endswith(".py"))
print(f"  the training functions look alike: data_parallel.train {lines(data_parallel.train)} lines, "
      f"train_single {lines(data_parallel.train_single)} (one shared loop; averaging is one strategy object);")
print(f"  but a run of ranks also needs what one process never does: distlab.processes (start, connect, "
      f"watch and stop ranks) {module_lines(distlab.processes):,} lines, gradient_sync "
      f"{lines(gradient_sync):,} lines")
print("DEBUGGING")
spread = [abs(a["samples_per_s"] - b["samples_per_s"]) / min(a["samples_per_s"], b["samples_per_s"])
          for a in rows for b in rows if a is not b and a["repeat"] == 0 and b["repeat"] == 1
          and speedup.config_key(a) == speedup.config_key(b)
          and (a["world_size"], a["threads"]) == (b["world_size"], b["threads"])]
spread.sort()
print(f"  the same run, measured twice a few seconds apart, differed by {spread[len(spread) // 2]:.0%} "
      f"in samples/s (median), {spread[-1]:.0%} at most;")
print(f"  a 2-rank step's waiting is visible only from both ranks' timelines together "
      f"(best regime: {best[2]['wait_s'] * 1e3:.2f} ms of waiting per step)")
print("COST (core-seconds per 1000 samples)")
for name, r in (("worst", worst), ("best", best)):
    one, two = 1000 / r[1]["samples_per_s"], 2 * 1000 / r[2]["samples_per_s"]
    print(f"  {name:>5}: 1 process {one:.3f}, 2 ranks {two:.3f}  ({two / one:.1f}x the bill)")

# %% [markdown]
# * **Overhead**: start-up per job, and communication even a single rank runs through.
# * **Complexity**: not in the loop (both functions share one) but around it: starting,
#   connecting and stopping ranks; any line of it can fail on one rank only.
# * **Debugging**: timings move from run to run, and what a rank waits for happens on another
#   rank (lesson 04's timelines).
# * **Cost**: N ranks bill N cores; with efficiency *E* a sample costs 1 / *E* times the
#   core-seconds.

# %% [markdown]
# ## 7. Exercise
#
# The small MLP's step is dominated by its all-reduce. With the `alpha` and `beta` fitted in
# section 4, predict how long **one** step's all-reduces would take on **8** ranks (one per
# core of a bigger machine): the MLP of width 64 has `k = 6` parameter tensors and
# `traffic.gradient_bytes("mlp", 64)` bytes of gradient. Use the formula
# `2(N-1) k alpha + 2(N-1)/N n beta`, then compare with the compute one rank would have left
# (a 64-sample global batch split 8 ways).

# %%
from distlab.course import exercises

n_bytes = traffic.gradient_bytes("mlp", 64)
answer = ...     # <- your formula, in seconds, using alpha, beta and n_bytes

exercises.allreduce_on_eight(answer, n_bytes, messages=6, alpha=alpha, beta=beta)

# %% [markdown]
# The formula is only as good as its alpha (section 4). With the alpha fitted inside training
# on two shared cores, and with the idle ping-pong's:

# %% tags=["nbval-ignore-output"]
for label, a in (("fitted inside training", alpha), ("idle ping-pong", idle_alpha)):
    print(f"alpha {label:>22} ({a * 1e6:5.0f} us): all-reduce on 8 ranks "
          f"{alpha_beta.all_reduce_seconds(n_bytes, 8, a, beta, messages=6) * 1e3:7.2f} ms per step")
print(f"compute per rank at 8 ranks: about {worst[1]['compute_s'] / 8 * 1e3:.3f} ms per step")

# %% [markdown]
# **Build it: accuracy on shards, one decision.** The company's real question is the time to an
# accuracy (lesson 05b), so the accuracy is measured while training runs. If every rank evaluates
# the whole test set, N ranks do the same work N times. Split it instead: each rank counts
# `correct` answers among its `total` test samples. Write what every rank then runs: return the
# **whole** test set's accuracy and whether to stop (`accuracy >= target`), the same on every
# rank. `worker.all_reduce(t)` sums a tensor over the ranks. Predict first: why is the mean of the
# ranks' accuracies not the answer, and what happens to a rank that stops alone? The checker runs
# your function on 2 real ranks every 6 steps of training, against the accuracy one process
# measures at the same parameters.

# %%
from distlab.course import exercises_evaluate


def accuracy_and_stop(worker, correct, total, target):
    ...   # return (the whole test set's accuracy, stop?), the same on every rank


exercises_evaluate.accuracy_on_shards(accuracy_and_stop)

# %% [markdown]
# ## What to tell the insurance company
#
# * A second **rank** can only pay when each step does a lot of arithmetic per byte of gradient:
#   large batches, compute-heavy models with few parameters. That is necessary, not enough: each
#   rank's compute must also really shrink (section 4 measured it), and section 2's verdicts say
#   which configurations gained here.
# * One process with more **threads** is the other way to use one machine's cores, with no
#   communication to write or debug; the same verdicts say whether it was faster here.
#   Distribute when one machine is not enough.
# * A larger global batch changes the optimisation: scale the learning rate, check accuracy,
#   and expect a limit.

# %% [markdown]
# * Measure on the real machine before buying more: `bench/scaling.py` does it for these regimes.
#
# Next lesson: the accuracy the company asked for, on real handwriting, **05b · More data, more
# accuracy?**

# %% [markdown]
# **Previous:** [04 · Keeping workers in sync](04_keeping_workers_in_sync.ipynb) · **Next:** [05b · More data, more accuracy?](05b_more_data.ipynb) · [The course: map, glossary, solutions](../course/README.md)
