"""Lesson 09: the job files `distlab job` writes, each checked by the real tool that reads it.

Azure ML's command job goes through the official `azure-ai-ml` package's `load_job` (no workspace
or network needed); the SLURM script through `bash -n` and then for real, with `srun` and
`scontrol` standing in for SLURM's on one node; the Kubernetes PyTorchJob through Kubeflow's own
schema for it (tests/data, from the training operator's CRD); the Vertex AI custom job through
`google-cloud-aiplatform`'s own CustomJobSpec type (its protobuf parser refuses unknown fields and
unknown machine or accelerator names), and its container's command run for real on one node
with a CLUSTER_SPEC like Vertex's.  ``distlab job`` itself runs in this process (``cli_here``, issue 25:
a new Python's imports cost 3-20 s a call); the scripts it writes run as they would on a cluster.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from distlab.cluster import job_files
from distlab.cluster.config import ConfigError, RunConfig
from distlab.cluster import vertex_node

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "registry.example/distlab:0.1"


def config(**sections):
    data = {"model": {"width": 16}, "training": {"steps": 4, "global_batch_size": 32},
            "launch": {"processes_per_node": 2, "port": 29671, "image": IMAGE}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return RunConfig.parse(data)


def write_config(tmp_path, c, name="run.yaml"):
    return c.save(str(tmp_path / name))


# ---------------------------------------------------------------- Azure ML

@pytest.mark.parametrize("backend,distribution", [("torchrun", "PyTorchDistribution"), ("horovod", "MpiDistribution")])
def test_the_azureml_job_loads_with_the_official_sdk(tmp_path, backend, distribution, cli_here, monkeypatch):
    from azure.ai.ml import load_job

    c = config(launch={"backend": backend, "nodes": 3, "processes_per_node": 4}, training={"global_batch_size": 48})
    write_config(tmp_path, c)
    monkeypatch.chdir(tmp_path)
    out = cli_here("job", "azureml", "run.yaml", "-o", "job.yml")
    assert out.returncode == 0, out.stderr
    job = load_job(source=str(tmp_path / "job.yml"))
    assert type(job.distribution).__name__ == distribution
    assert job.distribution.process_count_per_instance == 4
    assert job.resources.instance_count == 3
    assert job.command == "python -m distlab.cluster.config_rank run.yaml"
    assert job.environment.image == IMAGE


def test_load_job_is_a_real_check(tmp_path):
    from azure.ai.ml import load_job
    from marshmallow.exceptions import ValidationError

    text = job_files.azureml(config()).replace("process_count_per_instance", "processes_per_instance")
    (tmp_path / "bad.yml").write_text(text)
    with pytest.raises((ValidationError, Exception), match="processes_per_instance"):
        load_job(source=str(tmp_path / "bad.yml"))


# ---------------------------------------------------------------- SLURM

def fake_slurm(tmp_path) -> dict:
    """`srun` and `scontrol` for one node: srun drops its own options and runs the command."""
    bin_dir = tmp_path / "fake_slurm"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && echo 127.0.0.1\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "SLURM_JOB_NODELIST": "node001", "SLURM_JOB_ID": "4242"}


def test_the_slurm_script_parses_and_its_torchrun_line_runs(tmp_path, cli_here, monkeypatch):
    c = config(logging={"dir": str(tmp_path / "runs"), "name": "slurm"})
    write_config(tmp_path, c)
    script = tmp_path / "job.sbatch"
    monkeypatch.chdir(tmp_path)
    out = cli_here("job", "slurm", "run.yaml", "-o", str(script))
    assert out.returncode == 0, out.stderr
    text = script.read_text()
    assert "#SBATCH --nodes=1" in text and "--rdzv-backend=c10d" in text and '"$HEAD_NODE:29671"' in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=fake_slurm(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = sorted(p.name for p in (tmp_path / "runs" / "slurm").glob("record_*.pt"))
    assert records == ["record_0.pt", "record_1.pt"]


def test_a_multi_node_slurm_script_asks_for_every_node(tmp_path):
    text = job_files.slurm(config(launch={"nodes": 4, "device": "cuda"}))
    assert "#SBATCH --nodes=4" in text and "#SBATCH --gpus-per-node=2" in text and "--nnodes=4" in text
    (tmp_path / "job.sbatch").write_text(text)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0
    horovod = job_files.slurm(config(launch={"nodes": 2, "backend": "horovod"}))
    assert "horovodrun -np 4 --gloo" in horovod
    (tmp_path / "h.sbatch").write_text(horovod)
    assert subprocess.run(["bash", "-n", str(tmp_path / "h.sbatch")]).returncode == 0


# ---------------------------------------------------------------- Kubernetes

def strict(schema):
    """Kubeflow's schema, refusing unknown fields (the API server would silently drop them)."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


SCHEMA = strict(json.loads((ROOT / "tests" / "data" / "kubeflow_pytorchjob_v1.schema.json").read_text()))


@pytest.mark.parametrize("nodes", [1, 4])
def test_the_pytorchjob_matches_kubeflows_schema(nodes):
    c = config(launch={"nodes": nodes}, logging={"name": "Handwriting_DDP"})
    configmap, job = yaml.safe_load_all(job_files.k8s(c))
    jsonschema.validate(job, SCHEMA)
    assert {p["template"]["spec"]["containers"][0]["image"] for p in job["spec"]["pytorchReplicaSpecs"].values()} \
        == {IMAGE}
    assert job["metadata"]["name"] == "handwriting-ddp"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs.get("Worker", {"replicas": 0})["replicas"] == nodes - 1
    assert job["spec"]["nprocPerNode"] == "2"
    assert RunConfig.parse(yaml.safe_load(configmap["data"]["run.yaml"])) == c
    assert configmap["metadata"]["name"] == specs["Master"]["template"]["spec"]["volumes"][0]["configMap"]["name"]


def test_the_schema_check_bites():
    _, job = yaml.safe_load_all(job_files.k8s(config()))
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, SCHEMA)
    _, job = yaml.safe_load_all(job_files.k8s(config()))
    job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicies"] = "Never"
    with pytest.raises(jsonschema.ValidationError, match="restartPolicies"):
        jsonschema.validate(job, SCHEMA)


def test_unsupported_targets_and_backends_are_refused(tmp_path, cli_here, monkeypatch):
    with pytest.raises(ConfigError, match="would need an MPIJob"):
        job_files.k8s(config(launch={"backend": "horovod"}))
    write_config(tmp_path, config())
    monkeypatch.chdir(tmp_path)
    out = cli_here("job", "lsf", "run.yaml")
    assert out.returncode == 2 and "no job target 'lsf': choose one of azureml, slurm, k8s, vertex" in out.stderr
    out = cli_here("job", "slurm", "run.yaml", "--machine-type", "a3-highgpu-8g")
    assert out.returncode == 2 and "--machine-type and --accelerator-type are Vertex AI's" in out.stderr


# ---------------------------------------------------------------- the image a cloud pulls

@pytest.mark.parametrize("target", ["azureml", "k8s", "vertex"])
def test_a_container_job_needs_an_image_a_cloud_can_pull(tmp_path, target, cli_here, monkeypatch):
    """No default image: `distlab:latest` exists only where it was built, and a cloud cannot pull it."""
    c = config()
    c.launch.image = None
    write_config(tmp_path, c)
    monkeypatch.chdir(tmp_path)
    out = cli_here("job", target, "run.yaml")
    assert out.returncode == 2 and not out.stdout
    assert f"distlab job {target} needs launch.image" in out.stderr and "docker/Dockerfile" in out.stderr
    with_image = cli_here("job", target, "run.yaml", "--set", f"launch.image={IMAGE}")
    assert with_image.returncode == 0 and IMAGE in with_image.stdout, with_image.stderr
    for unpullable in ("distlab:latest", "registry.example/distlab"):
        with pytest.raises(ConfigError, match="is no image a cloud can pull"):
            RunConfig.parse({"launch": {"image": unpullable}})


def test_slurm_says_it_runs_no_image():
    assert f"# launch.image ({IMAGE}) is for the container clouds" in job_files.slurm(config())
    c = config()
    c.launch.image = None
    assert "launch.image" not in job_files.slurm(c)


def test_the_dockerfile_copies_what_exists_and_imports_what_the_jobs_run():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    copied = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    assert copied and all((ROOT / p).exists() for paths in copied for p in paths)
    for module in ("distlab.cluster.config_rank", "distlab.cluster.vertex_node"):
        assert module in text and (ROOT / (module.replace(".", "/") + ".py")).exists()


# ---------------------------------------------------------------- Vertex AI

def vertex_spec(text: str):
    """The job file read by google-cloud-aiplatform's own type (unknown fields and names raise)."""
    from google.cloud.aiplatform_v1.types import CustomJobSpec

    return CustomJobSpec.from_json(json.dumps(yaml.safe_load(text)))


@pytest.mark.parametrize("nodes,device,machine,accelerator", [(1, "cpu", "n1-standard-4", None),
                                                              (3, "cuda", "a3-highgpu-4g", "NVIDIA_H100_80GB")])
def test_the_vertex_job_loads_with_aiplatforms_own_types(tmp_path, nodes, device, machine, accelerator, cli_here,
                                                         monkeypatch):
    c = config(launch={"nodes": nodes, "processes_per_node": 4, "device": device}, training={"global_batch_size": 48})
    write_config(tmp_path, c)
    monkeypatch.chdir(tmp_path)
    out = cli_here("job", "vertex", "run.yaml", "-o", "job.yaml")
    assert out.returncode == 0, out.stderr
    assert "gcloud ai custom-jobs create --region=REGION --display-name=run --config=job.yaml" in out.stdout
    spec = vertex_spec((tmp_path / "job.yaml").read_text())
    pools = spec.worker_pool_specs
    assert [p.replica_count for p in pools] == ([1, nodes - 1] if nodes > 1 else [1])
    for pool in pools:
        assert pool.machine_spec.machine_type == machine
        if accelerator:
            assert pool.machine_spec.accelerator_type.name == accelerator and pool.machine_spec.accelerator_count == 4
        else:
            assert pool.machine_spec.accelerator_count == 0
        container = pool.container_spec
        assert container.image_uri == IMAGE
        assert list(container.command) == ["python", "-m", "distlab.cluster.vertex_node"]
        env = {e.name: e.value for e in container.env}
        assert RunConfig.parse(yaml.safe_load(env["DISTLAB_RUN_CONFIG"])) == c       # the whole config travels


def test_the_aiplatform_check_bites():
    text = job_files.vertex(config(launch={"device": "cuda"}))
    from google.protobuf.json_format import ParseError

    with pytest.raises(ParseError, match="replicas"):
        vertex_spec(text.replace("replicaCount", "replicas"))
    with pytest.raises(ParseError, match="NVIDIA_H101"):
        vertex_spec(text.replace("NVIDIA_H100_80GB", "NVIDIA_H101"))
    h200 = vertex_spec(job_files.vertex(config(launch={"device": "cuda", "processes_per_node": 8}),
                                        machine_type="a3-ultragpu-8g", accelerator_type="NVIDIA_H200_141GB"))
    assert h200.worker_pool_specs[0].machine_spec.accelerator_type.name == "NVIDIA_H200_141GB"
    with pytest.raises(ConfigError, match="no A3 machine has 3 GPUs"):
        job_files.vertex(config(launch={"device": "cuda", "processes_per_node": 3}, training={"global_batch_size": 30}))
    with pytest.raises(ConfigError, match="would need ssh"):
        job_files.vertex(config(launch={"backend": "horovod"}))


def cluster_spec(pool: str, index: int, workers: int = 0) -> dict:
    """A CLUSTER_SPEC as Vertex AI sets it on a replica (one primary, ``workers`` more)."""
    return {"cluster": {"workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
                        **({"workerpool1": [f"cmle-training-workerpool1-ab12-{i}:2222" for i in range(workers)]}
                           if workers else {})},
            "environment": "cloud", "task": {"type": pool, "index": index}}


def test_each_vertex_replica_knows_its_node():
    text = yaml.safe_dump(config(launch={"nodes": 3}, training={"global_batch_size": 36}).model_dump())
    primary, rank = vertex_node.node_config(text, cluster_spec("workerpool0", 0, workers=2))
    assert rank == 0 and primary.launch.hosts[0] == "cmle-training-workerpool0-ab12-0"
    second, rank = vertex_node.node_config(text, cluster_spec("workerpool1", 1, workers=2))
    assert rank == 2 and second.launch.hosts == primary.launch.hosts
    assert second.launch.hosts[2] == "cmle-training-workerpool1-ab12-1"
    with pytest.raises(ConfigError, match="the job has 2 replicas but launch.nodes is 3"):
        vertex_node.node_config(text, cluster_spec("workerpool1", 0, workers=1))
    with pytest.raises(ConfigError, match="worker pools 0 .node 0. and 1 only"):
        vertex_node.node_config(text, cluster_spec("workerpool2", 0, workers=2))
    with pytest.raises(ConfigError, match="is this a Vertex AI custom job"):
        vertex_node.node_config(text, {"cluster": {}})


def test_the_vertex_container_trains_on_one_node(tmp_path):
    """The job's container command, with its own environment and a CLUSTER_SPEC like Vertex's, trains."""
    c = config(logging={"dir": str(tmp_path / "runs"), "name": "vertex"}, launch={"port": 29673})
    container = vertex_spec(job_files.vertex(c)).worker_pool_specs[0].container_spec
    spec = {"cluster": {"workerpool0": ["127.0.0.1:2222"]}, "task": {"type": "workerpool0", "index": 0}}
    env = {**os.environ, **{e.name: e.value for e in container.env}, "CLUSTER_SPEC": json.dumps(spec)}
    command = [sys.executable if a == "python" else a for a in container.command]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = sorted(p.name for p in (tmp_path / "runs" / "vertex").glob("record_*.pt"))
    assert records == ["record_0.pt", "record_1.pt"]
    missing = subprocess.run(command, cwd=tmp_path, env={k: v for k, v in env.items() if k != "CLUSTER_SPEC"},
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "CLUSTER_SPEC and DISTLAB_RUN_CONFIG must be set" in missing.stderr
