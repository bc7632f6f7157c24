"""Lesson 09: the job files `distlab job` writes, each checked by the real tool that reads it.

Azure ML's command job goes through the official `azure-ai-ml` package's `load_job` (no workspace
or network needed); the SLURM script through `bash -n` and then for real, with `srun` and
`scontrol` standing in for SLURM's on one node; the Kubernetes PyTorchJob through Kubeflow's own
schema for it (tests/data, from the training operator's CRD).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from distlab import job_files
from distlab.config import ConfigError, RunConfig

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "distlab.cli"]


def config(**sections):
    data = {"model": {"width": 16}, "training": {"steps": 4, "global_batch_size": 32},
            "launch": {"processes_per_node": 2, "port": 29671}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return RunConfig.parse(data)


def write_config(tmp_path, c, name="run.yaml"):
    return c.save(str(tmp_path / name))


# ---------------------------------------------------------------- Azure ML

@pytest.mark.parametrize("backend,distribution", [("torchrun", "PyTorchDistribution"), ("horovod", "MpiDistribution")])
def test_the_azureml_job_loads_with_the_official_sdk(tmp_path, backend, distribution):
    from azure.ai.ml import load_job

    c = config(launch={"backend": backend, "nodes": 3, "processes_per_node": 4}, training={"global_batch_size": 48})
    write_config(tmp_path, c)
    out = subprocess.run([*CLI, "job", "azureml", "run.yaml", "-o", "job.yml"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    job = load_job(source=str(tmp_path / "job.yml"))
    assert type(job.distribution).__name__ == distribution
    assert job.distribution.process_count_per_instance == 4
    assert job.resources.instance_count == 3
    assert job.command == "python -m distlab.processes.config_rank run.yaml"


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


def test_the_slurm_script_parses_and_its_torchrun_line_runs(tmp_path):
    c = config(logging={"dir": str(tmp_path / "runs"), "name": "slurm"})
    write_config(tmp_path, c)
    script = tmp_path / "job.sbatch"
    out = subprocess.run([*CLI, "job", "slurm", "run.yaml", "-o", str(script)], cwd=tmp_path, capture_output=True,
                         text=True)
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
    configmap, job = yaml.safe_load_all(job_files.k8s(c, image="registry.example/distlab:0.1"))
    jsonschema.validate(job, SCHEMA)
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


def test_unsupported_targets_and_backends_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="would need an MPIJob"):
        job_files.k8s(config(launch={"backend": "horovod"}))
    write_config(tmp_path, config())
    out = subprocess.run([*CLI, "job", "lsf", "run.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2 and "no job target 'lsf': choose one of azureml, slurm, k8s" in out.stderr
