"""Faults on purpose, in the middle of training with checkpoints (lesson 10).

For both backends and for a pipeline run: a rank killed by SIGKILL, a rank that raises, a rank
that hangs (the others' collective timeout ends the job), the notebook's interrupt, and the
launcher itself killed.  Each time: the call returns or raises soon (30 s; 20 s for an
interrupt, counted from the moment of the fault: generous bounds that only a hang exceeds), the
failing rank is named, no process of the
job is left (counted by an environment mark every one of them inherits, so that orphans that
left the process tree are counted too), and the checkpoint folder still holds the last good
checkpoint, which loads.
"""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from distlab.long_runs import checkpoint
from helpers import ROOT

RUNS = {   # what runs, and on which backend
    "torchrun-data": ("torchrun", "distlab.data_parallel.data_parallel:train",
                      dict(method="ddp", optimizer="adam", lr=0.01, global_batch_size=64)),
    "horovod-data": ("horovod", "distlab.data_parallel.data_parallel:train",
                     dict(method="ddp", optimizer="adam", lr=0.01, global_batch_size=64)),
    "torchrun-pipeline": ("torchrun", "distlab.pipeline.pipeline:train", dict(global_batch_size=64, micro_batches=2)),
}
RUN_IDS = [pytest.param(k, marks=pytest.mark.horovod) if k.startswith("horovod") else k for k in RUNS]
FAULT_STEP, EVERY = 12, 5


def kernel_script(tmp_path, run: str, steps: int, fault: dict | None, timeout: float) -> str:
    """A Python program standing in for a notebook kernel: one ``distlab.launch`` with checkpoints."""
    backend, fn, kwargs = RUNS[run]
    module, name = fn.split(":")
    script = tmp_path / "kernel.py"
    script.write_text(
        "import json, sys, time, importlib\nimport distlab\n"
        f"fn = getattr(importlib.import_module({module!r}), {name!r})\n"
        "try:\n"
        f"    distlab.launch(fn, 2, backend={backend!r}, warm=False, progress='none', timeout={timeout},\n"
        f"                   checkpoint={{'dir': {str(tmp_path / 'ckpt')!r}, 'every': {EVERY}}}, fault={fault!r},\n"
        f"                   steps={steps}, **{kwargs!r})\n"
        "    print(json.dumps({'ended': time.time(), 'outcome': 'done'}))\n"
        "except distlab.WorkerError as err:\n"
        "    print(json.dumps({'ended': time.time(), 'outcome': 'failed', 'rank': err.rank, 'message': str(err)}))\n"
        "except KeyboardInterrupt as err:\n"
        "    print(json.dumps({'ended': time.time(), 'outcome': 'interrupted', 'message': str(err)}))\n")
    return str(script)


def start_kernel(tmp_path, run, steps, fault=None, timeout=60.0):
    mark = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, kernel_script(tmp_path, run, steps, fault, timeout)], cwd=ROOT,
                            env={**os.environ, "DISTLAB_TEST_MARK": mark}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, mark


def marked(mark: str) -> list[psutil.Process]:
    """Every live process that inherited the mark: the kernel, the launcher, its helpers, the ranks."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("DISTLAB_TEST_MARK") == mark:
                found.append(p)
        except psutil.Error:
            pass
    return found


def outcome(proc, wait: float) -> dict:
    out, _ = proc.communicate(timeout=wait)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, out[-3000:]
    return json.loads(lines[-1])


def fault_time(ckpt_dir: str, step: int) -> float:
    """When the faulty step began: the newest checkpoint before it was complete (its complete.json)."""
    with open(os.path.join(ckpt_dir, f"step_{step:06d}", "complete.json")) as f:
        return json.load(f)["time"]


def assert_last_good_checkpoint(ckpt_dir: str, at_least: int) -> int:
    step, folder = checkpoint.latest(ckpt_dir)
    assert step >= at_least
    for rank in (0, 1):
        state = checkpoint.read(os.path.join(folder, f"rank_{rank}.pt"))
        assert state["step"] == step and state["rank"] == rank
    return step


@pytest.mark.parametrize("kind", ["kill", "raise", "hang"])
@pytest.mark.parametrize("run", RUN_IDS)
def test_a_rank_that_fails_mid_step_is_named_and_nothing_is_left(tmp_path, run, kind):
    timeout = 5.0                                      # the hang ends when the others give up
    proc, mark = start_kernel(tmp_path, run, steps=400, timeout=timeout,
                              fault={"kind": kind, "rank": 1, "step": FAULT_STEP})
    result = outcome(proc, wait=240)
    assert result["outcome"] == "failed", result
    assert result["rank"] == 1, result["message"][:2000]
    expected = {"kill": "killed by SIGKILL", "raise": "InjectedFault", "hang": "stopped answering"}[kind]
    assert expected in result["message"], result["message"][:2000]
    last = FAULT_STEP // EVERY * EVERY                  # 10: the newest checkpoint before the fault
    stopped_in = result["ended"] - fault_time(str(tmp_path / "ckpt"), last)
    print(f"\nFAULT {run} {kind}: clean stop {stopped_in:.1f} s after the fault")
    assert stopped_in < 30
    assert marked(mark) == []
    assert assert_last_good_checkpoint(str(tmp_path / "ckpt"), last) == last


def wait_for_checkpoint(ckpt_dir: str, step: int, proc, wait: float = 120) -> None:
    deadline = time.time() + wait
    while time.time() < deadline:
        done = checkpoint.latest(ckpt_dir)
        if done and done[0] >= step:
            return
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of step {step} within {wait} s")


@pytest.mark.parametrize("run", RUN_IDS)
def test_an_interrupt_stops_the_job_within_seconds(tmp_path, run):
    proc, mark = start_kernel(tmp_path, run, steps=1_000_000)
    wait_for_checkpoint(str(tmp_path / "ckpt"), 2 * EVERY, proc)
    t0 = time.time()
    proc.send_signal(signal.SIGINT)                   # a notebook's "interrupt the kernel"
    result = outcome(proc, wait=60)
    stopped_in = result["ended"] - t0
    print(f"\nFAULT {run} interrupt: clean stop {stopped_in:.1f} s after the interrupt")
    assert result["outcome"] == "interrupted" and "all 2 workers were stopped" in result["message"]
    assert stopped_in < 20           # generous for a loaded machine; the collectives' timeout is far longer
    assert marked(mark) == []
    assert_last_good_checkpoint(str(tmp_path / "ckpt"), 2 * EVERY)


@pytest.mark.parametrize("run", RUN_IDS)
def test_a_killed_launcher_is_reported_and_takes_its_ranks_with_it(tmp_path, run):
    proc, mark = start_kernel(tmp_path, run, steps=1_000_000)
    wait_for_checkpoint(str(tmp_path / "ckpt"), 2 * EVERY, proc)
    launcher = [p for p in psutil.Process(proc.pid).children()
                if any("torch_backend" in a or "horovod_driver" in a for a in p.cmdline())]
    assert len(launcher) == 1, [p.cmdline() for p in psutil.Process(proc.pid).children()]
    t0 = time.time()
    launcher[0].kill()
    result = outcome(proc, wait=60)
    stopped_in = result["ended"] - t0
    print(f"\nFAULT {run} launcher killed: clean stop {stopped_in:.1f} s after the kill")
    assert result["outcome"] == "failed" and "launcher" in result["message"], result
    assert stopped_in < 30
    assert marked(mark) == []
    assert_last_good_checkpoint(str(tmp_path / "ckpt"), 2 * EVERY)
