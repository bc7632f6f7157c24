# %% [markdown]
# # Lesson 09 · From laptop to cluster
#
# **Goal of this lesson.** Everything so far ran from a notebook cell on one machine. The
# insurance company's real training will run on a cluster: several GPUs in one machine, or
# several machines (*nodes*), started by a scheduler (SLURM, Azure Machine Learning, Google's
# Vertex AI, Kubernetes) that never sees this notebook.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. say what a job's **config file** is for, and write one for your own run;
# 2. run the same training from a **terminal** with `distlab run`, on torchrun or horovodrun;
# 3. explain what torchrun does on **several nodes**: the rendezvous, global and local ranks;
# 4. run a job on **two nodes for real** (two network namespaces on this machine), check that it
#    trains exactly like one node, and see the three launches side by side;
# 5. time the all-reduce **inside a node** and **between nodes**, set it against lesson 03's
#    alpha-beta model, and say what a real cluster's links add;
# 6. turn your config into an **Azure ML**, **Vertex AI**, **SLURM** and **Kubernetes** job, with
#    an image the cloud can pull.

# %%
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

import yaml

import distlab
from distlab.cluster import config as run_config
from distlab.cluster import fake_nodes, job_files, run
from distlab.comm import cost_model, measure_costs
from distlab.data_parallel import data_parallel
from distlab.predict import alpha_beta

WORK = tempfile.mkdtemp(prefix="distlab-lesson09-")      # this lesson's configs and run folders

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. What a config file is for
#
# In a notebook a run is a call: `distlab.launch(data_parallel.train, world_size=2, steps=30, ...)`.
# Its settings live in a cell, and the cell lives in your notebook. A cluster job is started by
# programs that never see that cell: torchrun on each node, a batch script, a cloud service. So
# the run is written down, in **one file**: what model on what data, how many nodes and
# processes, which backend and parallelism, batch and learning rate, where logs and checkpoints
# go. The same file is read by the notebook, the terminal and every scheduler, is kept with the
# code, and says, months later, exactly what was trained.
#
# `run_config.from_launch` writes the config of a launch call. Here is lesson 01's run, with a
# wider MLP whose gradients are all-reduced as one buffer (`method: fused`, so that section 5
# can time the all-reduce):

# %%
mine = run_config.from_launch(data_parallel.train, 2, method="fused", model="mlp", width=512,
                              global_batch_size=64, steps=8, lr=0.1, seed=0)
mine.logging.dir, mine.launch.port = os.path.join(WORK, "runs"), 29811
path = mine.save(os.path.join(WORK, "run.yaml"))
text = open(path).read()
print(text.replace(WORK, "WORK"))

# %% [markdown]
# The file lists every key with its value, the defaults included: also the keys this run does not
# use (the transformer's `heads` or `experts` of lessons 12-13), each at its default; a config that
# set one of them away from its default would be refused, naming the strategies that use it. The
# mesh's axes are among them: `parallel.data: -1` means "the ranks the other axes leave", and
# `expert`, `context` and `tensor` at 1 mean not split.
#
# Every key has a type and a range, checked before anything starts. **Predict** what happens to
# a config that spells the learning rate `learning_rate`, and to one whose batch of 50 is split
# over 4 ranks:

# %%
for mistakes in (["training.learning_rate=0.1"], ["training.global_batch_size=50", "launch.processes_per_node=4"]):
    try:
        run_config.load(path, mistakes)
    except run_config.ConfigError as err:
        print(str(err).replace(WORK, "WORK"), "\n")

# %% [markdown]
# The notebook launcher takes the same file: `distlab.launch(path)` runs what it says,
# on this machine.

# %% tags=["nbval-ignore-output"]
started = time.perf_counter()
in_notebook = distlab.launch(path, progress="none")
notebook_wall = time.perf_counter() - started       # the wall time of the launch, for section 4's picture
print(f"{len(in_notebook)} ranks, final loss {in_notebook[0].losses[-1]:.4f}, {notebook_wall:.1f} s")
distlab.shutdown()       # let the notebook's warm ranks go: the next runs start their own

# %% [markdown]
# ## 2. The same run from a terminal
#
# In a terminal, `distlab run run.yaml` does what a cluster does: it hands the config to
# **torchrun** (`launch.backend: horovod`: to **horovodrun**), whose ranks each read the config,
# join the job and train; it shows their progress and, at the end, what they reached. No warm
# ranks, no widgets: the same training function, started by the engine clusters use.

# %% tags=["nbval-ignore-output"]
started = time.perf_counter()
terminal = subprocess.run([sys.executable, "-m", "distlab.cli", "run", path], capture_output=True, text=True)
terminal_wall = time.perf_counter() - started
print(terminal.stdout.replace(WORK, "WORK")[-1500:], terminal.stderr[-1500:])
print(f"the terminal's wall time, a new Python starting and importing distlab included: {terminal_wall:.1f} s")

# %%
from_terminal = run.records(mine)
gap = max(distlab.max_param_difference(a.params, b.params) for a, b in zip(from_terminal, in_notebook))
print(f"exit code {terminal.returncode}; the terminal's parameters equal the notebook's exactly: {gap == 0.0}")
assert terminal.returncode == 0 and gap == 0.0

# %% [markdown]
# ## 3. Several nodes: what torchrun does
#
# On one node torchrun starts `--nproc-per-node` processes and tells each, in environment
# variables, its **local rank** (which GPU of this node), its **global rank** and the **world
# size**, among others (exercise 3 asks for five). On several nodes the same torchrun command
# runs on *every* node, and they must first find each other: the **rendezvous**. With
# `--rdzv-backend=c10d` the first node hosts a small key-value store at `--rdzv-endpoint host:port`;
# every node's torchrun connects, they agree on who is in the job, the rendezvous gives each node
# its **node rank** (the commands below carry none), and global ranks are handed out node by node
# (node rank 0's first). Then the ranks open their own connections for the collectives.
#
# The commands `distlab run --node-rank N` starts on each node of a 2-node run:

# %%
two = run_config.load(path, ["launch.nodes=2", "launch.hosts=[10.0.0.1,10.0.0.2]"])
for node in (0, 1):
    cmd, env = run.command(two, node)
    line = " ".join(cmd).replace(sys.executable, "python").replace(WORK, "WORK")
    print(f"node {node}:", " ".join(f"{k}={v}" for k, v in env.items()), line, "\n")

# %% [markdown]
# `--local-addr` and `--rdzv-conf is_host=` are there because on many machines (this one too)
# the host name resolves to 127.0.0.1: torchrun would then advertise an address the other node
# cannot reach. `GLOO_SOCKET_IFNAME` (set when the address belongs to one of this machine's
# interfaces) does the same for gloo's connections.

# %% [markdown]
# ## 4. Two nodes, for real
#
# Two **network namespaces** are two network stacks on one machine, each with its own
# interfaces and addresses; a **veth pair** is a cable between them. A process started in one can
# reach the other only over that cable, as on two machines (`distlab.cluster.fake_nodes`; it needs root,
# which a Binder session does not give). Each "node" runs its torchrun line of section 3; the result must be
# exactly the one-node result: the same ranks, the same data, the same sums.
#
# The terminal's run of section 2 was 2 ranks on one node; now the same 2 ranks as 1 rank on
# each of two nodes.

# %% tags=["nbval-ignore-output"]
one_node = from_terminal
reason = fake_nodes.available()
if reason is None:
    spread = run_config.load(path, ["launch.port=29815", "launch.processes_per_node=1"])
    spread.logging.name = "two-nodes"
    with fake_nodes.two_nodes(tag="l9") as nodes:
        started = time.perf_counter()
        two_nodes, outputs = fake_nodes.run_config(nodes, spread, WORK)
        nodes_wall = time.perf_counter() - started
    print(outputs[1].replace(WORK, "WORK")[-800:])
else:
    two_nodes = None
    print("two nodes cannot be made on this machine:", reason)

# %%
if two_nodes is not None:
    gap = max(distlab.max_param_difference(a.params, b.params) for a, b in zip(two_nodes, one_node))
    print(f"ranks {[r.rank for r in two_nodes]} on two nodes; parameters equal one node's exactly: {gap == 0.0}")
    assert gap == 0.0
else:
    print("(skipped here: no network namespaces)")

# %% [markdown]
# **The three launches side by side.** One config, run from the notebook, from a terminal and on
# two nodes: on the left rank 0's loss at every step, on the right each launch's wall time,
# split into the training steps (read from the records) and everything around them (starting
# processes, importing PyTorch, the rendezvous, saving the records). **Predict** first: which
# launch spends longest *around* the same steps?

# %% tags=["nbval-ignore-output"]
from distlab.widgets import launches
from distlab.widgets.display import show

import re


def done_in(output: str) -> float:
    """The seconds a run's report says torchrun took, from starting it to its exit (the `distlab run`
    command's own Python start and import are not in it)."""
    return float(re.search(r"distlab run: done in ([0-9.]+) s", output).group(1))


# like with like: each launch counted from its launcher's start to its end; the start of the
# `distlab run` command itself is in none of them (section 2 printed the terminal's wall time apart)
runs = {"notebook": (in_notebook, notebook_wall), "terminal": (from_terminal, done_in(terminal.stdout))}
if two_nodes is not None:
    runs["two nodes"] = (two_nodes, max(done_in(out) for out in outputs))
show(launches.launches_figure(runs))
for name, (records, wall) in runs.items():
    steps_s = launches.steps_seconds(records)
    print(f"{name:9s}: {wall:5.1f} s in all, {steps_s:5.2f} s of it in the {len(records[0].steps)} training steps")

# %% [markdown]
# The steps are a small part of every launch: a run of a few steps is mostly start-up. A job
# that trains for hours pays that start-up once, so there it hardly counts.

# %% [markdown]
# Why the launches differ around the same steps: `distlab.launch` starts one Python that imports
# PyTorch and distlab once and *forks* both ranks from it (lesson 00); torchrun from a terminal
# starts every rank as a fresh Python that imports them itself; on two nodes each node's torchrun
# does the same, and the two also meet at the rendezvous over the cable. Each bar runs from its
# launcher's start to its end: `distlab.launch`'s call, and torchrun's start to its exit (the
# "done in" of each report; on two nodes, the larger of the two). The start of the `distlab run`
# command itself is in no bar. One run of each on a shared machine: which grey part is longest
# is this run's reading, not a ranking.

# %% [markdown]
# ## 5. Inside a node, between nodes
#
# **Predict:** is the all-reduce between the two namespaces slower than inside one? And how
# close does either come to what lesson 03's model says this machine can do?
#
# On one node gloo's two ranks talk over TCP sockets through the kernel's loopback interface;
# between the namespaces, over TCP sockets through the veth pair. Either way the kernel copies
# the bytes within one machine's memory, on the same two cores, so expect them to be close.

# %% [markdown]
# Timing it needs care: a rank's time in the all-reduce includes *waiting* for the other rank to
# arrive, and bytes over that span is no bandwidth. The ranks of one machine share one clock, so
# the cell below also takes, for each step, the time from the **last** rank's arrival to the
# **first** rank's departure: the all-reduce alone (lesson 04 split each rank's time the same
# way). A ring rank sends 2(N-1)/N of the gradient: at N = 2, all of it.

# %% tags=["nbval-ignore-output"]
print(f"{sum(t.numel() for t in one_node[0].params.values()) * 4 / 1e6:.2f} MB of gradients each step")
where = {"inside one node": one_node} | ({"between two nodes": two_nodes} if two_nodes is not None else {})
for name, records in where.items():
    t = launches.all_reduce_seconds(records)
    alone = t["alone"]
    best, median = min(alone), statistics.median(alone)
    sent = alpha_beta.ring_bytes(t["bytes"], len(records))       # what each rank sends in a ring all-reduce
    print(f"{name:17s}: a rank's span {t['span'] * 1e3:5.2f} ms (waiting included); the all-reduce alone "
          f"{median * 1e3:5.2f} ms median ({best * 1e3:5.2f} to {max(alone) * 1e3:5.2f} over {len(alone)} steps) "
          f"-> {sent / best / 1e9:4.2f} GB/s each rank sent, at best")

# %% [markdown]
# Each line is one run of a few steps on a shared machine: its steps share that run's start-up
# and that moment's load, so they are no independent samples, and another run can come out in
# the other order. These two lines name no faster link: that takes repeated launches, judged by
# the course's one rule (`distlab.verdict`, lesson 01).

# %% [markdown]
# **Against lesson 03's model.** Lesson 03 priced a message of b bytes at α + bβ and each byte
# added at γ (Hockney 1994; [Thakur, Rabenseifner and Gropp 2005](https://doi.org/10.1177/1094342005051521)),
# and measured how many messages this machine moves at full speed at once (`lanes`). On 2 ranks
# each ring rank sends the other one half of the gradient, which the other adds into its own;
# then each sends back the half it summed: four messages in two steps. With one lane the two
# messages of a step take turns, so the model charges four α and both ranks' bytes one after the
# other: even with no α, each rank's bytes over the time come to at most half of 1/β. The cell
# below fits the link again as lesson 03 did, on two idle ranks of one node, splits the model's
# time into its terms and sets it against each line.

# %% tags=["nbval-ignore-output"]
# lesson 03's measurement, once, on two idle ranks of one node (its ping-pong sizes and repeats)
costs = distlab.launch(measure_costs.measure, world_size=2, sizes=(1_000,), repeats=3, algorithms=("ring",),
                       ping_pong_bytes=(8, 8_000, 80_000, 800_000, 4_000_000), ping_pong_repeats=10,
                       progress="none")[0]
distlab.shutdown()
link = cost_model.fit_link(costs["ping_pong"], costs["add"])
numel = sum(t.numel() for t in one_node[0].params.values())
model = alpha_beta.predict_time("ring", 2, numel, link)
alpha_s = model - alpha_beta.predict_time("ring", 2, numel, replace(link, alpha=0.0))
gamma_s = model - alpha_beta.predict_time("ring", 2, numel, replace(link, gamma=0.0, large_add=None))
terms = {"alpha (messages)": alpha_s, "beta (bytes copied)": model - alpha_s - gamma_s, "gamma (adding)": gamma_s}
print(f"the link, fitted now: {link}")
print(f"the model's ring all-reduce of these {numel:,} floats on 2 ranks: {model * 1e3:.2f} ms = "
      + " + ".join(f"{seconds * 1e3:.2f} ms {term}" for term, seconds in terms.items())
      + f"; the largest term: {max(terms, key=terms.get)}")
print(f"the same prices with a link per rank (lanes=None, as on a cluster): "
      f"{alpha_beta.predict_time('ring', 2, numel, replace(link, lanes=None)) * 1e3:.2f} ms")
for name, records in where.items():
    alone = launches.all_reduce_seconds(records)["alone"]
    print(f"{name:17s}: model / measured {model / statistics.median(alone):.2f} against the median step, "
          f"{model / min(alone):.2f} against the best (1 = the model accounts for all of it)")

# %% [markdown]
# How to read it. The terms say where the model puts this gradient's time (the cell names the
# largest), and the link-per-rank line what the same prices give when each rank has its own link.
# A ratio near 1: α, β, γ and the lanes account for the all-reduce's time in training. Well below
# 1: training paid for something the idle ping-pong did not, such as other work on the same two
# cores (lesson 05's "Which alpha?" compares the two fits). Above 1: the all-reduce beat the
# model, for instance gloo overlapping the two directions where the fitted lanes make them take
# turns. Both lines use one node's fit and one run each: whether the veth cable costs more than
# loopback would take a fit between the namespaces, or repeated launches judged by the one rule.

# %% [markdown]
# **On a real cluster** the two links differ a lot, and they are hardware you can look up. In
# an H100 or H200 node the GPUs talk over NVLink through NVSwitches; between nodes each GPU has
# a network card of its own (InfiniBand NDR or RoCE), wired rail by rail to the other nodes'
# GPUs ([DGX H100 user guide](https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html),
# [NVIDIA's HGX reference architecture](https://docs.nvidia.com/enterprise-reference-architectures/hgx-ai-factory-h100-h200-b200/latest/network-logical-architecture.html),
# [S. Bekman's ML engineering notes](https://github.com/stas00/ml-engineering/tree/master/network)).
# The cell below prints the published rates, per GPU, each way.

# %%
# published peak rates, per GPU and direction (bytes per second); nothing here is measured
NVLINK_4 = 18 * 25e9          # H100/H200: 18 NVLink 4 links of 25 GB/s each way (900 GB/s both ways)
NIC_400G = 400e9 / 8          # one 400 Gb/s InfiniBand NDR / RoCE port per GPU
print(f"inside a node (NVLink 4):       {NVLINK_4 / 1e9:4.0f} GB/s per GPU, each way")
print(f"between nodes (400 Gb/s NIC):   {NIC_400G / 1e9:4.0f} GB/s per GPU, each way")
print(f"inside / between: {NVLINK_4 / NIC_400G:.0f} x")

# %% [markdown]
# So on a cluster a byte between nodes costs several times (the ratio printed above) what it
# costs inside one, even with a card per GPU. That is why multi-GPU in one node scales more easily than multi-node,
# why hierarchical all-reduce sums inside each node first, and why tensor parallelism and ZeRO-3
# (lessons 07-08) are kept inside a node where possible.

# %% [markdown]
# ## 6. The same run as a cluster job
#
# Each scheduler asks the same questions (how many nodes, how many processes each, what to
# run) in its own words, and then starts the same rank program,
# `python -m distlab.cluster.config_rank run.yaml`. From your config (as 2 nodes of 4 GPUs):

# %%
cluster = run_config.load(path, ["launch.nodes=2", "launch.processes_per_node=4", "launch.device=cuda"])
print(job_files.slurm(cluster, config_file="run.yaml"))

# %% [markdown]
# **SLURM** gives the job its nodes; one task per node runs torchrun, on the Python installed
# on the nodes, and the first node of the allocation hosts the rendezvous.
#
# **The image.** Azure ML, Vertex AI and Kubernetes start a *container* on each node, pulled
# from a registry by its full name. `distlab:latest` on your laptop is no such name: no cloud
# can pull it. So a cloud job needs one more step, and the config names its result
# (`launch.image`); without it `distlab job` refuses:

# %%
try:
    job_files.azureml(cluster, config_file="run.yaml")
except run_config.ConfigError as err:
    print(err)

# %% [markdown]
# Build the image from the repository's `docker/Dockerfile` (Python, PyTorch, distlab), push
# it to a registry your cloud can pull from (Azure Container Registry, Google's Artifact
# Registry), and put its name in the config:
#
# ```bash
# docker build -f docker/Dockerfile -t myregistry.azurecr.io/distlab:0.1 .
# docker push myregistry.azurecr.io/distlab:0.1
# distlab job azureml run.yaml --set launch.image=myregistry.azurecr.io/distlab:0.1 -o job.yml
# ```
#
# **Azure ML** then starts the processes itself: `process_count_per_instance` per node,
# `instance_count` nodes (Horovod runs use its MPI form):

# %%
azure = run_config.load(path, ["launch.nodes=2", "launch.processes_per_node=4", "launch.device=cuda",
                               "launch.image=myregistry.azurecr.io/distlab:0.1"])
print(job_files.azureml(azure, config_file="run.yaml"))

# %% [markdown]
# **Vertex AI** (Google Cloud) takes a *custom job* of **worker pools**: pool 0 is the primary
# replica (node 0, which hosts the rendezvous), pool 1 the other nodes; each names a machine
# type, its GPUs and the container. Vertex tells each replica its place in a `CLUSTER_SPEC`
# variable; the container's `distlab.cluster.vertex_node` turns that into the torchrun line
# `distlab run --node-rank` starts, whose ranks run `config_rank`. The config rides in the job
# (`DISTLAB_RUN_CONFIG`), as in Kubernetes' ConfigMap. Here with that variable shortened:

# %%
google = run_config.load(path, ["launch.nodes=2", "launch.processes_per_node=4", "launch.device=cuda",
                                "launch.image=europe-west4-docker.pkg.dev/my-project/distlab/distlab:0.1"])
vertex_job = yaml.safe_load(job_files.vertex(google, config_file="run.yaml"))
for pool in vertex_job["workerPoolSpecs"]:
    pool["containerSpec"]["env"][0]["value"] = "<run.yaml: every key of the config above>"
print(job_files.SUBMIT["vertex"].format(name=google.logging.name, path="vertex_job.yaml"))
print(yaml.safe_dump(vertex_job, sort_keys=False))

# %% [markdown]
# **What a cloud job's config file is for.** Both answer the same questions, in their own words:
#
# | the question | Azure ML command job | Vertex AI custom job |
# |---|---|---|
# | what runs | `command`, `environment.image` | `containerSpec`: `imageUri`, `command` |
# | on how many machines | `resources.instance_count` | `replicaCount` of pools 0 and 1 |
# | on what machines | `compute` (a cluster you made) | `machineSpec`: type, GPU kind and count |
# | how many ranks per machine | `distribution.process_count_per_instance` | torchrun's `--nproc-per-node` |
# | how ranks find each other | Azure sets `MASTER_ADDR`, `RANK`, ... | `CLUSTER_SPEC`, read by `vertex_node` |
#
# The file is also the record: kept with the code, it says what ran. Both consoles (Azure ML
# studio's *Jobs*, Vertex AI's *Training > Custom jobs*) show each node's logs while it runs.

# %% [markdown]
# **Kubernetes**, with Kubeflow's training operator: a `PyTorchJob` with one Master and Workers
# (a pod per node) and `nprocPerNode`; the operator tells each pod's torchrun its node rank and
# where the Master is. The config travels in a ConfigMap. Its job part:

# %%
configmap, job = yaml.safe_load_all(job_files.k8s(azure, config_file="run.yaml"))
print(yaml.safe_dump(job["spec"], sort_keys=False)[:900])

# %% [markdown]
# In a terminal: `distlab job slurm run.yaml -o job.sbatch` (or `azureml`, `vertex`, `k8s`)
# writes them; the tests check each with the tool that reads it (Azure ML's `load_job`,
# Vertex AI's own `CustomJobSpec` type and a run of its container's command, `bash` and a run
# of the torchrun line, Kubeflow's schema).

# %% [markdown]
# ## Exercises
#
# **1.** A job of 4 nodes with 8 processes each. Which global rank does local rank 3 of the node
# that joined as node 2 get?

# %%
from distlab.course import exercises_cluster as exercises

my_rank = ...       # a whole number

exercises.global_rank(my_rank, node=2, local_rank=3, processes_per_node=8)

# %% [markdown]
# **2.** This config is refused. Which `--set` overrides fix it, keeping its 2 x 4 ranks and a
# batch within 10% of 100? (A list of strings such as `"training.steps=50"`.)

# %%
print(yaml.safe_dump(exercises.BROKEN_CONFIG, sort_keys=False))
try:
    run_config.RunConfig.parse(exercises.BROKEN_CONFIG)
except run_config.ConfigError as err:
    print(err)

# %%
my_overrides = ...  # e.g. ["section.key=value"]

exercises.fix_the_config(my_overrides)

# %% [markdown]
# **3. Build it: what torchrun tells each process.** Write the environment torchrun gives the
# process with local rank `local_rank` on the node that joined as `node`, in a job of `nodes`
# nodes of `processes_per_node` processes: a dict of `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
# `LOCAL_WORLD_SIZE` and `GROUP_RANK` (the node's rank), as whole numbers. The checker starts
# such a job for real, one torchrun per "node" on this machine (2 nodes x 3 processes, each
# process only writing down what it received), and compares it with yours, process by process.

# %%
def my_rank_environment(nodes, processes_per_node, node, local_rank):
    """The variables torchrun sets for one process: {"RANK": ..., "LOCAL_RANK": ..., ...}."""
    ...


exercises.rank_environment(my_rank_environment)

# %% [markdown]
# ## What we saw
#
# - A config file is the run written down: the notebook (`distlab.launch(path)`), the terminal
#   (`distlab run`) and every scheduler read the same file and train the same thing.
# - On several nodes, torchrun meets at a rendezvous on the first node and hands out global
#   ranks node by node; gloo must be told which interface to use when the host name resolves to
#   loopback.
# - Two nodes trained exactly like one (when this machine could make them): distributing over
#   machines changes where bytes travel and what a launch does around the steps (fresh processes,
#   a rendezvous over the network), not what is computed.

# %% [markdown]
# - A rank's time in an all-reduce includes waiting for the others: time the all-reduce alone
#   before dividing bytes by it, and set it against lesson 03's model, whose terms (α per message,
#   β per byte with the lanes the machine has, γ per byte added) say where the time should go.
#   Here both "links" were the kernel copying within one machine, so they say little about
#   clusters; on a real one NVLink inside a node is several times faster than even a network
#   card per GPU between nodes, and that decides how the work is split.
# - A cloud job runs an image it can pull (`launch.image`, built from `docker/Dockerfile`);
#   Azure ML, Vertex AI and Kubernetes jobs come from the same config.
# - For the insurance company: start on one node with several GPUs, and go multi-node when the
#   data or the model outgrows it, with the same config.

# %% [markdown]
# **Previous:** [08 · ZeRO: sharding what every worker used to copy](08_zero_sharding_what_every_worker_copied.ipynb) · **Next:** [10 · Failure is normal at scale](10_failure_is_normal_at_scale.ipynb) · [The course: map, glossary, solutions](../course/README.md)
