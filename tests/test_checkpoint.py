"""Lesson 10: checkpoints that resume exactly, refuse what they should, and survive a crash while saving;
and torchrun's elastic restart that resumes from them."""
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import once

import distlab
from distlab.long_runs import checkpoint
from distlab.cluster import config as cfg
from distlab.cluster import run as runs
from distlab.data_parallel import data_parallel, local_sgd
from distlab.zero import deepspeed_zero, fsdp, zero
from distlab.parallelize import mesh_3d as mesh, registry, trainer
from distlab.pipeline import pipeline, torch_pipeline
from distlab.tensor import tensor_parallel
from distlab.processes.worker import Worker

ADAM = dict(optimizer="adam", lr=0.01, global_batch_size=64)
LINES = dict(width=32, depth=2, heads=4, global_batch_size=8, test_lines=32, data=1)
RUNS = {   # a run of each kind that keeps state a checkpoint must carry
    "ddp-adam-torchrun": ("torchrun", data_parallel.train, dict(method="ddp", **ADAM)),
    "ddp-adam-horovod": ("horovod", data_parallel.train, dict(method="ddp", **ADAM)),
    "zero2-adam": ("torchrun", zero.train, dict(stage=2, **ADAM)),
    "fsdp2-adam": ("torchrun", fsdp.train, dict(**ADAM)),
    # the interleaved 1F1B schedule: its step is the schedule's passes, its checkpoint two chunks' parameters
    "pipeline-interleaved": ("torchrun", pipeline.train, dict(global_batch_size=64, micro_batches=2, depth=3,
                                                              schedule="interleaved", chunks=2)),
    "torch-pipeline-1f1b": ("torchrun", torch_pipeline.train, dict(global_batch_size=64, micro_batches=2,
                                                                   schedule="1f1b")),
    "deepspeed2-adam": ("torchrun", deepspeed_zero.train, dict(stage=2, **ADAM)),   # fp32 master copy of a shard
    "deepspeed3-adam": ("torchrun", deepspeed_zero.train, dict(stage=3, **ADAM)),   # and the parameters' shards
    "tensor": ("torchrun", tensor_parallel.train, dict(global_batch_size=64)),       # each rank's slices
    "3d-data-x-tensor": ("torchrun", mesh.train, dict(data=1, pipeline=1, tensor=2, global_batch_size=64)),
    # issue 36: the line transformer, as configs/long_lines.yaml and configs/experts.yaml run it (Adam)
    "transformer-long-lines": ("torchrun", trainer.train, dict(LINES, digits=4, causal=True, context=2,
                                                               split="zigzag")),
    "transformer-experts": ("torchrun", trainer.train, dict(LINES, experts=4, top_k=2, expert=2)),
}
# local SGD's kill and resume (its accumulated gradients in the checkpoint) is tests/test_configs.py's
ELSEWHERE = {local_sgd.train: "tests/test_configs.py::test_gradient_accumulation_killed_between_two_updates_"
                              "resumes_to_the_uninterrupted_run"}
IDS = [pytest.param(k, marks=pytest.mark.horovod) if "horovod" in k else k for k in RUNS]




@pytest.mark.parametrize("name", IDS)
def test_killed_mid_run_then_resumed_equals_the_uninterrupted_run(tmp_path, name, warm_ranks):
    """Issue 25: on warm ranks, as in a notebook: the uninterrupted run starts the ranks, the killed run
    reuses them (and loses them), the resumed run starts fresh ones that the next case's uninterrupted
    run reuses: one start-up per case instead of three.  Warm ranks give fresh ranks' records bit for
    bit (tests/test_pool.py), and the resumed run starts from nothing but the files on disk."""
    backend, fn, kwargs = RUNS[name]
    common = dict(backend=backend, progress="none", steps=30, **kwargs)
    whole = distlab.launch(fn, 2, **common)
    keep = {"dir": str(tmp_path / "ckpt"), "every": 5, "keep": 2}
    with pytest.raises(distlab.WorkerError, match="rank 1 failed: it was killed by SIGKILL"):
        distlab.launch(fn, 2, checkpoint=keep, fault={"kind": "kill", "rank": 1, "step": 17}, **common)
    assert [s for s, _ in checkpoint.complete_checkpoints(keep["dir"])] == [10, 15]      # keep=2
    resumed = distlab.launch(fn, 2, checkpoint=keep, **common)
    assert [r.resumed_from for r in resumed] == [15, 15]
    assert [len(r.steps) for r in resumed] == [15, 15]
    # rank by rank: each holds its own share (a pipeline stage, a tensor slice, a ZeRO shard's result)
    difference = max(distlab.max_param_difference(a.params, b.params) for a, b in zip(whole, resumed))
    print(f"\nRESUME {name}: max |resumed - uninterrupted| = {difference:.3g}")
    assert difference <= 1e-6


def test_every_strategy_of_the_registry_resumes_or_is_refused(tmp_path):
    """Issue 27: every strategy a config can name either takes checkpoints (its function declares
    "checkpoint", and its kill-and-resume run is above or in ELSEWHERE), or ``launch`` refuses
    ``checkpoint=`` for it before any process starts, saying so: never a setting silently ignored."""
    covered = {fn: name for name, (_, fn, _) in RUNS.items()} | ELSEWHERE
    keep = {"dir": str(tmp_path / "ckpt"), "every": 5}
    refused = []
    for s in registry.STRATEGIES.values():
        if "checkpoint" in (s.supports or ()):
            assert s.fn in covered, f"strategy {s.name} declares checkpoints but no test kills and resumes it"
        else:
            with pytest.raises(ValueError, match="takes no checkpoints"):
                distlab.launch(s.fn, 2, checkpoint=keep, progress="none", warm=False)
            refused.append(s.name)
    assert not os.path.exists(keep["dir"])                # nothing started, nothing written
    print(f"\nresumed by a test: {sorted(registry.STRATEGIES.keys() - set(refused))}; refused: {refused}")


def test_each_zero_rank_saves_only_its_own_share_of_the_optimizer(tmp_path):
    keep = {"dir": str(tmp_path / "ckpt"), "every": 10}
    distlab.launch(zero.train, 2, progress="none", warm=False, steps=10, stage=1, checkpoint=keep, **ADAM)
    states = [checkpoint.read(str(tmp_path / "ckpt" / "step_000010" / f"rank_{r}.pt")) for r in (0, 1)]
    moments = [s["optimizer"]["state"][0]["exp_avg"] for s in states]
    total = sum(p.numel() for p in states[0]["model"].values())
    assert moments[0].numel() == moments[1].numel() == -(-total // 2)          # half each (padded)
    assert not torch.equal(moments[0], moments[1])


# ---- what a checkpoint refuses ----------------------------------------------------------------
class Alone(Worker):
    """One rank with no job: the collectives are trivial (for checking files in this process)."""

    def barrier(self):
        pass

    def all_gather(self, tensor):
        return [tensor]


def saved_once(tmp_path, **settings):
    worker = Alone(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"))
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    keeper = checkpoint.Checkpointer(worker, {"dir": str(tmp_path / "ckpt"), **settings}, {"lr": 0.1, "seed": 0})
    keeper.save(10, model, optimizer, {"seed": 0})
    return keeper, model, optimizer, str(tmp_path / "ckpt" / "step_000010" / "rank_0.pt")


def test_a_truncated_or_altered_file_is_refused_clearly(tmp_path):
    keeper, model, optimizer, path = saved_once(tmp_path)
    assert checkpoint.read(path)["step"] == 10
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(checkpoint.CheckpointError, match="corrupt or truncated: its SHA-256 differs"):
        checkpoint.read(path)
    os.remove(path[:-3] + ".sha256")                     # no checksum to compare: torch.load itself fails
    with pytest.raises(checkpoint.CheckpointError, match="cannot be read as a checkpoint"):
        checkpoint.read(path)
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint file"):
        checkpoint.read(str(tmp_path / "nothing.pt"))


class Payload:
    """What a malicious file could hold: an object whose unpickling would run code."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/distlab-pwned",))


def test_foreign_files_are_refused_and_nothing_is_unpickled(tmp_path):
    plain = str(tmp_path / "plain.pt")
    torch.save({"weight": torch.ones(2)}, plain)
    with pytest.raises(checkpoint.CheckpointError, match="not a distlab checkpoint"):
        checkpoint.read(plain)
    evil = str(tmp_path / "evil.pt")
    buffer = io.BytesIO()
    torch.save({"format": checkpoint.FORMAT, "x": Payload()}, buffer)
    open(evil, "wb").write(buffer.getvalue())
    with pytest.raises(checkpoint.CheckpointError, match="refused rather than unpickled"):
        checkpoint.read(evil)
    assert not os.path.exists("/tmp/distlab-pwned")


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    keeper, model, optimizer, path = saved_once(tmp_path)
    other = checkpoint.Checkpointer(keeper.worker, {"dir": keeper.dir}, {"lr": 0.5, "seed": 0})
    with pytest.raises(checkpoint.CheckpointError, match=r"other settings \(lr: saved 0.1, now 0.5\)"):
        other.resume(model, optimizer, {"seed": 0})
    with pytest.raises(checkpoint.CheckpointError, match="holds parameters"):
        keeper.resume(torch.nn.Linear(3, 3, bias=False), optimizer, {"seed": 0})


def test_a_resume_from_a_corrupt_checkpoint_names_the_rank(tmp_path):
    keep = {"dir": str(tmp_path / "ckpt"), "every": 5}
    distlab.launch(data_parallel.train, 2, progress="none", warm=False, steps=5, checkpoint=keep, **ADAM)
    with open(tmp_path / "ckpt" / "step_000005" / "rank_1.pt", "r+b") as f:
        f.seek(100)
        f.write(b"\x00" * 64)
    with pytest.raises(distlab.WorkerError, match="rank 1 failed: CheckpointError: .* is corrupt or truncated"):
        distlab.launch(data_parallel.train, 2, progress="none", warm=False, steps=10, checkpoint=keep, **ADAM)


def test_a_crash_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    keeper, model, optimizer, path = saved_once(tmp_path, keep=1)

    def crash(obj, f, *args, **kwargs):                  # the disk fills up (or the rank dies) mid-write
        f.write(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        keeper.save(20, model, optimizer, {"seed": 0})
    monkeypatch.undo()
    assert checkpoint.latest(keeper.dir)[0] == 10
    assert json.load(open(os.path.join(keeper.dir, "latest.json")))["step"] == 10
    assert checkpoint.read(path)["step"] == 10
    assert not os.path.exists(os.path.join(keeper.dir, "step_000020", "rank_0.pt"))
    assert keeper.resume(model, optimizer, {"seed": 0}) == 10


def test_bad_checkpoint_and_fault_settings_are_refused_before_anything_starts():
    for bad, match in [({"every": 5}, "checkpoint must be a dict with dir"),
                       ({"dir": "x", "every": -1}, "every must be a whole number"),
                       ({"dir": "x", "often": 1}, "checkpoint must be a dict")]:
        with pytest.raises(ValueError, match=match):
            distlab.launch(data_parallel.train, 2, progress="none", checkpoint=bad, global_batch_size=64)
    with pytest.raises(ValueError, match="fault rank 2 is not a rank of this job"):
        distlab.launch(data_parallel.train, 2, progress="none", fault={"kind": "kill", "rank": 2, "step": 1},
                       global_batch_size=64)
    with pytest.raises(cfg.ConfigError, match="fault.rank 3 is not a rank of this run"):
        cfg.RunConfig.parse({"fault": {"kind": "kill", "rank": 3}})


# ---- torchrun's elastic restart ------------------------------------------------------------------
def elastic_config(tmp_path, name, **fault):
    config = {"training": {"steps": 60, "global_batch_size": 64, "optimizer": "adam", "lr": 0.01},
              "launch": {"processes_per_node": 2, "max_restarts": 1, "port": 29684, "timeout": 30},
              "checkpoint": {"every": 10}, "logging": {"dir": str(tmp_path / "runs"), "name": name}}
    if fault:
        config["fault"] = fault
    return cfg.RunConfig.parse(config).save(str(tmp_path / f"{name}.yaml"))


def run_whole(base: str):
    """The elastic job's run without a fault (in a new folder under ``base``)."""
    path = elastic_config(Path(tempfile.mkdtemp(prefix="whole", dir=base)), "whole")
    return distlab.launch(cfg.load(path), progress="none", warm=False)


@pytest.fixture
def uninterrupted(tmp_path_factory):
    """``run_whole``, run once: one reference for both kinds of fault (issue 25; helpers.once)."""
    return once(run_whole, str(tmp_path_factory.getbasetemp()))


@pytest.mark.parametrize("kind", ["kill", "raise"])
def test_torchrun_restarts_a_killed_worker_and_the_job_finishes_as_if_nothing_happened(tmp_path, kind,
                                                                                         uninterrupted):
    path = elastic_config(tmp_path, "elastic", kind=kind, rank=1, step=25)
    out = subprocess.run([sys.executable, "-m", "distlab.cli", "run", path], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "torchrun restarted the ranks 1 time(s)" in out.stdout
    blamed = "rank 1 was killed by SIGKILL" if kind == "kill" else "rank 1 failed: InjectedFault"
    assert blamed in out.stdout, out.stdout
    records = runs.records(cfg.load(path))
    assert [r.resumed_from for r in records] == [20, 20]
    difference = distlab.max_param_difference(uninterrupted[0].params, records[0].params)
    print(f"\nELASTIC {kind}: max |restarted - uninterrupted| = {difference:.3g}")
    assert difference <= 1e-6
    summary = json.load(open(os.path.join(runs.run_dir(cfg.load(path)), "summary.json")))
    assert summary["restarts"] == 1
