# %% [markdown]
# # Lesson 05 · Does distributing pay?
#
# **Goal of this lesson.** The insurance company has read lessons 01-04 and asks the question
# that matters to whoever pays for the machines: *if we train on two workers instead of one,
# is it twice as fast?* By the end of this lesson you can answer from measurements made on
# this machine a minute ago:
#
# 1. how much faster N ranks train than one process (the **speedup**), and where each step's
#    time goes (compute, communication, waiting);
# 2. **which regime has a chance to pay**: why a step with much arithmetic per byte of gradient
#    (a wide MLP at a large batch, a small CNN) stands a better chance of gaining from a second
#    rank than a small MLP at a small batch, and whether any of them gained here today;
# 3. what **Amdahl's law** and the **alpha-beta model** predict, and where they fail;
# 4. what a larger global batch does to **accuracy**, with and without the linear learning-rate
#    scaling rule and warm-up;
# 5. the **drawbacks** of distributed training, each with a number measured here.
#
# Everything below is measured live on real worker processes, a little of each so that the
# lesson runs in well under a minute. The numbers move from run to run (other programs share
# the cores): read them as "about", and rerun a cell to see how much they move.

# %% tags=["nbval-ignore-output"]
import inspect
import os
import time
import warnings

from distlab.measure import large_batch, scaling, speedup
from distlab.parallel import data_parallel
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
          f"{speedup.gradient_bytes(cfg['model'], cfg['width']) / 1e3:>8.0f}kB"
          f"{3 * speedup.flops_per_sample(cfg['model'], cfg['width']):>14,}"
          f"{speedup.compute_per_byte(cfg['model'], cfg['width'], per_rank):>22,.0f}")

# %%
intensity = {name: speedup.compute_per_byte(cfg["model"], cfg["width"], cfg["global_batch_size"] // 2)
             for name, cfg in REGIMES.items()}
print(f"the CNN does {intensity['best'] / intensity['worst']:,.0f} times the small MLP's FLOPs per byte of gradient")

# %% [markdown]
# The CNN's convolutions reuse each of their few weights at all 64 pixel positions, so it does
# far more arithmetic per byte of gradient than the small MLP (whose every weight is used once
# per sample): the two columns above differ by the factor just printed.
#
# **Your prediction.** For each regime, how many times faster will **2 ranks x 1 thread** train
# than **1 process x 1 thread** on this machine's two cores? (2.0 would be perfect.)

# %%
my_guess = {"worst": ..., "probe": ..., "best": ...}   # <- replace each ... by your guess

# %% [markdown]
# ## 2. Measure: strong and weak scaling on 1 and 2 ranks
#
# `scaling.run_scaling` launches one job per world size and trains every configuration back to
# back in it with the same `data_parallel.train` as lesson 01 (start-up, several seconds per
# launch, is paid once per launch and is **not** in the throughput). Inside a launch the
# configurations take turns twice; the first steps of each run are skipped (they pay for memory
# allocation). One process is launched twice: with **1 thread** (the per-core question) and with
# **2 threads** (one process using both cores: the single-machine alternative).
#
# Two kinds of scaling:
#
# * **strong**: the global batch is fixed, N ranks split it (each rank's batch shrinks);
# * **weak**: each rank's batch is fixed (here 448), N ranks process N times more per step.
#
# From every rank's timeline (five time stamps per step, lesson 04), a step splits into
# **compute** (forward and backward), **waiting** (arrived at the all-reduce before the last
# rank did), **communication** (from the last arrival to the end of the all-reduce) and the
# **rest** (optimizer step, picking the batch).

# %% tags=["nbval-ignore-output"]
CONFIGS = [REGIMES["worst"], REGIMES["probe"], REGIMES["best"],
           dict(model="mlp", width=1024, batch_size=448)]          # weak scaling
started = time.time()
rows = scaling.run_scaling(CONFIGS, world_sizes=(1, 2), steps=8, skip=2, repeats=2)
elapsed = time.time() - started
print(f"3 launches in {elapsed:.0f} s\n")
print(pictures.speedup_table(rows))

# %% [markdown]
# *s/epoch* is the time for one pass over the 1,438 training digits at that speed;
# *speedup* is over 1 process x 1 thread; *eff.* (efficiency) is speedup / N;
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
from distlab import course_results

course_results.remember("05", speedup_2_ranks=measured, regimes=REGIMES)   # for lesson 11

# %% [markdown]
# Which configurations gained, and by more than the spread? Each configuration ran twice
# (two repeats, a few seconds apart); the next cell compares 2 ranks with one process in every
# repeat and calls a difference only when both repeats agree.

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
# (about 20 seconds: three launches).

# %% tags=["nbval-ignore-output"]
def measure(config):
    """What the widget's measure button runs: 1 process (1, then 2 threads), then 2 ranks."""
    return scaling.run_scaling([config], (1, 2), steps=8, skip=2, repeats=2)


pictures.speedup_widget(rows, key=speedup.config_key(dict(REGIMES["best"], scaling="strong")), measure=measure)

# %% [markdown]
# **Why the regimes differ.** Per step, 2 ranks save half the compute and pay an all-reduce of
# the whole gradient, waiting for each other, and a full optimizer step each. For the small MLP
# at batch 64 the compute is a fraction of a millisecond: the all-reduce of its 36 kB gradient
# (its fixed cost per message, *alpha*, dominates) is several times longer than the compute it
# saved, so two ranks are **slower than one**. The wide MLP at batch 896 computes for tens of
# milliseconds per 4.5 MB of gradient: communication is a smaller share. The CNN computes about
# as long per step, but its gradient is a hundred times smaller (40 kB): communication is a
# small share of its step, which is the best case a second rank can hope for. Whether it
# gained here depends on more than that ratio: the two ranks share this machine's cores with
# each other, with their communication threads and with whatever else runs (the load average
# at the top of the lesson), and the verdicts above say what happened. Weak scaling has a
# better chance too: each rank keeps a large batch, so the compute per byte does not halve
# when a rank is added.
#
# **By hand or DDP?** This lesson averages by hand (lesson 01: one all-reduce per parameter
# tensor, after the backward pass) so that communication can be timed apart from compute; each
# of the 6 all-reduces pays the fixed cost *alpha*. DistributedDataParallel puts the gradients in
# one bucket and starts its all-reduce while the backward pass is still running, so it can
# only do better; `bench/scaling.py` measures both side by side.
#
# **Two ranks or two threads?** One process with 2 threads also uses both cores, but it keeps
# **one** copy of the model, does **one** optimizer step, sends **nothing** and never waits for
# another process: the two threads split each matrix product inside one step. Two ranks pay for
# the all-reduce, the waiting and a duplicated optimizer step. But the threads pay too: every
# matrix product is split in two and the threads meet at its end, so small layers are cut into
# pieces too small to keep both cores busy, and a thread waiting for its partner is a core
# doing nothing. Which cost is larger depends on the model, the batch and the machine: the
# column *vs 1 proc x N thr* (above 1: the ranks were faster) and the second verdict line of
# each configuration say which won here. Ranks are what you need anyway when the work no
# longer fits on one machine (more cores, more GPUs, more memory than a single computer has).

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
# all-reduces measured inside training (`speedup.fit_alpha_beta`), then predict each step as
# compute / N + rest + all-reduce.
#
# Now run 4 ranks on the 2 cores, **oversubscribed** (distlab warns): more ranks than cores
# measure contention, not scaling. Neither model knows that the cores did not double.

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
        print(f"{name:<7}{s:>9.2f}{n:>3}{mine[n]['speedup']:>10.2f}{speedup.amdahl_speedup(n, s):>8.2f}"
              f"{speedup.predicted_speedup(mine[1], n, alpha, beta):>12.2f}")

# %% [markdown]
# At N = 2 Amdahl matches by construction (one point, one unknown); the alpha-beta column is a
# real prediction from compute, rest and two fitted constants. At N = 4 both models assume four
# workers with a core each; the measurement has four ranks taking turns on two cores, and every
# all-reduce must wait for a rank that is not even running. Models are only as good as their
# assumptions: check them against a measurement before buying machines.
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
# The two answer different questions. Inside training, an all-reduce cannot finish before the
# slower rank arrives, its messages queue behind the other rank's computation on shared cores,
# and each of the 6 all-reduces per step costs a Python call and a wake-up of gloo's threads;
# the fit puts everything that does not grow with the bytes into alpha. So the fitted alpha
# describes *this machine while it trains*, and is usually the larger; the ping-pong's is
# closer to what ranks with a core (or a GPU) each would pay. An extrapolation is only as good
# as the alpha it uses: section 7 computes it with both.

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

# %% [markdown]
# What the measurement says, for this small model and a short training:
#
# * with the **same rate**, accuracy falls steadily with N: the big batch averages away noise,
#   but takes N times fewer steps;
# * the **linear rule** recovers it up to N = 4 (rate 0.4);
# * at N = 8 (rate 0.8, only 44 steps) it breaks down: plain SGD on this network becomes
#   unstable at such a rate, and **warm-up** does not rescue it here; in these short runs, it
#   mostly spends some of the few steps at a lower rate. Warm-up was introduced for deep
#   networks whose first steps are fragile; measure before you rely on it.
#
# So a faster clock is not the whole story: past some global batch, distributing buys time per
# epoch but needs more epochs (or a different optimiser) for the same accuracy.

# %% [markdown]
# ## 6. The drawbacks, measured
#
# Distributing has costs besides the clock. Each one below comes with a number from this lesson.

# %% tags=["nbval-ignore-output"]
def regime_rows(name):
    key = speedup.config_key(dict(REGIMES[name], scaling="strong"))
    return {r["world_size"]: r for r in table if speedup.config_key(r) == key}


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
print(f"  data_parallel.train is {lines(data_parallel.train)} lines; train_single, the same maths in "
      f"one process, {lines(data_parallel.train_single)}")
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
# * **Overhead**: start-up seconds per job that one process does not pay, and communication
#   that even a single rank runs through.
# * **Complexity**: more code that must agree across processes (same seed, same shards, the same
#   collectives in the same order, timeouts), and every line of it can fail on one rank only.
# * **Debugging**: timings move from run to run, and what a rank waits for happens on another
#   rank: you need every rank's timeline (lesson 04) to see it. Results also differ from one
#   process in the last bits (lesson 01).
# * **Cost**: N ranks bill N cores. With efficiency *E*, each sample costs 1 / *E* times the
#   core-seconds; below 50 % efficiency on 2 ranks you pay more *and* wait longer.

# %% [markdown]
# ## 7. Exercise
#
# The small MLP's step is dominated by its all-reduce. With the `alpha` and `beta` fitted in
# section 4, predict how long **one** step's all-reduces would take on **8** ranks (one per
# core of a bigger machine): the MLP of width 64 has `k = 6` parameter tensors and
# `speedup.gradient_bytes("mlp", 64)` bytes of gradient. Use the formula
# `2(N-1) k alpha + 2(N-1)/N n beta`, then compare with the compute one rank would have left
# (a 64-sample global batch split 8 ways).

# %%
from distlab import exercises

n_bytes = speedup.gradient_bytes("mlp", 64)
answer = ...     # <- your formula, in seconds, using alpha, beta and n_bytes

exercises.allreduce_on_eight(answer, n_bytes, messages=6, alpha=alpha, beta=beta)

# %% [markdown]
# The formula is only as good as its alpha (section 4). With the alpha fitted inside training
# on two shared cores, and with the idle ping-pong's:

# %% tags=["nbval-ignore-output"]
for label, a in (("fitted inside training", alpha), ("idle ping-pong", idle_alpha)):
    print(f"alpha {label:>22} ({a * 1e6:5.0f} us): all-reduce on 8 ranks "
          f"{speedup.allreduce_seconds(n_bytes, 8, a, beta, messages=6) * 1e3:7.2f} ms per step")
print(f"compute per rank at 8 ranks: about {worst[1]['compute_s'] / 8 * 1e3:.3f} ms per step")

# %% [markdown]
# ## What to tell the insurance company
#
# * A second **rank** can only pay when each step does a lot of arithmetic per byte of gradient:
#   large batches, compute-heavy models with few parameters. That is necessary, not enough: on
#   this shared 2-core machine, the verdicts of section 2 say which configurations actually
#   gained in this run, and by more than the spread or not. For small models at small batches,
#   the all-reduce costs more than the compute it saves.
# * One process with more **threads** is the other way to use the cores of one machine, with
#   no communication to write or debug; whether it was faster here is in the same verdicts.
#   Distribute when one machine is not enough.
# * A larger global batch changes the optimisation: scale the learning rate, check accuracy,
#   and expect a limit.
# * Measure, on the real machine, before buying more of them: the benchmark
#   `bench/scaling.py` does it for the regimes of this lesson.
#
# Next lesson: when the model itself no longer fits on one worker, **06 · Splitting the model**.

# %% [markdown]
# **Previous:** [04 · Keeping workers in sync](04_keeping_workers_in_sync.ipynb) · **Next:** [06 · Splitting the model](06_splitting_the_model.ipynb) · [The course: map, glossary, solutions](../course/README.md)
