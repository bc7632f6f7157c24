"""Lesson 09: the `distlab` command: run, check, job, doctor, bench; its help and its exit codes."""
import os
import socket
import subprocess
import sys

import pytest
import torch

import distlab
from distlab.cluster import config as cfg
from distlab.cluster import run
from helpers import children

CLI = [sys.executable, "-m", "distlab.cli"]


def distlab_cli(*args, cwd=None, timeout=300):
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def small(tmp_path, **launch):
    c = cfg.RunConfig.parse({"model": {"width": 16}, "training": {"steps": 6, "global_batch_size": 32, "lr": 0.2},
                             "parallel": {"method": "by_hand"},
                             "launch": {"processes_per_node": 2, "port": 29683, **launch},
                             "logging": {"dir": str(tmp_path / "runs"), "name": "cli"}})
    return c.save(str(tmp_path / "run.yaml"))


@pytest.mark.parametrize("backend", ["torchrun", pytest.param("horovod", marks=pytest.mark.horovod)])
def test_distlab_run_trains_what_the_notebook_launcher_trains(tmp_path, backend):
    path = small(tmp_path, backend=backend)
    out = distlab_cli("run", path, "--set", f"checkpoint.dir={tmp_path / 'ckpt'}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rank 1: 6 steps" in out.stdout and "done in" in out.stdout
    records = run.records(cfg.load(path))
    saved = torch.load(tmp_path / "ckpt" / "cli.pt")                 # rank 0's trained parameters
    assert distlab.max_param_difference(saved, records[0].params) == 0.0
    fn, kwargs = cfg.load(path).call()
    notebook = distlab.launch(fn, 2, backend=backend, progress="none", warm=False, **kwargs)
    for mine, theirs in zip(records, notebook):
        assert distlab.max_param_difference(mine.params, theirs.params) == 0.0
        assert mine.losses == theirs.losses


def test_set_overrides_and_dry_run(tmp_path, cli_here):
    path = small(tmp_path)
    out = cli_here("run", path, "--set", "launch.processes_per_node=4", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "--nproc-per-node=4" in out.stdout and "distlab.cluster.config_rank" in out.stdout
    check = cli_here("check", path, "--set", "training.lr=0.05")
    assert check.returncode == 0 and "lr: 0.05" in check.stdout and "valid; 2 ranks" in check.stdout


@pytest.mark.parametrize("args,message", [
    (["--set", "training.lr=fast"], "training.lr = 'fast': Input should be a valid number"),
    (["--set", "launch.nodes=2"], "launch.hosts must name every node"),
    (["--set", "launch.nodes=2", "--set", "launch.hosts=[10.0.0.1,10.0.0.2]", "--node-rank", "5"],
     "--node-rank 5 is not a node of this run: nodes are 0 to 1"),
    (["--set", "parallel.strategy=pipeline", "--set", "parallel.method=ddp", "--set", "model.depth=1",
      "--set", "launch.processes_per_node=4"], "this run cannot start"),
    (["--set", "parallel.strategy=pipeline"], "parallel.method = 'by_hand': strategy pipeline does not use it"),
    (["--set", "parallel.strategy=pipeline", "--set", "parallel.method=ddp", "--set", "parallel.pipeline=3"],
     "parallel.pipeline 3 contradicts the ranks"),
])
def test_bad_input_exits_2_with_one_clear_message_and_starts_nothing(tmp_path, args, message, cli_here):
    path = small(tmp_path)
    before = children()
    out = cli_here("run", path, *args)
    assert children() == before, "nothing may start for a bad config"
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert not os.path.exists(tmp_path / "runs" / "cli"), "nothing may start for a bad config"


def test_a_failed_run_exits_1_naming_the_problem(tmp_path):
    path = small(tmp_path)
    with socket.socket() as busy:                    # the rendezvous port is taken
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = distlab_cli("run", path, "--set", f"launch.port={port}")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "distlab run: failed" in out.stdout


def test_help_doctor_and_bench(cli_here):
    top = distlab_cli("--help")                                       # the module's own entry point
    assert top.returncode == 0 and all(c in top.stdout for c in ("run", "check", "job", "doctor", "bench"))
    from distlab.parallelize.registry import STRATEGIES

    assert "configs/" in top.stdout and all(f"  {name} " in top.stdout for name in STRATEGIES)   # from the registry
    for command in ("run", "check", "job", "doctor", "bench"):
        assert cli_here(command, "--help").returncode == 0
    assert cli_here().returncode == 2                                 # no command: usage, exit 2
    listed = cli_here("bench")
    assert listed.returncode == 0 and "scaling" in listed.stdout and "binder" in listed.stdout
    unknown = cli_here("bench", "nope")
    assert unknown.returncode == 2 and "no benchmark 'nope'" in unknown.stderr
    doctor = cli_here("doctor", "--json")
    assert doctor.returncode == 0 and '"cpu_cores"' in doctor.stdout


def test_check_refuses_what_launch_would_refuse_and_exits_2(tmp_path, capsys):
    """`distlab check` makes launch's own checks: the strategy's validate_args and fn.supports."""
    from distlab import cli

    path = small(tmp_path)
    for overrides, message in (
            (["parallel.strategy=pipeline", "parallel.method=ddp", "model.depth=1", "launch.processes_per_node=4"],
             "this run cannot start: "),
            (["parallel.strategy=torch_pipeline", "parallel.method=ddp", "parallel.schedule=interleaved"],
             "torch.distributed.pipelining is used here with gpipe or 1f1b"),
            (["parallel.micro_batches=4"], "parallel.micro_batches = 4: strategy data does not use it")):
        assert cli.main(["check", path, *(x for o in overrides for x in ("--set", o))]) == 2
        assert message in capsys.readouterr().err


def test_the_report_reads_whole_error_files_only(tmp_path):
    """A rank stopped while writing its error leaves error_<rank>.json.tmp half-written: not an error."""
    import io
    import json

    c = cfg.RunConfig.parse({"launch": {"processes_per_node": 2}, "logging": {"dir": str(tmp_path), "name": "r"}})
    (tmp_path / "error_0.json.tmp").write_text('{"rank": 0, "typ')
    (tmp_path / "error_1.json").write_text(json.dumps({"rank": 1, "type": "ValueError", "message": "boom"}))
    (tmp_path / "launcher.log").write_text("")
    out = io.StringIO()
    assert run._report(c, str(tmp_path), 1, 0.5, str(tmp_path / "launcher.log"), out) == 1
    assert "rank 1 failed: ValueError: boom" in out.getvalue() and "rank 0" not in out.getvalue()


def test_job_names_every_target_and_vertex_takes_its_machine(tmp_path, cli_here):
    """`distlab job` lists its four targets; Vertex AI's machine and GPU come from the command line."""
    import yaml

    helped = cli_here("job", "--help")
    assert helped.returncode == 0 and "azureml, slurm, k8s or vertex" in helped.stdout
    path = small(tmp_path, device="cuda", processes_per_node=8, image="registry.example/distlab:0.1")
    out = cli_here("job", "vertex", path, "--set", "training.global_batch_size=64",
                      "--machine-type", "a3-ultragpu-8g", "--accelerator-type", "NVIDIA_H200_141GB")
    assert out.returncode == 0, out.stderr
    machine = yaml.safe_load(out.stdout)["workerPoolSpecs"][0]["machineSpec"]
    assert machine == {"machineType": "a3-ultragpu-8g", "acceleratorType": "NVIDIA_H200_141GB",
                       "acceleratorCount": 8}
    cpu = cli_here("job", "vertex", path, "--set", "launch.device=cpu", "--set", "training.global_batch_size=64",
                      "--accelerator-type", "NVIDIA_H200_141GB")
    assert cpu.returncode == 2 and "launch.device is not cuda" in cpu.stderr
