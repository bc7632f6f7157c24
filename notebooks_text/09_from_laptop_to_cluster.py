# %% [markdown]
# # Lesson 09 · From laptop to cluster
#
# **Goal of this lesson.** Everything so far ran from a notebook cell on one machine. The
# insurance company's real training will run on a cluster: several GPUs in one machine, or
# several machines (*nodes*), started by a scheduler (SLURM, Azure Machine Learning,
# Kubernetes) that never sees this notebook. By the end of this lesson you can:
#
# 1. say what a job's **config file** is for, and write one for your own run;
# 2. run the same training from a **terminal** with `distlab run`, on torchrun or horovodrun;
# 3. explain what torchrun does on **several nodes**: the rendezvous, global and local ranks;
# 4. run a job on **two nodes for real** (two network namespaces on this machine) and check it
#    trains exactly like one node;
# 5. compare the links **inside a node** and **between nodes**;
# 6. turn your config into an **Azure ML**, **SLURM** and **Kubernetes** job.

# %%
import os
import subprocess
import sys
import tempfile

import yaml

import distlab
from distlab import config as run_config
from distlab import fake_nodes, job_files, run
from distlab.parallel import data_parallel

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
# can time the all-reduce on its own):

# %%
mine = run_config.from_launch(data_parallel.train, 2, method="fused", model="mlp", width=512,
                              global_batch_size=64, steps=8, lr=0.1, seed=0)
mine.logging.dir, mine.launch.port = os.path.join(WORK, "runs"), 29811
path = mine.save(os.path.join(WORK, "run.yaml"))
text = open(path).read()
print(text.replace(WORK, "WORK"))

# %% [markdown]
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
in_notebook = distlab.launch(path, progress="none")
print(f"{len(in_notebook)} ranks, final loss {in_notebook[0].losses[-1]:.4f}")
distlab.shutdown()       # let the notebook's warm ranks go: the next runs start their own

# %% [markdown]
# ## 2. The same run from a terminal
#
# In a terminal, `distlab run run.yaml` does what a cluster does: it hands the config to
# **torchrun** (`launch.backend: horovod`: to **horovodrun**), whose ranks each read the config,
# join the job and train; it shows their progress and, at the end, what they reached. No warm
# ranks, no widgets: the same training function, started by the engine clusters use.

# %% tags=["nbval-ignore-output"]
terminal = subprocess.run([sys.executable, "-m", "distlab.cli", "run", path], capture_output=True, text=True)
print(terminal.stdout.replace(WORK, "WORK")[-1500:], terminal.stderr[-1500:])

# %%
from_terminal = run.records(mine)
gap = max(distlab.max_param_difference(a.params, b.params) for a, b in zip(from_terminal, in_notebook))
print(f"exit code {terminal.returncode}; the terminal's parameters equal the notebook's exactly: {gap == 0.0}")
assert terminal.returncode == 0 and gap == 0.0

# %% [markdown]
# ## 3. Several nodes: what torchrun does
#
# On one node torchrun starts `--nproc-per-node` processes and gives each three numbers: its
# **local rank** (which GPU of this node), its **global rank** and the **world size**. On several
# nodes the same torchrun command runs on *every* node, and they must first find each other:
# the **rendezvous**. With `--rdzv-backend=c10d` the first node hosts a small key-value store at
# `--rdzv-endpoint host:port`; every node's torchrun connects, they agree on who is in the job,
# and global ranks are handed out node by node (node 0's ranks first). Then the ranks open
# their own connections for the collectives.
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
# reach the other only over that cable, as on two machines (`distlab.fake_nodes`; it needs root,
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
        two_nodes, outputs = fake_nodes.run_config(nodes, spread, WORK)
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
# ## 5. Inside a node, between nodes
#
# **Predict:** is the all-reduce between the two namespaces slower than inside one?
#
# Here both are memory copies inside one machine (the veth cable is the kernel moving bytes),
# so expect them to be close; what matters is how to read them. On a real cluster the gap is
# large: GPUs in one node talk over NVLink (hundreds of GB/s per GPU) or PCIe (tens of GB/s);
# nodes talk over InfiniBand or Ethernet (typically 12 to 50 GB/s per link, shared by all the
# node's GPUs). That is why multi-GPU in one node scales more easily than multi-node, why
# hierarchical all-reduce sums inside each node first, and why ZeRO-3 or tensor parallelism
# (lessons 07-08) are kept inside a node where possible.

# %% tags=["nbval-ignore-output"]
import statistics


def all_reduce_gbps(records, skip=2):
    """Gradient bytes over the median time of one all-reduce (steps after the first ``skip``)."""
    r = records[0]
    seconds = statistics.median(s.t_comm_end - s.t_comm_start for s in r.steps[skip:])
    size = sum(t.numel() for t in r.params.values()) * 4
    return size / seconds / 1e9, seconds


print(f"{sum(t.numel() for t in one_node[0].params.values()) * 4 / 1e6:.2f} MB of gradients each step")
inside, t_in = all_reduce_gbps(one_node)
print(f"inside one node:  {t_in * 1e3:6.2f} ms per all-reduce, {inside:5.2f} GB/s")
if two_nodes is not None:
    between, t_out = all_reduce_gbps(two_nodes)
    print(f"between two nodes: {t_out * 1e3:6.2f} ms per all-reduce, {between:5.2f} GB/s "
          f"({between / inside:.2f} x inside)")

# %% [markdown]
# Each figure is the median over 6 steps of one run; on a shared machine the next run may
# differ by tens of percent. Read it against the gap above, not as a property of the cable.

# %% [markdown]
# ## 6. The same run as a cluster job
#
# Each scheduler asks the same questions (how many nodes, how many processes each, what to
# run) in its own words, and then starts the same rank program,
# `python -m distlab.processes.config_rank run.yaml`. From your config (as 2 nodes of 4 GPUs):

# %%
cluster = run_config.load(path, ["launch.nodes=2", "launch.processes_per_node=4", "launch.device=cuda"])
print(job_files.slurm(cluster, config_file="run.yaml"))

# %% [markdown]
# **SLURM** gives the job its nodes; one task per node runs torchrun, and the first node of the
# allocation hosts the rendezvous. **Azure ML** starts the processes itself:
# `process_count_per_instance` per node, `instance_count` nodes (Horovod runs use its MPI form):

# %%
print(job_files.azureml(cluster, config_file="run.yaml"))

# %% [markdown]
# **Kubernetes**, with Kubeflow's training operator: a `PyTorchJob` with one Master and Workers
# (a pod per node) and `nprocPerNode`; the operator tells each pod's torchrun its node rank and
# where the Master is. The config travels in a ConfigMap. Its job part:

# %%
configmap, job = yaml.safe_load_all(job_files.k8s(cluster, config_file="run.yaml", image="registry.example/distlab:0.1"))
print(yaml.safe_dump(job["spec"], sort_keys=False)[:900])

# %% [markdown]
# In a terminal: `distlab job slurm run.yaml -o job.sbatch` (or `azureml`, `k8s`) writes them;
# the tests check each with the tool that reads it (Azure ML's `load_job`, `bash` and a run of
# the torchrun line, Kubeflow's schema).

# %% [markdown]
# ## Exercises
#
# **1.** A job of 4 nodes with 8 processes each. Which global rank does local rank 3 of the node
# that joined as node 2 get?

# %%
from distlab import exercises

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
# ## What we saw
#
# - A config file is the run written down: the notebook (`distlab.launch(path)`), the terminal
#   (`distlab run`) and every scheduler read the same file and train the same thing.
# - On several nodes, torchrun meets at a rendezvous on the first node and hands out global
#   ranks node by node; gloo must be told which interface to use when the host name resolves to
#   loopback.
# - Two nodes trained exactly like one (when this machine could make them): distributing over
#   machines changes where bytes travel, not what is computed.
# - Here both "links" were memory copies inside one machine, so section 5's ratio says little
#   about clusters; on a real one the links between nodes are several times slower than those
#   inside a node, and that decides how the work is split. For the insurance company: start on
#   one node with several GPUs, and go multi-node when the data or the model outgrows it, with
#   the same config.

# %% [markdown]
# **Previous:** [08 · ZeRO: sharding what every worker used to copy](08_zero_sharding_what_every_worker_copied.ipynb) · **Next:** [10 · Failure is normal at scale](10_failure_is_normal_at_scale.ipynb) · [The course: map, glossary, solutions](../course/README.md)
