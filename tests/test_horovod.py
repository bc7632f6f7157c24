"""The Horovod backend: the same jobs, the same answers, the same failure handling as torchrun.

Horovod launches cost several seconds each, so each test does as much as it can per launch.
"""
import base64
import os
import subprocess
import sys
import time

import psutil
import pytest

import distlab
import horovod_workers
import workers
from helpers import ROOT, alive, children, kill_and_wait_for, launch_forever_in_subprocess, read_pids
from distlab.data_parallel import data_parallel as dp
from distlab import doctor
from distlab.processes.horovod_backend import horovodrun_command

HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
STEPS = 50   # > one epoch (45 steps) for N=4, B=8: crosses an epoch boundary and a reshuffle
CONFIG = dict(model="mlp", width=32, batch_size=8, steps=STEPS, lr=0.2, seed=3, record_grads_at=(0, STEPS - 1))


# ---- the build --------------------------------------------------------------------------------
def test_doctor_reports_the_horovod_build():
    rep = doctor.horovod_build()
    assert rep["installed"] and rep["version"] == "0.28.1"
    assert "gloo" in rep["controllers"] and "gloo" in rep["tensor_operations"]
    assert os.access(rep["horovodrun"], os.X_OK)
    line = [ln for ln in doctor.format_report(doctor.report()).splitlines() if ln.startswith("Horovod")]
    assert line == [f"Horovod 0.28.1: controllers {', '.join(rep['controllers'])}; "
                    f"tensor operations {', '.join(rep['tensor_operations'])}"]
    # (that a job really runs with the Gloo controller and Gloo operations is checked below)


def test_without_horovod_the_error_is_clear_and_doctor_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod.torch", None)     # makes `import horovod.torch` fail
    t0 = time.time()
    with pytest.raises(RuntimeError, match="backend='horovod' needs Horovod built with PyTorch and Gloo"):
        distlab.launch(workers.echo, world_size=2, backend="horovod")
    assert time.time() - t0 < 20                                # refused before any process started
    assert doctor.horovod_build()["installed"] is False
    assert "Horovod: not installed" in doctor.format_report(doctor.report())


@pytest.mark.parametrize("kwargs, match", [
    (dict(world_size=0), "world_size must be a positive integer"),
    (dict(world_size=3, global_batch_size=64), "does not divide among 3 ranks"),
    (dict(world_size=2, batch_size=8, method="magic"), "unknown method"),
    (dict(world_size=2, batch_size=8, timeout=-1), "timeout must be a positive"),
])
def test_bad_input_fails_before_any_horovod_process_starts(kwargs, match):
    before = children()
    t0 = time.time()
    with pytest.raises(ValueError, match=match):
        distlab.launch(dp.train, backend="horovod", **kwargs)
    assert time.time() - t0 < 20 and children() - before == set()


# ---- running -----------------------------------------------------------------------------------
def test_every_rank_runs_every_collective_and_returns_its_record(pid_dir, capsys):
    recs = distlab.launch(horovod_workers.every_collective, world_size=3, backend="horovod", timeout=17,
                          pid_dir=pid_dir, progress="text")
    assert [r["rank"] for r in recs] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["backend"] == "horovod" and r["device"] == "cpu" for r in recs)
    assert all(r["sum"] == 6.0 and r["avg"] == 1.0 and r["bcast"] == 2.0 for r in recs)
    assert all(r["gathered"] == [[0, 0], [1, 10], [2, 20]] and r["threads"] == 1 for r in recs)
    assert len({r["pid"] for r in recs}) == 3 and os.getpid() not in {r["pid"] for r in recs}
    assert alive(read_pids(pid_dir)) == []
    # Our settings reached Horovod, and horovod.run's "(None,)" cycle time and cache size did not.
    assert all(r["horovod_env"] == {"HOROVOD_CYCLE_TIME": None, "HOROVOD_CACHE_CAPACITY": None,
                                    "HOROVOD_GLOO_TIMEOUT_SECONDS": "17", "HOROVOD_GLOO_IFACE": "lo",
                                    "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}
               for r in recs)
    build = doctor.horovod_build()                 # what `distlab doctor` says is what ran
    assert "gloo" in build["controllers"] and "gloo" in build["tensor_operations"]
    out = capsys.readouterr().out
    assert "every_collective on 3 cpu rank(s) via horovod" in out and "done" in out


@pytest.mark.parametrize("n", [1, 2, 4])
def test_horovod_equals_torchrun_and_one_big_batch(n):
    """Same seed: N Horovod ranks, N torchrun ranks and one process at batch N*B agree to 1e-6."""
    ref = dp.train_single(world_size=n, **CONFIG)
    on = {backend: distlab.launch(dp.train_both_methods, world_size=n, backend=backend,
                                  progress="none", **CONFIG)
          for backend in ("horovod", "torchrun")}
    for method in ("by_hand", "ddp"):
        hvd = [r[method] for r in on["horovod"]]
        trn = [r[method] for r in on["torchrun"]]
        assert [(r.rank, r.world_size, r.backend, r.method) for r in hvd] == \
            [(k, n, "horovod", method) for k in range(n)]
        vs_single = max(distlab.max_param_difference(r.params, ref.params) for r in hvd)
        vs_torchrun = max(distlab.max_param_difference(h.params, t.params) for h, t in zip(hvd, trn))
        print(f"horovod {method} N={n}: max |param difference| vs one process at batch {8 * n}: "
              f"{vs_single:.2e}, vs torchrun: {vs_torchrun:.2e}")
        assert vs_single <= 1e-6 and vs_torchrun <= 1e-6
        for step in (0, STEPS - 1):      # the averaged gradient is the big-batch gradient
            for layer, g in ref.grads[step].items():
                assert all((r.grads[step][layer]["average"] - g["local"]).abs().max() <= 1e-6 for r in hvd)
        assert len({r.test_accuracy for r in hvd}) == 1
        assert [s.step for s in hvd[0].steps] == list(range(STEPS))
        assert hvd[0].steps[-1].loss < hvd[0].steps[0].loss


def test_horovodrun_in_a_terminal_runs_the_same_training(tmp_path):
    run_dir = str(tmp_path / "run")
    cmd = horovodrun_command(2, run_dir)
    assert cmd[:6] == ["horovodrun", "-np", "2", "--gloo", "-H", "localhost:2"]
    cmd[0] = HOROVODRUN
    cmd += ["distlab.data_parallel.data_parallel:train", "method=ddp", "record_grads_at=()"]
    cmd += [f"{k}={v}" for k, v in CONFIG.items() if k != "record_grads_at"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rank 0: done" in out.stdout and "rank 1: done" in out.stdout
    import torch
    recs = [torch.load(os.path.join(run_dir, "job_0", f"record_{r}.pt"), weights_only=False) for r in (0, 1)]
    ref = dp.train_single(world_size=2, **dict(CONFIG, record_grads_at=()))
    assert [(r.rank, r.backend, r.method) for r in recs] == [(0, "horovod", "ddp"), (1, "horovod", "ddp")]
    assert max(distlab.max_param_difference(r.params, ref.params) for r in recs) <= 1e-6


# ---- failing -----------------------------------------------------------------------------------
# a rank that raises, or is killed, and an interrupt, on Horovod: tests/test_launch.py runs
# those for both backends


def test_a_missing_peer_ends_in_a_timeout_not_a_hang(pid_dir):
    with pytest.raises(distlab.WorkerError, match="waited more than 3 s: some rank never joined") as info:
        distlab.launch(workers.skip_collective, world_size=2, timeout=3, backend="horovod",
                       pid_dir=pid_dir, progress="none")
    assert info.value.rank == 1           # rank 0 gave up waiting for rank 1, which is named (lesson 10)
    assert "stopped answering: rank 0 timed out waiting for it" in str(info.value)
    assert alive(read_pids(pid_dir)) == []


def test_the_optimizer_wrappers_all_reduce_also_times_out(pid_dir):
    """Horovod's DistributedOptimizer would wait forever in step(); distlab waits with the timeout."""
    with pytest.raises(distlab.WorkerError,
                       match="DistributedOptimizer's gradient all-reduce on rank 0 waited more than 3 s") as info:
        distlab.launch(dp.train, world_size=2, timeout=3, backend="horovod", method="ddp",
                       global_batch_size=16, steps=3, straggler=(1, 10.0), progress="none")
    assert info.value.rank == 1           # the straggler, still asleep when rank 0 gave up


def test_a_launcher_that_dies_takes_its_horovod_job_with_it(tmp_path, pid_dir):
    """A notebook kernel killed outright (a restart) cannot stop its job: the driver notices."""
    proc, pids = launch_forever_in_subprocess(tmp_path, pid_dir, backend="horovod")
    family = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert kill_and_wait_for(proc, family) == []


def test_an_orphaned_driver_kills_its_ranks_itself_even_when_sigterm_stops_nothing(tmp_path):
    """Lesson 02's sitting once left two warm Horovod ranks alive minutes after their kernel died: the
    driver had SIGTERM'd itself, and Horovod's handler stopped nothing.  So an orphaned driver kills
    its descendants itself.  Here the "driver" ignores SIGTERM and its two "ranks" live in sessions of
    their own, as Horovod's middlemen do: only the driver's own kill can end them."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, signal, subprocess, sys, threading, time\n"
        "sys.path.insert(0, %r)\n"
        "import horovod_driver\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "ranks = [subprocess.Popen(['sleep', '600'], start_new_session=True) for _ in range(2)]\n"
        "print(os.getpid(), *(r.pid for r in ranks), flush=True)\n"
        "threading.Thread(target=horovod_driver.stop_when_orphaned, args=(os.getppid(),), daemon=True).start()\n"
        "time.sleep(600)\n" % os.path.join(ROOT, "distlab", "processes"))
    kernel = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, %r])"
                               % str(driver)], stdout=subprocess.PIPE, text=True)
    family = [int(pid) for pid in kernel.stdout.readline().split()]
    assert len(alive(family)) == 3
    assert kill_and_wait_for(kernel, family) == []


# ---- the lesson's picture (reads records only) ---------------------------------------------------
def _records(backend, method, step_ms):
    """Two ranks' records with made-up step times: rank 1 is the slower one at every step."""
    from distlab.records import RankRecord, StepRecord
    out = []
    for rank in (0, 1):
        rec = RankRecord(rank, 2, backend, method, "cpu", config={"batch_size": 32}, shard=None)
        t = 100.0
        for i, (compute, after) in enumerate(step_ms):
            compute, after = (compute * (1 + rank)) / 1e3, after / 1e3
            rec.steps.append(StepRecord(i, 1.0, 0.5, t, t + compute, None, None, t + compute + after))
            t += compute + after + 0.001
        out.append(rec)
    return out


def test_the_comparison_widget_reads_medians_of_the_slowest_rank():
    from distlab.widgets.backends import comparison_table, comparison_widget, label, step_split
    fast = _records("torchrun", "ddp", [(1, 1), (2, 1), (3, 1)])
    slow = _records("horovod", "by_hand", [(1, 5), (1, 6), (1, 7)])
    split = step_split(fast)                           # rank 1 computes twice as long as rank 0
    assert split["forward + backward"] == pytest.approx(4.0) and split["after backward"] == pytest.approx(1.0)
    assert step_split(slow, (1, 2))["step"] == pytest.approx(8.5)
    assert label(fast) == "torchrun · DDP" and label(slow) == "horovod · by hand"
    table = comparison_table([fast, slow])
    assert "torchrun · DDP" in table and "step   5.00 ms" in table
    box = comparison_widget([fast, slow], steps=(0, 2))
    bundle = box._repr_mimebundle_()
    assert bundle["text/plain"] == table            # what a viewer without widgets shows
    assert base64.b64decode(bundle["image/png"])[:4] == b"\x89PNG"
