# %% [markdown]
# # Lesson 05 · Does distributing pay?
#
# **Goal.** The insurance company asks the question that matters to whoever pays for the
# machines: *if we train on two workers instead of one, is it twice as fast?* By the end you can
# answer from measurements made on this machine a minute ago:
#
# 1. the **speedup** of N ranks over one process, and where a step's time goes;
# 2. what decides whether a regime **can pay** (compute per step against the all-reduce's
#    messages and bytes), and which regimes, if any, clearly gained here today;
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
# ## 1. Predict first: compute per step against the all-reduce
#
# Every step, each rank computes on its own mini-batch (work that **shrinks** as ranks are
# added: N ranks share the global batch) and then all-reduces its **whole** gradient (work that
# does **not** shrink). Lesson 03's alpha-beta model prices that all-reduce at a fixed cost
# *alpha* per message round (a ring: 2(N-1) rounds for each tensor) plus *beta* per byte. So the
# question is how a step's compute compares with **both**: the number of messages and the bytes.
# We count what we can without timing anything: tensors, bytes and FLOPs (training costs about
# three forward passes).
#
# The three configurations of this lesson (global batch = what all ranks together process per
# step):

# %%
from distlab.models import build_model

REGIMES = speedup.REGIMES
tensors = {name: len(list(build_model(cfg["model"], cfg["width"]).parameters())) for name, cfg in REGIMES.items()}
print(f"{'regime':<7}{'configuration':<24}{'gradient':>10}{'tensors':>8}{'FLOPs/sample':>14}"
      f"{'FLOPs/step':>15}{'FLOPs/byte':>12}   (the last two: one rank's, at 2 ranks)")
for name, cfg in REGIMES.items():
    per_rank = cfg["global_batch_size"] // 2
    print(f"{name:<7}{cfg['model'] + str(cfg['width']) + ', global batch ' + str(cfg['global_batch_size']):<24}"
          f"{traffic.gradient_bytes(cfg['model'], cfg['width']) / 1e3:>8.0f}kB{tensors[name]:>8}"
          f"{3 * flops.flops_per_sample(cfg['model'], cfg['width']):>14,}"
          f"{flops.training_flops(cfg['model'], cfg['width'], per_rank):>15,}"
          f"{flops.compute_per_byte(cfg['model'], cfg['width'], per_rank):>12,.0f}")

# %%
intensity = {name: flops.compute_per_byte(cfg["model"], cfg["width"], cfg["global_batch_size"] // 2)
             for name, cfg in REGIMES.items()}
per_sample = {name: flops.flops_per_sample(cfg["model"], cfg["width"]) for name, cfg in REGIMES.items()}
print(f"per sample, the CNN computes {per_sample['best'] / per_sample['worst']:,.0f} times the small MLP's FLOPs; "
      f"per byte of gradient (at its larger batch) {intensity['best'] / intensity['worst']:,.0f} times")

# %% [markdown]
# The CNN's convolutions reuse each of their few weights at all 64 pixel positions, so it
# computes far more per sample than the small MLP (each weight used once per sample), and its
# regime takes a larger batch: both factors are printed above.
#
# **Which term will matter?** Per tensor, the bytes outweigh the latency only above about
# N·alpha/beta bytes (section 4 fits both). The small MLP and the CNN send 6 tensors of a few
# kB: the *number* of messages should set their cost, whatever their FLOPs per byte. FLOPs per
# byte (arithmetic intensity) is the measure for large gradients such as *probe*'s, where the
# bandwidth term can dominate.
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


# %% tags=["nbval-ignore-output"]
from distlab.course import results as course_results

ranges = {name: [r["speedup_lo"], r["speedup_hi"]] for name, cfg in REGIMES.items() for r in table
          if r["world_size"] == 2 and speedup.config_key(r) == speedup.config_key(dict(cfg, scaling="strong"))}
runs = {name: speedup.repeat_ratios(rows, speedup.config_key(r), 2, r["threads"], 1, method=r["method"])
        for name, cfg in REGIMES.items() for r in table
        if r["world_size"] == 2 and speedup.config_key(r) == speedup.config_key(dict(cfg, scaling="strong"))}
course_results.remember("05", speedup_2_ranks=measured, speedup_2_ranks_repeats=ranges,   # for lesson 11
                        speedup_2_ranks_runs=runs, regimes=REGIMES)

# %% [markdown]
# Which configurations gained, and by more than the spread? Each launch ran every configuration
# three times (three repeats). Repeat *i* at 2 ranks is paired with repeat *i* of one process,
# which ran in an earlier launch: the pair shares its place in the order, not its moment. Each
# pair's ratio is one run, and the course's one rule (lesson 01, `distlab.verdict`, on the ratios
# as ratios) says "faster", "slower" or "no clear difference". With three runs the 99% interval
# uses Student's t with 2 degrees of freedom, 9.92: only a large, steady gap comes out clear.

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
# (three launches, some seconds each, three repeats in each). The widget draws; it does not
# judge. For lesson 01's verdict on what you added, run `print(speedup.verdicts(explorer.rows))`
# in a new cell.

# %% tags=["nbval-ignore-output"]
def measure(config):
    """What the widget's measure button runs: 1 process (1, then 2 threads), then 2 ranks."""
    return scaling.run_scaling([config], (1, 2), steps=8, skip=2, repeats=3)


explorer = pictures.speedup_widget(rows, key=speedup.config_key(dict(REGIMES["best"], scaling="strong")),
                                   measure=measure)
explorer

# %% [markdown]
# **Why the regimes differ.** Per step, 2 ranks save half the compute and pay an all-reduce of
# the whole gradient, waiting, and an optimizer step each. Section 1 predicted that for the
# small gradients the number of messages, not the bytes, sets the all-reduce's cost; what
# decides is then compute per step against that cost. The cell below prints, at 2 ranks, each
# regime's compute, communication and waiting per step, then which regimes clearly gained over
# one process. Look at two things: does the communication follow the bytes (*probe* sends over a
# hundred times *best*'s), or stay about the same? And do *worst* and *best*, with gradients of
# nearly one size, differ in communication, or only in compute?

# %% tags=["nbval-ignore-output"]
from distlab.verdict import against, verdict


def regime_rows(name):
    """This regime's rows of the speedup table (strong scaling), by world size."""
    key = speedup.config_key(dict(REGIMES[name], scaling="strong"))
    return {r["world_size"]: r for r in table if speedup.config_key(r) == key}


two_ranks = {name: regime_rows(name)[2] for name in REGIMES}
print("at 2 ranks, per step (medians over the repeats; speedup: the table's median, then the repeats' range)")
print(f"{'regime':<7}{'gradient':>9}{'FLOPs/byte':>11}{'compute':>10}{'comm':>9}{'wait':>9}   speedup")
for name in sorted(REGIMES, key=intensity.get):
    r = two_ranks[name]
    print(f"{name:<7}{r['grad_bytes'] / 1e3:>7.0f}kB{intensity[name]:>11,.0f}{r['compute_s'] * 1e3:>8.2f}ms"
          f"{r['comm_s'] * 1e3:>7.2f}ms{r['wait_s'] * 1e3:>7.2f}ms   "
          f"{r['speedup']:.2f} ({r['speedup_lo']:.2f} to {r['speedup_hi']:.2f})")
low, mid, high = two_ranks["worst"], two_ranks["probe"], two_ranks["best"]
print(f"\nprobe's gradient has {mid['grad_bytes'] / high['grad_bytes']:.0f}x best's bytes; "
      f"its communication took {mid['comm_s'] / high['comm_s']:.1f}x as long")
print(f"best's gradient has {high['grad_bytes'] / low['grad_bytes']:.2f}x worst's bytes; its communication took "
      f"{high['comm_s'] / low['comm_s']:.2f}x as long, its compute per rank {high['compute_s'] / low['compute_s']:.0f}x")

ratios = {n: speedup.repeat_ratios(rows, speedup.config_key(dict(REGIMES[n], scaling="strong")), 2, 1, 1)
          for n in REGIMES}
gained = [n for n in REGIMES if against(ratios[n], 1.0, names=(n, "1 process"), better="higher",
                                        log=True).winner == n]
print("\nclearly faster on 2 ranks than 1 process x 1 thread (section 2's verdicts): "
      + (", ".join(gained) if gained else "none"))
v = verdict(ratios["best"], ratios["probe"], names=("best", "probe"), better="higher", log=True)
print(f"{intensity['best'] / intensity['probe']:.0f}x the FLOPs per byte, best against probe "
      f"(geometric means of the repeats' ratios): {v}")

# %% [markdown]
# If the communication followed the bytes, *probe*'s would take about a hundred times *best*'s;
# a ratio near 1 or 2 says the fixed cost per message rules: 6 tensors, 2 rounds each. The
# speedup then follows compute per step against that cost: compare the compute and comm
# columns. A small communication share is necessary, not enough: it does not say whether each
# rank's compute really halved (section 4 measures it), nor what the ranks lose by sharing two
# cores with each other, their communication threads and the machine's other work.
#
# At N = 2 the weak-scaling row (448 a rank) runs the same 2-rank job as *probe* (896 split two
# ways); only the baseline differs: weak scaling divides by one process at the per-rank batch
# (448), strong scaling by one process at the global batch (896). From N = 3 on the jobs differ
# too.

# %% [markdown]
# **By hand or DDP?** This lesson averages by hand (lesson 01: one all-reduce per parameter
# tensor, after backward) so that communication can be timed apart from compute; each of the 6
# all-reduces pays *alpha* in every round. `DistributedDataParallel` packs the gradients into
# buckets, filled from the last layer backwards: the **first** is small (PyTorch's
# `_DEFAULT_FIRST_BUCKET_BYTES`, printed below), later ones up to `bucket_cap_mb=25`. A bucket's
# all-reduce starts once its gradients are ready, while backward computes earlier layers: the
# overlap. A gradient that fits in one bucket gets one all-reduce after backward: no overlap, but
# one call's alpha instead of six, plus the same bytes. Where alpha rules (section 4 prints the
# split), that is most of the communication, so the by-hand speedups above may understate DDP's
# for small gradients. `bench/scaling.py` measures DDP by default, by hand with
# `--method by_hand`: one method per run.

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
        amdahl = f"{predicted.amdahl_speedup(n, s):.2f}" if n == 2 or s <= 1 else "-"   # s > 1: no serial part
        print(f"{name:<7}{s:>9.2f}{n:>3}{mine[n]['speedup']:>10.2f}{amdahl:>8}"
              f"{predicted.predicted_speedup(mine[1], n, alpha, beta):>12.2f}")

print("\nthe fitted all-reduce at N = 2, per step, split into the model's two terms:")
print(f"{'':<30}{'alpha term':>21}{'bytes term':>12}{'one message':>13}{'measured':>10}")
for name in REGIMES:
    r = two_ranks[name]
    k, n_grad = r["n_tensors"], r["grad_bytes"]
    latency = alpha_beta.all_reduce_seconds(n_grad, 2, alpha, 0, messages=k)
    volume = alpha_beta.all_reduce_seconds(n_grad, 2, 0, beta, messages=k)
    fused = alpha_beta.all_reduce_seconds(n_grad, 2, alpha, beta, messages=1)     # as if in one message
    print(f"  {name:>6} ({k} tensors, {n_grad / 1e3:>5,.0f} kB){latency * 1e3:>19.2f}ms{volume * 1e3:>10.2f}ms"
          f"{fused * 1e3:>11.2f}ms{r['comm_s'] * 1e3:>8.2f}ms   {'alpha' if latency > volume else 'bytes'} term larger")
if beta:
    print(f"per tensor, the bytes outweigh the latency above N alpha / beta = {2 * alpha / beta / 1e3:,.0f} kB (N = 2)")

# %% [markdown]
# At N = 2 Amdahl matches by construction (one point, one unknown); where *s* > 1 it predicts
# nothing at N = 4 ("-"). The alpha-beta column at N = 2 is
# a check, not a prediction: its communication was fitted to these very runs; it leaves out
# waiting (`wait_s`). The last lines split each regime's fitted all-reduce into its
# two terms, beside one fused message (what DDP's one bucket sends for a small gradient): the
# last word of each line says which term is larger (look at *probe*'s large gradient: the larger
# the fitted alpha, the larger a gradient the messages rule). The model's other bet: each rank's
# compute is one process's / N. The next cell measures it: each rank's forward and backward time at 2
# ranks over one process's, repeat by repeat (ideal in strong scaling: 1/2), then redoes the
# prediction with the compute the ranks really spent.

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
# and the machine's other work. A ratio above 1 (look at the small MLP) means each half-batch
# took *longer* than the whole batch did alone, which smaller products cannot explain: in so
# tiny a step the fixed costs of every call (Python, operator dispatch, allocation) dominate and
# do not halve, and each rank shares the two cores with the other rank and the threads the
# communication library runs. Which of these acted here is not measured. Where the last column
# lands near the measured speedup, the missing speedup was compute that did not split, not
# communication.

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
# The two answer different questions. Inside training, an all-reduce competes for the two
# cores with the machine's other work and pays a Python call per tensor; the fit puts that into
# alpha. Waiting for the slower rank is not in it: `comm_s` starts at the last rank's arrival,
# and the wait is counted apart (`wait_s`). The fitted alpha describes *this machine while it
# trains*; the ping-pong's is closer to what ranks with a core each would pay (a GPU's NCCL
# latency is another measurement).
# Section 7 uses both. Every fitted row has N = 2 and k = 6 tensors, so the fit cannot tell a
# cost per round from one per call or per step: extrapolating to N = 8 assumes alpha is paid
# per round (the ring's 2(N-1) rounds per tensor), which these runs cannot test.

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
# an epoch (`data_parallel.warmup_lr`). Test accuracy after 2 epochs, mean of three seeds (MLP
# of width 64, 8 samples per rank), then lesson 01's rule on the seeds, for the comparisons that
# matter:

# %% tags=["nbval-ignore-output"]
big = large_batch.large_batch_study((1, 2, 4, 8), batch_size=8, epochs=2, lr=0.1, warmup_epochs=0.5,
                                   seeds=(0, 1, 2))
acc = {(r["world_size"], r["rule"]): r["accuracy"] for r in big}
seeds = {(r["world_size"], r["rule"]): r["accuracies"] for r in big}
for n in (1, 2, 4, 8):
    print(f"N = {n}: " + ", ".join(f"{rule} {acc[n, rule]:.2f}"
                                   for rule in ("same lr", "linear scaling", "linear + warm-up")))
show(pictures.large_batch_figure(big))
assert all(len(runs_) == 3 and all(0 <= x <= 1 for x in runs_) for runs_ in seeds.values())
assert len({seeds[1, rule] for rule in ("same lr", "linear scaling", "linear + warm-up")}) == 1  # N = 1: one run

comparisons = [("same rate, N times fewer steps", (8, "same lr"), (1, "same lr")),
               ("the linear rule at N = 4", (4, "linear scaling"), (4, "same lr")),
               ("the linear rule at N = 8", (8, "linear scaling"), (8, "same lr")),
               ("rate 0.8 at N = 8 against 0.4 at N = 4", (8, "linear scaling"), (4, "linear scaling")),
               ("warm-up at N = 8", (8, "linear + warm-up"), (8, "linear scaling"))]
for question, a, b in comparisons:
    v = verdict(seeds[a], seeds[b], names=(f"N = {a[0]}, {a[1]}", f"N = {b[0]}, {b[1]}"), better="higher")
    print(f"\n{question}: {v}")

# %% [markdown]
# What to look for (one small model, two epochs, three seeds a side: only large, steady gaps
# come out clear):
#
# * **same rate**: a big batch averages away gradient noise, but a fixed number of epochs takes
#   N times fewer steps;
# * the **linear rule** assumes N small steps move the weights about as far as one step N times
#   larger. Goyal et al. (2017, §2.1–2.2) find it fails early in training, while the weights
#   change fast (their remedy: a gradual warm-up), and beyond some batch size, hence rate (about
#   8k images for their ImageNet network);
# * a fixed number of epochs also means few steps (44 at N = 8).
#
# This measurement does not say which cause acts here. Beyond a critical batch size, doubling
# the batch no longer halves the steps to a target accuracy (Shallue et al. 2019): more epochs,
# less time saved.

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
print(f"  with 2 ranks, the small MLP waits and talks {worst[2]['comm_to_compute']:.1f}x its compute per step")
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
# * **Overhead**: start-up per job, and every step's all-reduce and waiting, which one process
#   never pays.
# * **Complexity**: not in the loop (both functions share one) but around it: starting,
#   connecting and stopping ranks; any line of it can fail on one rank only.
# * **Debugging**: timings move from run to run, and what a rank waits for happens on another
#   rank (lesson 04's timelines).
# * **Cost**: N ranks bill N cores; with efficiency *E* a sample costs 1 / *E* times the
#   core-seconds.

# %% [markdown]
# ## 7. Exercise
#
# At 2 ranks the small MLP's step was mostly all-reduce and waiting (section 3). With the
# `alpha` and `beta` fitted in section 4, predict how long **one** step's all-reduces would take
# on **8** ranks (one per core of a bigger machine): the MLP of width 64 has `k = 6` parameter
# tensors and
# `traffic.gradient_bytes("mlp", 64)` bytes of gradient. Use the formula
# `2(N-1) k alpha + 2(N-1)/N n beta`, then compare with the compute one rank would have left
# (a 64-sample global batch split 8 ways).

# %%
from distlab.course import exercises

n_bytes = traffic.gradient_bytes("mlp", 64)
answer = ...     # <- your formula, in seconds, using alpha, beta and n_bytes

exercises.allreduce_on_eight(answer, n_bytes, messages=6, alpha=alpha, beta=beta)

# %% [markdown]
# The formula is only as good as its alpha (section 4), fitted at N = 2 only. It charges alpha
# per ring round, 2 x 7 rounds for each of 6 tensors; were the cost per call or per step, 8
# ranks would pay what 2 ranks paid (2 x 6 alpha): the lines print both readings. The compute
# line divides one process's compute by 8, a perfect split that section 4 found false at 2
# ranks. With the alpha fitted inside training on two shared cores, and with the idle
# ping-pong's:

# %% tags=["nbval-ignore-output"]
for label, a in (("fitted inside training", alpha), ("idle ping-pong", idle_alpha)):
    per_round = alpha_beta.all_reduce_seconds(n_bytes, 8, a, beta, messages=6)
    as_at_two = (alpha_beta.all_reduce_seconds(n_bytes, 2, a, 0, messages=6)          # the 12 alpha of N = 2
                 + alpha_beta.all_reduce_seconds(n_bytes, 8, 0, beta, messages=6))    # the bytes of N = 8
    print(f"alpha {label:>22} ({a * 1e6:5.0f} us): all-reduce on 8 ranks {per_round * 1e3:7.2f} ms per step "
          f"(alpha per round), {as_at_two * 1e3:6.2f} ms (per call or step)")
print(f"compute per rank at 8 ranks, if one process's split perfectly: about "
      f"{worst[1]['compute_s'] / 8 * 1e3:.3f} ms per step")

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
# The answer to the prediction: the whole test set's accuracy is a ratio of two sums, so each rank
# contributes its counts, not its ratio; the mean of the shards' ratios is off whenever the shards
# differ in size and accuracy (here in the fifth decimal, enough to flip a decision at the target).
# A rank that stops alone never reaches the next all-reduce, so the others wait there until the
# timeout: the decision must come from numbers every rank shares.

# %% [markdown]
# ## What to tell the insurance company
#
# * A second **rank** pays only when each step's compute is large against its all-reduce:
#   *alpha* per message round times the rounds, plus bytes over bandwidth. Section 4 printed which
#   term was larger here, regime by regime; the model says fewer, fused messages (DDP's buckets)
#   cut the first, and that FLOPs per byte of gradient rule once the bytes do (neither is
#   measured here). Necessary, not enough: each rank's compute must
#   really shrink (section 4); section 3 printed which regimes, if any, clearly gained here.
# * One process with more **threads** uses one machine's cores with no communication to write
#   or debug; section 2's verdicts say whether it was faster here. Distribute when one machine is
#   not enough.
# * A larger batch per rank (more compute per step) means a larger global batch: scale the
#   learning rate, check accuracy, expect a limit (section 5).

# %% [markdown]
# * Measure on the real machine before buying more: `bench/scaling.py` does it for these regimes.
#
# Next lesson: the accuracy the company asked for, on real handwriting, **05b · More data, more
# accuracy?**

# %% [markdown]
# **Previous:** [04 · Keeping workers in sync](04_keeping_workers_in_sync.ipynb) · **Next:** [05b · More data, more accuracy?](05b_more_data.ipynb) · [The course: map, glossary, solutions](../course/README.md)
