"""One run config, four clusters: an Azure ML command job, a SLURM batch script, a Kubernetes PyTorchJob,
a Vertex AI custom job.

Introduced in lesson 09.  Each scheduler asks the same questions in its own words (how many
nodes, how many processes on each, what to run, what each node needs) and then starts the
same rank program, ``python -m distlab.cluster.config_rank CONFIG``:

* **Azure ML** starts the processes itself: ``distribution: pytorch`` with
  ``process_count_per_instance`` (processes per node) and ``resources.instance_count`` (nodes);
  it sets RANK, WORLD_SIZE, MASTER_ADDR... in each.  Horovod runs use the MPI form
  (``distribution: mpi``), where Horovod learns its rank from MPI.
* **SLURM** gives us nodes; one task per node runs torchrun, which starts the node's ranks and
  meets the other nodes' torchruns at a c10d rendezvous on the first node.
* **Kubernetes** with Kubeflow's training operator: a ``PyTorchJob`` with a Master and Workers
  (one pod per node) and ``nprocPerNode``; the operator hands torchrun its node count, node rank
  and rendezvous address through ``PET_*`` variables.  The config travels as a ConfigMap.
* **Vertex AI** (Google Cloud): a custom job's worker pools, pool 0 the primary replica (one node),
  pool 1 the other nodes, each with a machine type, accelerators and a container.  Vertex tells
  each replica its place in ``CLUSTER_SPEC``; ``cluster/vertex_node.py`` turns that into the
  same torchrun line ``distlab run --node-rank`` starts.  The config travels in the job itself.

The three container clouds pull an **image**: ``launch.image``, REGISTRY/distlab:TAG, built from
``docker/Dockerfile`` and pushed to a registry the cluster can reach (Azure Container Registry,
Google's Artifact Registry, ...).  A job file without one is refused: ``distlab:latest`` exists
only on the machine that built it.  SLURM runs the nodes' own Python and needs none.

Each function returns the file's text; ``distlab job TARGET CONFIG`` writes it.
"""
from __future__ import annotations

import re
import shlex

import yaml

from .config import ConfigError, RunConfig

RANK_PROGRAM = "distlab.cluster.config_rank"
SUBMIT = {"azureml": "az ml job create --file {path}", "slurm": "sbatch {path}", "k8s": "kubectl apply -f {path}",
          "vertex": "gcloud ai custom-jobs create --region=REGION --display-name={name} --config={path}"}


def _gpus(config: RunConfig) -> int:
    """GPUs to ask for per node: one per rank, unless the run is CPU only."""
    return config.launch.processes_per_node if config.launch.device == "cuda" else 0


def image(config: RunConfig, target: str) -> str:
    """Lesson 09: the image a container cloud pulls (``launch.image``), or a clear error saying how to make one."""
    if config.launch.image is None:
        raise ConfigError(f"distlab job {target} needs launch.image, an image the cluster can pull: build it "
                          "(docker build -f docker/Dockerfile -t REGISTRY/distlab:TAG .), push it (docker push "
                          "REGISTRY/distlab:TAG), then --set launch.image=REGISTRY/distlab:TAG")
    return config.launch.image


def azureml(config: RunConfig, config_file: str = "run.yaml") -> str:
    """Lesson 09: an Azure ML (SDK/CLI v2) command job running ``config`` from this folder's code."""
    launch = config.launch
    if launch.backend == "horovod":
        distribution = {"type": "mpi", "process_count_per_instance": launch.processes_per_node}
    else:
        distribution = {"type": "pytorch", "process_count_per_instance": launch.processes_per_node}
    job = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json",
        "type": "command",
        "display_name": config.logging.name,
        "experiment_name": "distlab",
        "description": f"distlab run config {config_file}: {config.parallel.strategy} parallelism, "
                       f"{launch.nodes} node(s) x {launch.processes_per_node} processes",
        "code": ".",        # this folder is uploaded; `python -m` finds distlab in it
        "command": f"python -m {RANK_PROGRAM} {shlex.quote(config_file)}",
        "environment": {"image": image(config, "azureml")},
        "compute": "azureml:gpu-cluster" if _gpus(config) else "azureml:cpu-cluster",
        "resources": {"instance_count": launch.nodes},
        "distribution": distribution,
        "environment_variables": {"OMP_NUM_THREADS": "1"},
    }
    return ("# Azure ML command job written by `distlab job azureml` from the run config; submit with\n"
            "#   az ml job create --file THIS_FILE   (the compute name must be one of your workspace's)\n"
            + yaml.safe_dump(job, sort_keys=False))


def slurm(config: RunConfig, config_file: str = "run.yaml") -> str:
    """Lesson 09: a SLURM batch script: one torchrun per node, c10d rendezvous on the first node."""
    launch = config.launch
    lines = ["#!/bin/bash",
             f"# distlab job for {config_file}: {launch.nodes} node(s) x {launch.processes_per_node} ranks "
             f"({config.parallel.strategy} parallelism on {launch.backend})",
             f"#SBATCH --job-name={config.logging.name}",
             f"#SBATCH --nodes={launch.nodes}",
             "#SBATCH --ntasks-per-node=1            # one launcher per node: it starts that node's ranks",
             f"#SBATCH --cpus-per-task={launch.processes_per_node}"]
    if _gpus(config):
        lines.append(f"#SBATCH --gpus-per-node={_gpus(config)}")
    lines += ["#SBATCH --time=01:00:00",
              f"#SBATCH --output={config.logging.name}-%j.out",
              "set -euo pipefail",
              "# the first node of the allocation hosts the rendezvous",
              'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              "export OMP_NUM_THREADS=1"]
    if launch.image:
        lines.append(f"# launch.image ({launch.image}) is for the container clouds: this runs the nodes' own Python")
    if launch.backend == "horovod":
        lines += ["# horovodrun, on the first node, starts every rank (on the others over ssh)",
                  'HOSTS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | '
                  f"sed 's/$/:{launch.processes_per_node}/' | paste -sd, -)",
                  f'horovodrun -np {launch.world_size} --gloo -H "$HOSTS" python -m {RANK_PROGRAM} '
                  f"{shlex.quote(config_file)}"]
    else:
        lines += ["srun --kill-on-bad-exit=1 python -m torch.distributed.run \\",
                  f"  --nnodes={launch.nodes} --nproc-per-node={launch.processes_per_node} \\",
                  f'  --rdzv-backend=c10d --rdzv-endpoint="$HEAD_NODE:{launch.port}" --rdzv-id="$SLURM_JOB_ID" \\',
                  f"  --max-restarts={config.launch.max_restarts} \\",
                  f"  -m {RANK_PROGRAM} {shlex.quote(config_file)}"]
    return "\n".join(lines) + "\n"


def k8s_name(name: str) -> str:
    """A Kubernetes object name (lower case, digits and '-', at most 63 characters)."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    if not out:
        raise ConfigError(f"logging.name {name!r} gives no usable Kubernetes name")
    return out


def k8s(config: RunConfig, config_file: str = "run.yaml") -> str:
    """Lesson 09: a ConfigMap holding the config and a Kubeflow ``PyTorchJob`` that runs it."""
    launch = config.launch
    if launch.backend == "horovod":
        raise ConfigError("distlab job k8s writes a PyTorchJob (torchrun); a Horovod run would need an MPIJob: "
                          "use launch.backend torchrun")
    pulled = image(config, "k8s")
    name = k8s_name(config.logging.name)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
                 "data": {"run.yaml": yaml.safe_dump(config.model_dump(), sort_keys=False)}}

    def replica(count: int) -> dict:
        container = {"name": "pytorch",            # the training operator looks for this name
                     "image": pulled,
                     "command": ["python", "-m", "torch.distributed.run",
                                 f"--max-restarts={config.launch.max_restarts}", "-m", RANK_PROGRAM,
                                 "/etc/distlab/run.yaml"],
                     "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/distlab"}]}
        if _gpus(config):
            container["resources"] = {"limits": {"nvidia.com/gpu": _gpus(config)}}
        return {"replicas": count, "restartPolicy": "Never",
                "template": {"spec": {"containers": [container],
                                      "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}]}}}

    specs = {"Master": replica(1)}
    if launch.nodes > 1:
        specs["Worker"] = replica(launch.nodes - 1)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
           "spec": {"nprocPerNode": str(launch.processes_per_node),      # the operator sets PET_* for torchrun
                    "runPolicy": {"cleanPodPolicy": "None"},
                    "pytorchReplicaSpecs": specs}}
    return ("# Kubernetes (Kubeflow training operator) job written by `distlab job k8s`; submit with\n"
            "#   kubectl apply -f THIS_FILE      (the image must hold distlab and its dependencies)\n"
            + yaml.safe_dump_all([configmap, job], sort_keys=False))


# Vertex AI machines (lesson 09): GPU nodes of 1, 2, 4 or 8 H100s, or a CPU machine with a core per rank
GPU_MACHINES = {1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"}
CPU_MACHINES = [4, 8, 16, 32, 64, 96]                   # n1-standard-K: K virtual CPUs


def vertex_machine(config: RunConfig, machine_type: str | None = None, accelerator_type: str | None = None) -> dict:
    """Lesson 09: a Vertex AI ``MachineSpec`` for one node of ``config``: the given types, or one GPU per rank."""
    ranks = config.launch.processes_per_node
    if _gpus(config):
        if machine_type is None and ranks not in GPU_MACHINES:
            raise ConfigError(f"no A3 machine has {ranks} GPUs (they have {', '.join(map(str, GPU_MACHINES))}): "
                              "give --machine-type and --accelerator-type, or change launch.processes_per_node")
        return {"machineType": machine_type or GPU_MACHINES[ranks],
                "acceleratorType": accelerator_type or "NVIDIA_H100_80GB", "acceleratorCount": ranks}
    if accelerator_type:
        raise ConfigError("--accelerator-type asks for GPUs, but launch.device is not cuda: set launch.device=cuda")
    cores = next((k for k in CPU_MACHINES if k >= ranks), None)
    if machine_type is None and cores is None:
        raise ConfigError(f"{ranks} CPU ranks on one node is more than any n1-standard machine: give --machine-type")
    return {"machineType": machine_type or f"n1-standard-{cores}"}


def vertex(config: RunConfig, config_file: str = "run.yaml", machine_type: str | None = None,
           accelerator_type: str | None = None) -> str:
    """Lesson 09: a Vertex AI custom job's spec, as ``gcloud ai custom-jobs create --config`` reads it.

    Worker pool 0 is the primary replica (exactly one: node 0, which hosts the rendezvous), pool 1
    the other ``nodes - 1``.  Every replica runs the same container: ``vertex_node`` reads where it
    stands from Vertex's ``CLUSTER_SPEC`` and starts the torchrun line of ``distlab run --node-rank``,
    whose ranks run ``config_rank`` on the config carried in ``DISTLAB_RUN_CONFIG``.
    """
    launch = config.launch
    if launch.backend == "horovod":
        raise ConfigError("distlab job vertex starts torchrun on every replica; horovodrun would need ssh between "
                          "them: use launch.backend torchrun")
    container = {"imageUri": image(config, "vertex"),
                 "command": ["python", "-m", "distlab.cluster.vertex_node"],
                 "env": [{"name": "DISTLAB_RUN_CONFIG", "value": yaml.safe_dump(config.model_dump(), sort_keys=False)},
                         {"name": "OMP_NUM_THREADS", "value": "1"}]}
    machine = vertex_machine(config, machine_type, accelerator_type)
    pools = [{"machineSpec": machine, "replicaCount": count, "containerSpec": container}
             for count in ([1, launch.nodes - 1] if launch.nodes > 1 else [1])]
    return (f"# Vertex AI custom job written by `distlab job vertex` from {config_file}: {launch.nodes} node(s) x "
            f"{launch.processes_per_node} ranks; submit with\n"
            f"#   {SUBMIT['vertex'].format(name=config.logging.name, path='THIS_FILE')}\n"
            + yaml.dump({"workerPoolSpecs": pools}, Dumper=_Readable, sort_keys=False, width=1000))


class _Readable(yaml.SafeDumper):
    """YAML with the config as a block of lines (not one quoted string) and no anchors for repeated parts."""

    def ignore_aliases(self, data):
        return True


_Readable.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


TARGETS = {"azureml": azureml, "slurm": slurm, "k8s": k8s, "vertex": vertex}
