"""Warm ranks (lesson 00): the same records as fresh ranks, nothing carried from one job to the next,
and a pool that retires itself whenever it may be unsafe or is no longer wanted.

Failures on warm ranks (a rank that raises, is killed, misses a collective, an interrupt, a
killed kernel) are tested with the cold ones, in tests/test_launch.py.
"""
import os
import subprocess
import sys
import time

import psutil
import pytest

import distlab
import workers
from distlab.data_parallel import data_parallel as dp
from distlab.processes import pool as pools
from helpers import ROOT, alive, children

CONFIG = dict(model="mlp", width=32, batch_size=8, steps=30, lr=0.2, seed=3, record_grads_at=(0, 29))


def same_records(a, b) -> bool:
    """Bit for bit: parameters, losses, and the recorded gradients."""
    return all(x.params.keys() == y.params.keys()
               and all(x.params[k].equal(y.params[k]) for k in x.params)
               and x.losses == y.losses and x.test_accuracy == y.test_accuracy
               and all(x.grads[s][n][w].equal(y.grads[s][n][w])
                       for s in x.grads for n in x.grads[s] for w in ("local", "average"))
               for x, y in zip(a, b))


def pool_pids():
    p = pools.current()
    return [] if p is None else [int(open(os.path.join(p.dir, f)).read()) for f in os.listdir(p.dir)
                                 if f.startswith("pid_")]


@pytest.fixture(autouse=True)
def no_pool_before_or_after():
    distlab.shutdown()
    before = children()
    yield
    distlab.shutdown()
    left = []
    for pid in alive(children() - before):
        try:
            left.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=5)            # a process already on its way out is not a leak
    named = []
    for p in left:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                named.append(f"{p.pid}: {' '.join(p.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            pass
    assert named == [], f"processes outlived distlab.shutdown() (named, to find whose they are): {named}"


BACKENDS = ["torchrun", pytest.param("horovod", marks=pytest.mark.horovod)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_ranks_give_the_records_of_fresh_ones_bit_for_bit(backend):
    """Each method once on fresh ranks; then by hand, DDP and by hand again on one warm pool: three jobs
    on the same two ranks, each bit for bit its fresh twin (issue 25: three start-ups, not four)."""
    def run(method, warm):
        return distlab.launch(dp.train, world_size=2, backend=backend, method=method, warm=warm,
                              progress="none", **CONFIG)

    cold = {method: run(method, False) for method in ("by_hand", "ddp")}
    first = run("by_hand", True)
    pids = pool_pids()
    ddp, again = run("ddp", True), run("by_hand", True)
    assert pool_pids() == pids and len(pids) == 2 and pools.current().jobs == 3   # the same ranks
    for fresh, warm in ((cold["by_hand"], first), (cold["ddp"], ddp), (cold["by_hand"], again)):
        assert same_records(fresh, warm), (backend, warm[0].method)
    assert [r.backend for r in again] == [backend] * 2


def test_nothing_leaks_from_one_job_into_the_next():
    """A job that changes every global setting it can, then a different job: as on fresh ranks."""
    cold = distlab.launch(dp.train, world_size=2, warm=False, progress="none", **CONFIG)
    first = distlab.launch(workers.global_state, world_size=2, warm=True, progress="none")
    messy = distlab.launch(workers.change_everything, world_size=2, warm=True, progress="none")
    assert {m["threads"] for m in messy} == {2} and all(m["float64"] for m in messy)
    after = distlab.launch(dp.train, world_size=2, warm=True, progress="none", **CONFIG)
    assert same_records(cold, after)
    again = distlab.launch(workers.global_state, world_size=2, warm=True, progress="none")
    assert pools.current().jobs == 4
    assert again == first          # the same random numbers, threads, dtype and cores as job 1
    fresh = distlab.launch(workers.global_state, world_size=2, warm=False, progress="none")
    # (PyTorch seeds each new process at random: only the settings compare with fresh ranks)
    def settings(states):
        return [{k: state[k] for k in ("rank", "threads", "dtype", "cores")} for state in states]

    assert settings(again) == settings(fresh)


def test_another_world_size_or_backend_retires_the_pool():
    distlab.launch(workers.echo, world_size=2, warm=True, progress="none")
    two = pool_pids()
    distlab.launch(workers.echo, world_size=3, warm=True, progress="none")
    assert alive(two) == [] and len(pool_pids()) == 3
    three = pool_pids()
    distlab.launch(workers.echo, world_size=3, warm=True, timeout=30, progress="none")
    assert alive(three) == []                     # another timeout: other ranks


def test_a_failed_job_retires_the_pool_and_the_next_launch_starts_fresh(pid_dir):
    distlab.launch(workers.echo, world_size=2, warm=True, progress="none")
    warm = pool_pids()
    with pytest.raises(distlab.WorkerError, match="deliberate failure on rank 1"):
        distlab.launch(workers.raise_on_rank, world_size=2, bad_rank=1, warm=True, progress="none")
    assert pools.current() is None and alive(warm) == []
    recs = distlab.launch(workers.echo, world_size=2, warm=True, progress="none", pid_dir=pid_dir)
    assert [r["sum"] for r in recs] == [3.0, 3.0] and not set(pool_pids()) & set(warm)


def test_idle_ranks_leave_after_a_while(monkeypatch):
    monkeypatch.setattr(pools, "IDLE_SECONDS", 1.0)
    distlab.launch(workers.echo, world_size=2, warm=True, progress="none")
    pids = pool_pids()
    deadline = time.time() + 30
    while alive(pids) and time.time() < deadline:
        time.sleep(0.2)
    assert alive(pids) == [] and pools.current() is None


def test_ranks_leave_with_the_kernel(tmp_path):
    """A kernel that exits (atexit) and one that is killed outright: no rank stays behind."""
    for ending in ("exit", "kill"):
        script = tmp_path / f"kernel_{ending}.py"
        script.write_text(
            f"import sys, time; sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})\n"
            "import distlab, workers\n"
            "distlab.launch(workers.echo, world_size=2, warm=True, progress='none')\n"
            "from distlab.processes import pool\n"
            "print('PIDS', *sorted(open(f'{pool.current().dir}/pid_{r}').read() for r in range(2)), flush=True)\n"
            + ("time.sleep(600)\n" if ending == "kill" else ""))
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = proc.stdout.readline()
        assert line.startswith("PIDS"), line
        pids = [int(p) for p in line.split()[1:]]
        if ending == "kill":
            proc.kill()
        proc.wait(60)
        deadline = time.time() + 30
        while alive(pids) and time.time() < deadline:
            time.sleep(0.2)
        assert alive(pids) == [], ending


def test_warm_is_the_default_in_a_notebook_only(monkeypatch):
    from distlab.processes.launcher import use_warm_ranks

    monkeypatch.delenv("DISTLAB_WARM", raising=False)
    assert use_warm_ranks("auto") is False            # pytest is not a notebook kernel
    monkeypatch.setenv("DISTLAB_WARM", "1")
    assert use_warm_ranks("auto") is True and use_warm_ranks(False) is False
    with pytest.raises(ValueError, match="warm must be True, False or 'auto'"):
        distlab.launch(workers.echo, world_size=2, warm="yes")


def test_a_warm_rank_dies_at_once_on_sigterm():
    """torchrun forks its ranks after setting a SIGTERM handler of its own (it raises inside the
    process); a rank that kept it would, told to stop, wait in its clean-up for peers already
    gone, long enough for Jupyter to give up on a kernel that is shutting down."""
    distlab.launch(workers.echo, world_size=2, warm=True, progress="none")
    for pid in pool_pids():
        with open(f"/proc/{pid}/status") as f:
            caught = int(next(line for line in f if line.startswith("SigCgt:")).split()[1], 16)
        assert not caught & (1 << (15 - 1)), f"rank {pid} catches SIGTERM"
