"""The launcher: real processes, records back, clear errors, and nothing left running."""
import os
import signal
import socket
import time

import pytest

import distlab
from helpers import alive, children, kill_and_wait_for, launch_forever_in_subprocess, read_pids
from distlab.data_parallel import data_parallel as dp
import workers


def test_every_rank_runs_and_returns_its_record(pid_dir):
    recs = distlab.launch(workers.echo, world_size=3, value=7, pid_dir=pid_dir, progress="none", threads=1)
    assert [r["rank"] for r in recs] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["value"] == 7 and r["backend"] == "torchrun" for r in recs)
    assert all(r["sum"] == 6.0 and r["bcast"] == 2.0 for r in recs)      # 1+2+3; rank 2's value
    assert all(r["device"] == "cpu" and r["threads"] == 1 for r in recs)
    assert len({r["pid"] for r in recs}) == 3 and os.getpid() not in {r["pid"] for r in recs}
    assert alive(read_pids(pid_dir)) == []


def test_terminal_progress_is_printed(capsys):
    distlab.launch(workers.echo, world_size=2, progress="text")
    out = capsys.readouterr().out
    assert "echo on 2 cpu rank(s) via torchrun" in out and "done" in out


BACKENDS = ["torchrun", pytest.param("horovod", marks=pytest.mark.horovod)]
# Each failure on fresh ranks (a cold launch) and on warm ones that have run a job already (lesson 00).
WARM = [pytest.param(False, id="cold"), pytest.param(True, id="warm")]


def warm_up(warm: bool, world_size: int, **launch) -> None:
    """For the warm case: a first job that leaves its ranks waiting for the next one."""
    if warm:
        assert distlab.launch(workers.echo, world_size=world_size, warm=True, progress="none", **launch)


@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_that_raises_is_named_with_its_traceback(pid_dir, backend, warm):
    before = children()
    warm_up(warm, 3, backend=backend)
    with pytest.raises(distlab.WorkerError) as info:
        distlab.launch(workers.raise_on_rank, world_size=3, bad_rank=2, backend=backend, pid_dir=pid_dir,
                       progress="none", warm=warm)
    err = info.value
    assert err.rank == 2
    assert "rank 2 failed" in str(err) and "deliberate failure on rank 2" in str(err)
    assert "Traceback" in str(err) and "workers.py" in err.remote_traceback
    assert len(read_pids(pid_dir)) == 3 and alive(read_pids(pid_dir)) == []
    assert children() - before == set()


@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_killed_by_a_signal_is_named(pid_dir, backend, warm):
    before = children()
    warm_up(warm, 2, backend=backend)
    t0 = time.time()
    with pytest.raises(distlab.WorkerError, match="rank 1 failed: it was killed by SIGKILL") as info:
        distlab.launch(workers.kill_on_rank, world_size=2, bad_rank=1, backend=backend, pid_dir=pid_dir,
                       progress="none", warm=warm)
    assert info.value.rank == 1
    assert time.time() - t0 < 60          # not the 60 s collective timeout: torchrun stops the rest
    assert alive(read_pids(pid_dir)) == []
    assert children() - before == set()


@pytest.mark.parametrize("warm", WARM)
def test_a_missing_peer_ends_in_a_timeout_not_a_hang(pid_dir, warm):
    before = children()
    warm_up(warm, 2, timeout=3)
    with pytest.raises(distlab.WorkerError) as info:
        distlab.launch(workers.skip_collective, world_size=2, timeout=3, pid_dir=pid_dir, progress="none",
                       warm=warm)
    assert info.value.rank == 1           # rank 0 gave up waiting for rank 1, which never came (lesson 10)
    assert "stopped answering: rank 0 timed out waiting for it" in str(info.value)
    assert alive(read_pids(pid_dir)) == [] and children() - before == set()


# Horovod's driver and its helper process per rank take longer to stop than torchrun.
INTERRUPT_LIMITS = {"torchrun": dict(wait=30, stopped_in=15), "horovod": dict(wait=60, stopped_in=20)}


@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("backend", BACKENDS)
def test_interrupt_stops_every_process(tmp_path, pid_dir, backend, warm):
    """Ctrl-C (a notebook's "interrupt kernel") while training stops the launcher, any helpers
    and every rank within seconds."""
    import psutil

    limits = INTERRUPT_LIMITS[backend]
    proc, pids = launch_forever_in_subprocess(tmp_path, pid_dir, backend=backend, warm=warm)
    time.sleep(1.0)
    family = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert set(pids) <= set(family) and len(family) > 2    # launcher (and helpers), the ranks
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=limits["wait"])
    stopped_in = time.time() - t0
    assert proc.returncode == 3, out
    assert "INTERRUPTED: interrupted: all 2 workers were stopped" in out
    assert alive(pids) == [] and alive(family) == []
    assert stopped_in < limits["stopped_in"]


# ---- bad input: a clear error before any process starts -------------------------------------
def not_importable_fn(worker):
    return 0


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(world_size=0), ValueError, "world_size must be a positive integer"),
    (dict(world_size=2.5), ValueError, "world_size must be a positive integer"),
    (dict(world_size=5000), ValueError, "larger than the training set"),
    (dict(world_size=3, global_batch_size=64), ValueError, "does not divide among 3 ranks"),
    (dict(world_size=2, batch_size=0), ValueError, "batch_size must be a positive integer"),
    (dict(world_size=2, batch_size=2000), ValueError, "larger than each rank's shard"),
    (dict(world_size=2, backend="mpi"), ValueError, "unknown backend 'mpi'"),
    (dict(world_size=2, method="magic"), ValueError, "unknown method"),
    (dict(world_size=2, device="tpu"), ValueError, "device must be"),
    (dict(world_size=2, device="cuda"), RuntimeError, "needs one GPU per rank"),
    (dict(world_size=2, timeout=0), ValueError, "timeout must be a positive"),
])
def test_bad_input_fails_fast_and_clearly(kwargs, error, match):
    kwargs.setdefault("batch_size", None if "global_batch_size" in kwargs else 8)
    t0 = time.time()
    with pytest.raises(error, match=match):
        distlab.launch(dp.train, **kwargs)
    assert time.time() - t0 < 20          # failed before starting any process (a launch takes longer)


def test_functions_that_workers_cannot_import_are_refused():
    def nested(worker):
        return 0
    with pytest.raises(ValueError, match="lambda or nested function"):
        distlab.launch(nested, world_size=1)
    with pytest.raises(ValueError, match="lambda or nested"):
        distlab.launch(lambda w: 0, world_size=1)
    not_importable_fn.__module__ = "__main__"
    try:
        with pytest.raises(ValueError, match=r"defined in __main__ \(a notebook cell"):
            distlab.launch(not_importable_fn, world_size=1)
    finally:
        not_importable_fn.__module__ = __name__
    with pytest.raises(ValueError, match="cannot be pickled"):
        distlab.launch(workers.echo, world_size=1, value=lambda: 0)


def test_a_port_in_use_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(distlab.PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            distlab.launch(workers.echo, world_size=2, port=port)


def test_a_port_is_refused_for_horovod_which_picks_its_own():
    with pytest.raises(ValueError, match="Horovod always picks a free port"):
        distlab.launch(workers.echo, world_size=2, backend="horovod", port=29999)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_cpu_rank_gets_a_core_of_its_own_when_there_are_enough(backend):
    """Lesson 05 (runtime.bind_to_cores): every thread of rank r runs on core r; with more
    ranks than cores, or bind_cores=False, every rank may run anywhere."""
    mine = sorted(os.sched_getaffinity(0))
    assert len(mine) >= 2, "this test needs a machine with at least 2 cores"
    from distlab.processes.cores import cpu_quota
    assert cpu_quota() is None, "this test needs a machine without a CPU quota (not a Binder pod)"
    bound = distlab.launch(workers.cores, world_size=2, backend=backend, progress="none")
    assert [r["cores"] for r in bound] == [[mine[0]], [mine[1]]]
    assert [r["every_thread"] for r in bound] == [[(mine[0],)], [(mine[1],)]]
    free = distlab.launch(workers.cores, world_size=2, backend=backend, progress="none", bind_cores=False)
    assert [r["cores"] for r in free] == [mine, mine]
    crowded = distlab.launch(workers.cores, world_size=len(mine) + 1, backend=backend, progress="none")
    assert all(r["cores"] == mine for r in crowded)


def test_a_cpu_quota_is_read_from_cgroup_v1_and_v2(tmp_path):
    """A container with a CPU quota (Binder) shares its host's cores: ranks are not bound there."""
    from distlab.processes.cores import cpu_quota

    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir()
    (v1 / "cpu").mkdir(parents=True)
    assert cpu_quota(str(v2)) is None                       # no cgroup files: no quota known
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(str(v2)) is None
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cpu_quota(str(v2)) == 1.5
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota(str(v1)) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    assert cpu_quota(str(v1)) == 2.0


def test_a_cpu_quota_on_the_processs_own_group_or_above_it_counts(tmp_path):
    """Outside a container the process sits in a group further down (/proc/self/cgroup says which);
    a quota on its group or any above it limits it, and the smallest counts."""
    from distlab.processes.cores import cpu_quota

    proc = tmp_path / "proc_cgroup"
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    proc.write_text("0::/job/step\n")
    assert cpu_quota(str(v2), str(proc)) is None
    (v2 / "job" / "cpu.max").write_text("50000 100000\n")              # on the parent
    assert cpu_quota(str(v2), str(proc)) == 0.5
    (v2 / "job" / "step" / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(str(v2), str(proc)) == 0.5
    (v2 / "cpu.max").write_text("25000 100000\n")                     # the root's is smaller still
    assert cpu_quota(str(v2), str(proc)) == 0.25
    v1 = tmp_path / "v1"
    (v1 / "cpu" / "box").mkdir(parents=True)
    proc.write_text("4:memory:/other\n3:cpu,cpuacct:/box\n0::/\n")
    (v1 / "cpu" / "box" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu" / "box" / "cpu.cfs_quota_us").write_text("100000\n")
    assert cpu_quota(str(v1), str(proc)) == 1.0


@pytest.mark.parametrize("warm", WARM)
def test_a_killed_notebook_kernel_takes_its_workers_with_it(tmp_path, pid_dir, warm):
    """If the process that launched the job dies outright (SIGKILL), no worker survives it."""
    proc, pids = launch_forever_in_subprocess(tmp_path, pid_dir, warm=warm)
    assert kill_and_wait_for(proc, pids) == []


# ---- arguments bound to the training function's signature, before any process starts ---------
@pytest.mark.parametrize("fn, kwargs, match", [
    (dp.train, dict(global_batchsize=64), r"train\(\) has no argument 'global_batchsize' "
                                          r"\(did you mean 'global_batch_size'\?\); it takes: method, model"),
    (dp.train, dict(global_batch_size=64, lr="fast"), r"lr must be a positive number, got 'fast'"),
    (dp.train, dict(global_batch_size=64, steps=2.5), r"steps must be a positive integer, got 2.5"),
    (dp.train, dict(global_batch_size=64, width="wide"), r"width must be a positive integer, got 'wide'"),
    (workers.annotated, dict(), r"annotated\(\) needs the argument\(s\) steps"),
    (workers.annotated, dict(steps="3"), r"steps='3': annotated\(\) expects an int, got str"),
    (workers.annotated, dict(steps=3, rate="fast"), r"rate='fast': annotated\(\) expects a number, got str"),
    (workers.annotated, dict(steps=3, layers="fc1"), r"layers='fc1': annotated\(\) expects a list or None"),
    (workers.annotated, dict(steps=True), r"steps=True: annotated\(\) expects an int, got bool"),
])
def test_arguments_are_checked_against_the_signature_before_any_process_starts(fn, kwargs, match):
    before = children()
    t0 = time.time()
    with pytest.raises(ValueError, match=match):
        distlab.launch(fn, world_size=2, progress="none", **kwargs)
    # no process started; the time bound is generous (a loaded machine), a hang or a launch would pass it
    assert time.time() - t0 < 10 and children() - before == set()


def test_well_typed_arguments_reach_the_ranks():
    recs = distlab.launch(workers.annotated, world_size=2, steps=3, rate=1, layers=["fc1"], progress="none")
    assert [(r["steps"], r["rate"], r["layers"]) for r in recs] == [(3, 1, ["fc1"])] * 2


# ---- issue 27: what a strategy supports, refused before any process starts -----------------------
def refused_fast(fn, match, **kwargs):
    before = children()
    t0 = time.time()
    with pytest.raises(ValueError, match=match):
        distlab.launch(fn, progress="none", **kwargs)
    took = time.time() - t0
    assert children() - before == set(), "no process may start"
    return took


def test_a_strategy_on_a_backend_it_cannot_use_is_refused_in_under_a_second():
    from distlab.pipeline import pipeline
    from distlab.zero import zero

    took = refused_fast(pipeline.train, r"pipeline.train cannot run with backend='horovod': it runs on "
                                        r"backend='torchrun' only", backend="horovod")
    assert took < 1.0, f"{took:.2f} s: refused, but not at once"
    refused_fast(zero.train, "zero.train cannot run with backend='horovod'", backend="horovod", global_batch_size=64)
    refused_fast(dp.train, r"collective='ring' runs on launch\(backend='torchrun'\) only", backend="horovod",
                 collective="ring", batch_size=8)


def test_checkpoints_and_faults_are_refused_where_the_function_would_silently_ignore_them(tmp_path):
    from distlab.parallelize import registry

    keep = {"dir": str(tmp_path), "every": 2}
    for strategy in registry.STRATEGIES.values():
        if "checkpoint" not in strategy.supports:
            refused_fast(strategy.fn, "takes no checkpoints: checkpoint= would be silently ignored .strategies that "
                                      "can: data", checkpoint=keep)
        if "fault" not in strategy.supports:
            refused_fast(strategy.fn, "does not obey a fault", fault={"kind": "kill", "rank": 1, "step": 1})
    refused_fast(workers.annotated, "annotated takes no checkpoints", checkpoint=keep, steps=1)


def test_validate_args_receives_the_backend_and_the_chosen_device():
    seen = {}

    def validate(world_size, *, backend="torchrun", device="cpu", **settings):
        seen.update(world_size=world_size, backend=backend, device=device)

    workers.annotated.validate_args = validate
    try:
        distlab.bind_arguments(workers.annotated, 3, dict(steps=1), backend="horovod", device="cpu")
    finally:
        del workers.annotated.validate_args
    assert seen == {"world_size": 3, "backend": "horovod", "device": "cpu"}


def test_a_config_that_does_not_fit_its_strategy_is_refused_by_launch(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("parallel: {strategy: pipeline, pipeline: 3}\nlaunch: {processes_per_node: 2}\n")
    refused_fast(str(path), "parallel.pipeline 3 contradicts the ranks")
    # DeepSpeed declares checkpoints (through the one loop): its config with checkpoint.every passes every check
    # launch makes before starting a rank (checkpoints and faults refused by supports: the test above)
    from distlab.cluster import config as cfg
    from distlab.zero import deepspeed_zero
    from distlab.parallelize import registry

    assert "checkpoint" in deepspeed_zero.train.supports and "deepspeed" in registry.who_can("checkpoint")
    path.write_text("parallel: {strategy: deepspeed}\ncheckpoint: {every: 5}\n")
    loaded = cfg.load(str(path))
    assert loaded.checkpoint.every == 5 and loaded.call()[0] is deepspeed_zero.train
    loaded.check_call()


def test_a_one_process_reference_runs_on_one_thread_and_gives_the_threads_back():
    """Lesson 12 (cores.one_thread): inside, one thread, as each rank has; after, what the notebook had,
    even when the reference fails."""
    import torch

    from distlab.processes.cores import one_thread

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_cpu_ranks_are_forked_and_gpu_ranks_spawned(tmp_path):
    """Issue 37, on an H200: ranks forked from the launcher could not start CUDA ("Cannot re-initialize
    CUDA in forked subprocess"); GPU ranks are spawned, CPU ranks keep the fork's head start."""
    import pickle

    import torch

    from distlab.processes import rank, torch_backend

    for requested in ("cpu", "auto"):
        with open(tmp_path / rank.SETTINGS, "wb") as f:
            pickle.dump({"device": requested, "timeout": 10.0}, f)
        gpu = requested == "auto" and torch.cuda.is_available()
        assert torch_backend.start_method(str(tmp_path), 1) == ("spawn" if gpu else "fork")
