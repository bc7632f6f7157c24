# %% [markdown]
# # Lesson 10 · Failure is normal at scale
#
# **Goal of this lesson.** The insurance company's training now runs for hours on a cluster
# (lesson 09). On one machine a crash is rare; on hundreds it is a matter of when. A job that
# cannot survive it starts over, and pays for every hour again.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. say why failures become *normal* as a job grows, with a little arithmetic;
# 2. **watch** a running job from outside: loss, throughput, each rank's step, who is behind;
# 3. **kill a worker on purpose** and watch torchrun restart the job, which resumes from its
#    last **checkpoint** and ends with exactly the parameters of a run that was never interrupted;
# 4. say what a checkpoint must hold, and why loading one must never run code;
# 5. see what a notebook launch does when a rank dies, raises or hangs: it stops cleanly and names the rank;
# 6. read TensorBoard's files and Horovod's own timeline of a job.

# %%
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

import distlab
from distlab.long_runs import checkpoint, horovod_timeline
from distlab.course import exercises_failure
from distlab.cluster import run
from distlab.cluster import config as run_config
from distlab.data_parallel import data_parallel, horovod_elastic
from distlab.widgets.display import show
from distlab.widgets.horovod import timeline_figure
from distlab.widgets.monitor import monitor

WORK = tempfile.mkdtemp(prefix="distlab-lesson10-")      # this lesson's configs, runs and checkpoints

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. Why failure is normal
#
# Say one machine fails, on average, once every few years: a disk, a memory error, a GPU that
# falls off the bus, a power supply, a network switch. A job on `n` machines stops when *any*
# of them fails, so it sees `n` times as many failures. The numbers below are **assumptions**
# for you to change, not measurements: the arithmetic is the point.

# %%
years_between_failures = 3            # an assumption: one machine's mean time between failures
job_hours = 24                        # an assumption: how long the training runs



def chance_of_failure(machines, hours_run):
    """At least one failure among ``machines`` in ``hours_run`` hours, failures arriving at random (Poisson)."""
    return 1 - math.exp(-hours_run * machines / (years_between_failures * 365 * 24))


for machines in (1, 8, 64, 512):
    hours = years_between_failures * 365 * 24 / machines        # the job's mean time between failures
    print(f"{machines:4d} machines: a failure every {hours:7.0f} h; "
          f"chance of at least one in {job_hours} h: {chance_of_failure(machines, job_hours):6.1%}")
print(f"512 machines for a week ({7 * 24} h): {chance_of_failure(512, 7 * 24):6.1%}")

# %% [markdown]
# On one machine a day-long job almost never fails. On 512 machines a failure within the day is
# no longer an exception (the chance is printed above), and a week-long run almost never
# finishes without one. Such a job has to carry on after a failure. That takes two things: **checkpoints** (the job's whole state,
# saved now and then) and a launcher that **restarts** the workers, which then resume from the
# last checkpoint. torchrun does the second with `--max-restarts`; distlab does the first.

# %% [markdown]
# ## 2. A long run, watched from outside
#
# Here is a run config (lesson 09) for a longer data-parallel training: 800 steps of the MLP,
# Adam, 2 ranks. Three settings are new:
#
# - `checkpoint.every: 100`: every 100 steps each rank saves its state;
# - `launch.max_restarts: 1`: if a rank fails, torchrun may restart the job once;
# - `logging.tensorboard: true` (the default): TensorBoard files next to the metrics.

# %%
path = os.path.join(WORK, "long.yaml")
long_run = run_config.RunConfig.parse({
    "model": {"width": 64}, "training": {"steps": 800, "global_batch_size": 64, "optimizer": "adam", "lr": 0.002},
    "parallel": {"method": "ddp"}, "launch": {"processes_per_node": 2, "max_restarts": 1, "port": 29851},
    "checkpoint": {"every": 100}, "logging": {"dir": os.path.join(WORK, "runs"), "name": "long"}})
long_run.save(path)
run_dir = run.run_dir(long_run)
print(open(path).read().replace(WORK, "WORK"))    # every section, the new settings among them

# %% [markdown]
# Every rank writes one line per step to `metrics_<rank>.jsonl` in the run's folder: its
# step, loss, accuracy, samples and seconds; and a line at its start, at each checkpoint and at
# its end. Anything that can read a file can watch the job: `tail -f`, `distlab monitor RUN_DIR`
# in a terminal, or the **monitor widget** below, which redraws from those files while the job runs.
#
# We start the run as a terminal would (`distlab run long.yaml`, in the background), then watch it.

# %% tags=["nbval-ignore-output"]
job = run.start(path)                  # distlab run long.yaml, in the background
watch = monitor(run_dir)               # follows the files until the job ends; the cell is free meanwhile
watch                                  # shown here, redrawn while the job runs

# %% [markdown]
# **Predict.** In a moment we kill rank 1 with `SIGKILL`, as the out-of-memory killer would: no
# warning, no clean-up. (A lost *machine* also takes its torchrun agent with it; surviving that
# needs elastic rendezvous across nodes, `--nnodes=MIN:MAX`.) What does rank 0 do, waiting for rank 1 in the next
# all-reduce? What does torchrun do? From which step does training continue, and is anything lost?
#
# We wait until both ranks are past step 310, ten steps after the checkpoint of step 300, read
# rank 1's process id from its metrics file (its `start` line), and kill it.

# %% tags=["nbval-ignore-output"]
status = watch.wait_until(lambda s: s.min_step >= 310, timeout=300)
victim = status.ranks[1]
os.kill(victim.pid, signal.SIGKILL)
killed_at = time.time()
print(f"killed rank 1 (pid {victim.pid}); when we looked, its file said step {victim.step} and its last "
      f"checkpoint step {victim.checkpoint}")

# %% [markdown]
# ## 3. The job comes back
#
# Rank 0's first life ends one of two ways, whichever comes first: its all-reduce fails on the
# closed connection, or torchrun's agent, which checks its workers every `--monitor-interval`,
# sees rank 1 dead and stops it. With a restart left, the agent then starts **every** rank again: a new *life*
# of the same job. Each new rank finds the newest checkpoint that every rank finished saving,
# loads it, and carries on from there. The monitor, drawn again below, shows it as a dotted line:
# the steps after that checkpoint were lost and are trained again.

# %%
code = job.wait(timeout=300)
final = watch.join(timeout=60)
print("distlab run's exit code:", code)
print("job state:", final.state)
print("restarts:", [r.restarts for r in final.ranks])
print("every rank finished all 800 steps:", all(r.step == 800 for r in final.ranks))
print("resumed from a checkpoint (a multiple of 100):", all(r.resumed_from % 100 == 0 for r in final.ranks))
assert code == 0 and final.state == "finished" and all(r.restarts == 1 for r in final.ranks)

# %% [markdown]
# The same monitor, shown again now that the job is over: both ranks' losses, the restart's
# dotted line at the checkpoint they went back to, and every rank at its last step.

# %% tags=["nbval-ignore-output"]
watch

# %% tags=["nbval-ignore-output"]
rank1 = final.ranks[1]
events = [json.loads(line) for line in open(os.path.join(run_dir, "metrics_1.jsonl"))]
lives = [i for i, e in enumerate(events) if e["event"] == "start"]
reached = max(e["step"] for e in events[lives[0]:lives[1]] if e["event"] == "step")   # its first life's last step
resumed_from = events[lives[1]]["resumed_from"]                                        # its second life's start
back = events[lives[1]]["time"] - killed_at
assert reached >= victim.step
later = f" ({reached - victim.step} more after we looked: it trained on while the kill was on its way)"
print(f"rank 1's file: its first life's last step was {reached}{later if reached > victim.step else ''}; "
      f"its second life started from the checkpoint of step {resumed_from}")
print(f"{back:.1f} s from the kill to the new rank 1's start line (one run on a shared machine: torchrun "
      "noticed, stopped rank 0, started both again; each imported PyTorch, joined the group and read the checkpoint)")

# %% [markdown]
# **The check that matters.** Did the job end where it would have without the failure? We train
# the same config once more, from the notebook this time, with no checkpoints and no failure,
# and compare the parameters.

# %%
records = run.records(long_run)
whole = distlab.launch(run_config.load(path, ["checkpoint.every=0"]), progress="none")
difference = distlab.max_param_difference(whole[0].params, records[0].params)
print("restarted run vs uninterrupted run, largest parameter difference <= 1e-6:", difference <= 1e-6)
assert difference <= 1e-6

# %% tags=["nbval-ignore-output"]
print(f"largest difference: {difference:.3g}")   # 0 here: the same sums in the same order

# %% tags=["nbval-ignore-output"]
from distlab.course import results as course_results

course_results.remember("10", steps_redone=rank1.lost_steps, resumed_from=resumed_from, reached=reached,
                        seconds_to_restart=back, largest_difference=difference)   # for lesson 11

# %% [markdown]
# The difference is zero, not just small: after a restart the ranks load every number the
# training depends on, so they compute exactly what the uninterrupted ranks computed.

# %% [markdown]
# ## 4. What a checkpoint holds, and why loading one must never run code
#
# To resume *exactly* a rank needs more than the weights: the optimizer's state (Adam's two
# moments per parameter, its step count), where the data sampler is (here the mini-batches are a
# function of the seed and the step, so the step says it all), and the random number generators.
# Each rank saves its **own** file: under data parallelism they are copies, but a pipeline stage
# holds only its layers and a ZeRO rank only its slice of the optimizer (lesson 08), so nobody
# has to gather the whole model. A checkpoint counts only when every rank has saved (a barrier,
# then `complete.json`); each file is written under a temporary name and then renamed, so a
# crash mid-save leaves the previous checkpoint whole.

# %%
step, folder = checkpoint.latest(long_run.checkpoint_dir())
print("newest complete checkpoint: step", step)
print("its files:", sorted(os.listdir(folder)))
state = checkpoint.read(os.path.join(folder, "rank_0.pt"))
print("what rank 0 saved:", sorted(state))
print("optimizer state of the first weight:", sorted(state["optimizer"]["state"][0]))

# %% [markdown]
# `torch.save` writes a zip archive holding a pickle and the tensors' bytes, and unpickling can run
# any code the file's author chose. So checkpoints are loaded with `torch.load(...,
# weights_only=True)` (PyTorch's default since 2.6), which accepts tensors, numbers, strings,
# containers and a few allow-listed types only, after checking the file's SHA-256 (which shows the
# file is whole, not who wrote it). A damaged file is refused with a clear error instead of
# training on garbage:

# %%
damaged = os.path.join(WORK, "damaged")
os.makedirs(damaged, exist_ok=True)
for name in ("rank_0.pt", "rank_0.sha256"):
    with open(os.path.join(folder, name), "rb") as f, open(os.path.join(damaged, name), "wb") as g:
        g.write(f.read())
with open(os.path.join(damaged, "rank_0.pt"), "r+b") as f:
    f.seek(200)
    f.write(b"\0" * 16)                         # sixteen bytes of a disk going bad
try:
    checkpoint.read(os.path.join(damaged, "rank_0.pt"))
except checkpoint.CheckpointError as err:
    print(str(err).replace(WORK, "WORK"))

# %% [markdown]
# ## 5. Failures in a notebook launch
#
# A notebook launch has no restarts: when a rank fails, `distlab.launch` stops every rank, checks
# that none is left, and raises `WorkerError` naming the rank. With checkpoints, the next launch
# simply carries on. `fault=` breaks a rank on purpose (as chaos tests do on real clusters):
# here rank 1 raises as it begins step 12, while rank 0 waits for it in that step's all-reduce.

# %%
saves = {"dir": os.path.join(WORK, "notebook_ckpt"), "every": 5}
settings = dict(method="ddp", optimizer="adam", lr=0.002, global_batch_size=64, steps=40, progress="none")
try:
    distlab.launch(data_parallel.train, 2, checkpoint=saves, fault={"kind": "raise", "rank": 1, "step": 12},
                   **settings)
except distlab.WorkerError as err:
    print(str(err).splitlines()[0])
again = distlab.launch(data_parallel.train, 2, checkpoint=saves, **settings)
print("the next launch resumed from step", again[0].resumed_from, "and trained", len(again[0].steps), "steps")
distlab.shutdown()          # the warm ranks hold memory; the runs below start their own

# %% [markdown]
# The other faults behave alike, and the tests check each one for both backends and for a
# pipeline: a rank killed by `SIGKILL` ("killed by SIGKILL"), a rank that **hangs** (the others'
# collective timeout fires; the launcher names the rank that never answered), an interrupt of
# the kernel (every rank stopped within seconds), and the launcher itself killed. In each case
# no process is left behind and the last good checkpoint is still there.

# %% [markdown]
# ## 6. Monitoring tools
#
# The same metrics files, read in a terminal (`distlab monitor` follows a running job; `--once`
# prints one snapshot):

# %% tags=["nbval-ignore-output"]
terminal = subprocess.run([sys.executable, "-m", "distlab.cli", "monitor", run_dir, "--once"],
                          capture_output=True, text=True)
print(terminal.stdout.replace(WORK, "WORK"))

# %% [markdown]
# And in **TensorBoard**: every rank wrote event files under `tensorboard/rank_<r>` in the run's
# folder. In a terminal, `tensorboard --logdir RUN_FOLDER` serves them as a web page with every
# rank's loss, throughput and step time (on Binder, open it through the Jupyter server's proxy).

# %%
print(sorted(os.listdir(os.path.join(run_dir, "tensorboard"))))

# %% [markdown]
# ## 7. Horovod: its timeline, and its elastic mode
#
# Horovod records its own **timeline** when asked (`logging.horovod_timeline: true`): for every
# gradient, when the ranks agreed it was ready (`NEGOTIATE_ALLREDUCE`: time spent here is time
# spent waiting for the slowest rank), when several tensors were copied into the fusion buffer to
# travel together (`MEMCPY_IN_FUSION_BUFFER`, if this run had any: the cell prints the phases it
# recorded), and how long the transfer (`GLOO_ALLREDUCE`) took. Rank 0 writes it as a Chrome trace, which we read and
# draw below (`chrome://tracing` or ui.perfetto.dev open the same file, zoomable).

# %% tags=["nbval-ignore-output"]
hvd_path = os.path.join(WORK, "horovod.yaml")
run_config.RunConfig.parse({
    "training": {"steps": 3, "global_batch_size": 64}, "parallel": {"method": "ddp"},
    "launch": {"backend": "horovod", "processes_per_node": 2},
    "logging": {"dir": os.path.join(WORK, "runs"), "name": "horovod", "horovod_timeline": True}}).save(hvd_path)
hvd_run = subprocess.run([sys.executable, "-m", "distlab.cli", "run", hvd_path], capture_output=True, text=True)
trace = os.path.join(WORK, "runs", "horovod", "horovod_timeline.json")
phases = horovod_timeline.phase_totals(horovod_timeline.read_timeline(trace))
print("phases recorded (times, total ms):", ", ".join(f"{p} ({n}, {ms:.1f} ms)" for p, (n, ms) in phases.items()))

# %% [markdown]
# **Predict**, then look: one panel per round (the broadcast of the starting parameters, then
# one all-reduce of every gradient per step), one row per tensor, time from the round's start.
# Where does the time go: moving the numbers (green), or negotiating (vermillion), that is,
# waiting until the last rank is ready? The diamonds mark when each rank said "ready"; after the
# first step Horovod's response cache agrees without them, so only the first rounds have them.

# %% tags=["nbval-ignore-output"]
show(timeline_figure(trace))

# %% [markdown]
# How to read it: compare the vermillion and green bars of each round. Negotiation is where a
# rank waits for the last one to be ready, so it is longest in the first round, where the ranks
# arrive from starts seconds apart. Once the response cache knows the tensors, later rounds skip
# the negotiation phase, so their waiting for a slow rank no longer shows as vermillion: it hides
# inside the transfer's start.

# %% [markdown]
# Horovod also has an **elastic** mode, which keeps the *survivors* running instead of
# restarting everyone: the training state lives in an `hvd.elastic.TorchState` and
# `state.commit()` copies it in memory every few steps; when a worker dies, the others' next
# all-reduce fails, Horovod forms a new, smaller ring, puts the state back to the last commit and
# carries on.

# %% [markdown]
# Elastic mode needs Gloo (Horovod's MPI mode cannot change its workers), and on a single machine
# it has one catch: Horovod blames
# a failure on the worker's whole **host** and blacklists it, and when every host is blacklisted
# it stops the job (Horovod 0.28.1, `runner/elastic/registration.py`). So a machine listed once
# (`localhost:2`) cannot survive anything. `distlab.data_parallel.horovod_elastic` lists this machine
# twice, as `localhost` and `127.0.0.1`, one worker each; losing one leaves the other. Each
# worker takes a slice of the same global batch, so the survivor trains on the same data. The test `tests/test_horovod_elastic.py` runs
# this command (80 steps, a commit every 10, a worker killed at step 35, so the survivor goes back
# to the commit of step 30) and compares the survivor's parameters with an uninterrupted run; this
# lesson only prints the command. A commit lives in memory: if every worker dies, it is gone, so
# Horovod advises saving to disk as well.

# %%
line = " ".join(horovod_elastic.command(os.path.join(WORK, "elastic"), 80, fault_step=35))
print(line.replace(sys.executable, "python").replace(WORK, "WORK").replace(os.path.dirname(distlab.__file__), "DISTLAB"))

# %% [markdown]
# ## Summary
#
# - The more machines, the more often a job sees a failure: at scale, surviving one is part of training.
# - A checkpoint is the whole state of every rank: parameters, optimizer, data position, random
#   generators; saved by each rank, complete only when all have saved, written then renamed, and
#   loaded without running code.
# - torchrun's restarts plus checkpoints turned a killed worker into a pause: the job
#   finished with exactly the parameters of an uninterrupted run, having trained again only the
#   steps after its last checkpoint.

# %% [markdown]
# - Horovod's elastic mode is built to keep the survivors going from an in-memory commit instead
#   (the test suite checks it here); it blames a failure on a whole host, so it needs two hosts
#   (here: this machine under two names).
# - A job is watched from outside, through the files its ranks write: the monitor widget,
#   `distlab monitor`, TensorBoard, Horovod's timeline.
# - For the insurance company: a long run on many machines will see failures; with checkpoints
#   every so often (exercise 1) and restarts, a failure costs the steps since the last checkpoint
#   and a restart's start-up (section 3 measured both for your run), not the run.

# %% [markdown]
# ## Exercises
#
# **1. How often to save?** Saving costs time; a failure loses all the work since the last
# checkpoint, which, failures striking at random moments, is on average half an interval
# between checkpoints. Say a checkpoint of the insurance company's model takes 30 seconds to write and
# the job sees a failure every 20 hours. How many seconds between checkpoints waste the least time?

# %%
my_interval = ...        # seconds between checkpoints
exercises_failure.checkpoint_interval(my_interval, save_seconds=30, hours_between_failures=20)

# %% [markdown]
# **2. What did your failure cost?** Your rank 1's first life ended at step `reached` (steps done,
# read from its metrics file above), and its second life started from the checkpoint of step
# `resumed_from`. How many steps did the job train twice? (The checker compares with what the
# monitor counted in your run.)

# %% tags=["nbval-ignore-output"]
print("reached:", reached, " resumed_from:", resumed_from)     # section 3's numbers, from rank 1's file


# %%
my_redone = ...
exercises_failure.steps_redone(my_redone, reached=reached, resumed_from=resumed_from, measured=rank1.lost_steps)

# %% [markdown]
# **3. Build it: what a checkpoint holds.** Write `save(model, optimizer, step)`: return the dict a
# restarted process resumes from. The library's loader puts `state["model"]` back with
# `model.load_state_dict`, `state["optimizer"]` with `optimizer.load_state_dict`, and goes on from
# step `state["step"]`; the dict is written and read back as a file is (`torch.save`, then
# `torch.load(weights_only=True)`: data only, never code); `step` counts the steps done.
# **Predict:** the runs use SGD with momentum; if you keep the model and the step but not the
# optimizer, which step is the first to come out wrong? The checker trains 8 steps on 2 real ranks
# without stopping, then again with a stop after step 4, your `save`, and a restart (in the same
# processes) from a fresh random model and an empty optimizer, and compares steps 5 to 8 with the
# run that never stopped. This model draws no random numbers, so the generators' state is not
# checked here.

# %%
from distlab.course import exercises_checkpoint


def save(model, optimizer, step):
    ...   # return {...}: everything the restarted run needs to go on exactly


exercises_checkpoint.checkpoint_contents(save)

# %% [markdown]
# **Read more:** Young 1974, "A first order approximation to the optimum checkpoint interval"
# (CACM 17(9)) and Daly 2006, "A higher order estimate of the optimum checkpoint interval for
# restart dumps" (FGCS 22) for exercise 1's rule (first order: good while saving is much shorter
# than the time between failures); PyTorch's
# [torchrun and elastic agents](https://docs.pytorch.org/docs/stable/elastic/run.html),
# [`torch.load`'s weights_only](https://docs.pytorch.org/docs/stable/generated/torch.load.html),
# Horovod's [timeline](https://horovod.readthedocs.io/en/stable/timeline_include.html) and
# [elastic](https://horovod.readthedocs.io/en/stable/elastic_include.html) pages.

# %% [markdown]
# **Previous:** [09 · From laptop to cluster](09_from_laptop_to_cluster.ipynb) · **Next:** [11 · What did you find? A knowledge check, and the answer for the insurance company](11_knowledge_check.ipynb) · [The course: map, glossary, solutions](../course/README.md)
