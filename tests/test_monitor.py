"""Lesson 10: watching a job from outside (``distlab.long_runs.monitor``, ``distlab monitor``, the monitor widget).

The main tests watch real runs (``distlab run`` on a small config); small hand-written metrics
files check what a real run cannot show on cue: a half-written line, a silent rank, a rank
that lags by several steps, a restart.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from helpers import once

from distlab import cli
from distlab.cluster import run
from distlab.cluster import config as cfg
from distlab.long_runs.monitor import RunMonitor, describe

CLI = [sys.executable, "-m", "distlab.cli"]


def config_file(tmp_path, name, port, **sections):
    data = {"model": {"width": 16}, "training": {"steps": 20, "global_batch_size": 64, "lr": 0.2},
            "parallel": {"method": "by_hand"}, "launch": {"processes_per_node": 2, "port": port},
            "logging": {"dir": str(tmp_path / "runs"), "name": name, "tensorboard": False}}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return cfg.RunConfig.parse(data).save(str(tmp_path / f"{name}.yaml"))


def follow_a_run(base: str):
    """A real run started in the background, and ``distlab monitor`` following it from the start (in a new
    folder under ``base``)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="monitor", dir=base))
    path = config_file(tmp_path, "watched", 29741)
    folder = run.run_dir(cfg.load(path))
    job = subprocess.Popen([*CLI, "run", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watch = subprocess.run([*CLI, "monitor", folder, "--wait", "120"], capture_output=True, text=True, timeout=300)
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0, out[-3000:]
    return path, folder, watch


@pytest.fixture
def followed(tmp_path_factory):
    """``follow_a_run``, run once for the tests that read it (helpers.once)."""
    return once(follow_a_run, str(tmp_path_factory.getbasetemp()))


def test_distlab_monitor_follows_a_run_until_it_finishes(followed):
    _, _, watch = followed
    assert watch.returncode == 0, watch.stdout[-3000:] + watch.stderr[-3000:]
    blocks = watch.stdout.strip().split("\njob ")
    assert blocks[-1].startswith("finished: 2 of 2 ranks reporting")
    assert "rank 0: step 20/20" in watch.stdout and "rank 1: step 20/20" in watch.stdout


def test_a_finished_run_reads_as_finished_with_the_records_losses(followed):
    path, folder, _ = followed
    monitor = RunMonitor(folder)
    assert monitor.poll() and not monitor.poll()          # all read at once; nothing new after
    status = monitor.status()
    assert status.state == "finished" and status.world_size == 2 and status.behind is None
    records = run.records(cfg.load(path))
    for rank, record in zip(status.ranks, records):
        assert rank.state == "finished" and rank.step == rank.total == 20 and rank.restarts == 0
        assert rank.losses == [(s.step + 1, s.loss) for s in record.steps]   # records count from 0
        assert rank.loss == record.losses[-1] and rank.samples_per_second > 0


def test_distlab_monitor_once_prints_a_line_per_rank(followed, capsys):
    _, folder, _ = followed
    assert cli.main(["monitor", folder, "--once"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[0].strip().startswith("rank 0: step 20/20, loss ")
    assert lines[1].strip().startswith("rank 1: step 20/20") and lines[2].startswith("job finished")


def test_the_widget_draws_a_finished_run_once(followed):
    from distlab.widgets.monitor import monitor

    _, folder, _ = followed
    widget = monitor(folder, follow=False)
    assert widget.thread is None and widget.status.state == "finished"
    assert repr(widget) == f"run monitor of {folder}: job finished: 2 of 2 ranks reporting"
    assert bytes(widget.image.value).startswith(b"\x89PNG") and "job finished" in widget.head.value
    assert widget.table.value.count("<tr>") == 3 and "20/20" in widget.table.value
    assert widget.wait_until(lambda s: s.min_step >= 20).state == "finished"
    with pytest.raises(RuntimeError, match="finished and the condition never held"):
        widget.wait_until(lambda s: s.min_step >= 21)


def run_and_watch(path, expected_code):
    """``distlab run`` to its end, then what the monitor reads in the run's folder."""
    out = subprocess.run([*CLI, "run", path], capture_output=True, text=True, timeout=300)
    assert out.returncode == expected_code, out.stdout[-3000:]
    folder = run.run_dir(cfg.load(path))
    monitor = RunMonitor(folder)
    monitor.poll()
    return folder, monitor.status()


def test_a_rank_that_raises_fails_the_job_naming_it(tmp_path, capsys):
    path = config_file(tmp_path, "broken", 29743, fault={"kind": "raise", "rank": 1, "step": 5})
    folder, status = run_and_watch(path, expected_code=1)
    assert status.state == "failed" and status.error["rank"] == 1 and status.error["type"] == "InjectedFault"
    assert status.silent == [] and status.max_step == 5          # rank 0 wrote its error too (a lost peer)
    assert "rank 1 failed: InjectedFault" in describe(status).splitlines()[-1]
    assert cli.main(["monitor", folder]) == 1
    assert "job failed: 2 of 2 ranks reporting; rank 1 failed" in capsys.readouterr().out


def test_a_restarted_run_goes_back_to_its_checkpoint_and_finishes(tmp_path):
    """Rank 1 is killed in its 13th step; torchrun restarts both ranks, which resume from step 10."""
    path = config_file(tmp_path, "restarted", 29745, launch={"max_restarts": 1}, checkpoint={"every": 5},
                       fault={"kind": "kill", "rank": 1, "step": 12})
    folder, status = run_and_watch(path, expected_code=0)
    assert status.state == "finished", describe(status)       # rank 0's error was the first life's
    for rank, record in zip(status.ranks, run.records(cfg.load(path))):
        assert (rank.restarts, rank.resumed_from, rank.restart_points, rank.lost_steps) == (1, 10, [(1, 10)], 2)
        assert rank.pid is not None and not psutil.pid_exists(rank.pid)     # the second life's, gone now
        assert [s for s, _ in rank.losses] == list(range(1, 21)) and rank.checkpoint == 20
        assert rank.losses[10:] == [(s.step + 1, s.loss) for s in record.steps]   # this life's steps
    assert "restart 1 (resumed from step 10)" in describe(status)


def test_a_straggler_is_named_although_it_is_never_a_step_behind():
    """Synchronous ranks wait for each other in every all-reduce: the slow one shows in its compute time."""
    import distlab
    from distlab.data_parallel import data_parallel
    from distlab.processes import pool

    distlab.launch(data_parallel.train, world_size=2, steps=20, global_batch_size=64, method="by_hand",
                   straggler=(1, 0.05), progress="none", warm=True)
    try:
        folder = os.path.join(pool.current().dir, "job_0")       # a notebook launch's run folder
        monitor = RunMonitor(folder)
        monitor.poll()
        status = monitor.status()
    finally:
        distlab.shutdown()
    assert status.state == "finished" and status.slowest == 1 and status.slowdown >= 2
    assert status.ranks[1].compute_seconds >= 0.05                 # it slept 50 ms in every step
    assert "rank 1 computes" in describe(status)


# -------------------------------------------------------------------------------------------
# hand-written metrics: what a real run does not show on cue
# -------------------------------------------------------------------------------------------
def line(rank, event, time, **fields):
    return json.dumps({"event": event, "rank": rank, "world_size": 2, "time": time, **fields}) + "\n"


def start(rank, time, restart=0, resumed_from=None, total=10):
    return line(rank, "start", time, pid=1, restart=restart, resumed_from=resumed_from, total=total)


def step(rank, n, time, loss=1.0, total=10):
    return line(rank, "step", time, step=n, total=total, loss=loss, accuracy=0.5, samples=32,
                step_seconds=0.1, comm_seconds=None)


def write(folder, rank, text, mode="a"):
    with open(os.path.join(folder, f"metrics_{rank}.jsonl"), mode) as f:
        f.write(text)


def test_a_half_written_line_waits_for_the_next_poll(tmp_path):
    monitor = RunMonitor(str(tmp_path))
    assert not monitor.poll() and monitor.status().state == "starting"
    whole = step(0, 1, 101.0, loss=2.5)
    write(tmp_path, 0, start(0, 100.0) + whole[:20])
    monitor.poll()
    assert monitor.status(now=101.0).ranks[0].state == "starting"
    write(tmp_path, 0, whole[20:])
    assert monitor.poll()
    rank = monitor.status(now=102.0).ranks[0]
    assert (rank.step, rank.loss, rank.state, rank.age) == (1, 2.5, "running", 1.0)
    assert rank.samples_per_second == pytest.approx(320.0)        # one step: samples / step_seconds


def test_a_silent_rank_stalls_the_job_and_the_rank_behind_is_named(tmp_path):
    write(tmp_path, 0, start(0, 100.0) + "".join(step(0, n, 100.0 + n) for n in range(1, 9)))
    write(tmp_path, 1, start(1, 100.0) + "".join(step(1, n, 100.0 + 2 * n) for n in range(1, 4)))
    monitor = RunMonitor(str(tmp_path), stall_seconds=30)
    monitor.poll()
    status = monitor.status(now=110.0)
    assert status.state == "running" and (status.behind, status.lag) == (1, 5)
    assert status.ranks[0].samples_per_second == pytest.approx(32.0)   # a step a second
    assert status.ranks[1].samples_per_second == pytest.approx(16.0)
    assert "rank 1 is behind by 5 steps" in describe(status)
    status = monitor.status(now=137.0)                   # rank 1's last line: 31 s ago; rank 0's: 29 s
    assert status.state == "stalled" and status.stalled == [1]
    assert "no line from rank(s) 1 for over 31 s" in describe(status)


def test_a_restart_goes_back_to_the_checkpoint_and_carries_on(tmp_path):
    write(tmp_path, 0, start(0, 100.0) + "".join(step(0, n, 100.0 + n, loss=10.0 - n) for n in range(1, 8))
          + line(0, "checkpoint", 105.5, step=5, path="ckpt", seconds=0.1) + step(0, 8, 108.0)[:30])
    write(tmp_path, 1, start(1, 100.0) + step(1, 1, 101.0))
    with open(tmp_path / "error_1.json", "w") as f:      # the failure that caused the restart
        json.dump({"rank": 1, "type": "InjectedFault", "message": "on purpose", "traceback": "", "time": 108.0}, f)
    monitor = RunMonitor(str(tmp_path))
    monitor.poll()
    failed = monitor.status(now=109.0)
    assert failed.state == "failed" and failed.error["rank"] == 1 and failed.silent == [0]
    # the new life appends to the killed rank's partial line
    write(tmp_path, 0, start(0, 110.0, restart=1, resumed_from=5) + step(0, 6, 111.0, loss=0.5))
    write(tmp_path, 1, start(1, 110.0, restart=1, resumed_from=5) + step(1, 6, 111.0, loss=0.5))
    monitor.poll()
    status = monitor.status(now=112.0)
    assert status.state == "running" and status.error is None      # that error was the last life's
    rank = status.ranks[0]
    assert (rank.step, rank.restarts, rank.resumed_from, rank.checkpoint) == (6, 1, 5, 5)
    assert rank.losses == [(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0), (5, 5.0), (6, 0.5)]
    assert rank.restart_points == [(1, 5)] and rank.lost_steps == 2
    assert "restart 1 (resumed from step 5)" in describe(status)


def test_a_run_folder_used_again_is_read_from_the_start(tmp_path):
    write(tmp_path, 0, start(0, 100.0) + "".join(step(0, n, 100.0 + n) for n in range(1, 9)))
    monitor = RunMonitor(str(tmp_path))
    monitor.poll()
    write(tmp_path, 0, start(0, 200.0) + step(0, 1, 201.0), mode="w")
    monitor.poll()
    assert monitor.status(now=202.0).ranks[0].step == 1


def test_the_widget_follows_until_the_job_ends(tmp_path):
    from distlab.widgets.monitor import monitor

    write(tmp_path, 0, start(0, 100.0, total=2) + step(0, 1, 101.0, total=2))
    write(tmp_path, 1, start(1, 100.0, total=2))
    widget = monitor(str(tmp_path), follow=True, interval=0.05, stall_seconds=1e12)
    assert widget.thread is not None and widget.status.state == "running"
    assert widget.status.behind == 1 and "rank 1 is behind by 1 step" in widget.head.value
    write(tmp_path, 1, step(1, 1, 101.0, total=2))
    assert widget.wait_until(lambda s: s.min_step >= 1, timeout=30).behind is None
    for rank in (0, 1):
        write(tmp_path, rank, step(rank, 2, 102.0, total=2) + line(rank, "end", 103.0, step=2, test_accuracy=0.5))
    assert widget.join(timeout=30).state == "finished" and not widget.thread.is_alive()
    assert "job finished" in widget.head.value and widget.image.value


def test_distlab_monitor_says_when_there_is_nothing_to_watch(tmp_path, capsys):
    assert cli.main(["monitor", str(tmp_path / "nothing"), "--wait", "0.3"]) == 2
    assert "distlab monitor: " in (err := capsys.readouterr().err) and "does not exist after 0.3 s" in err
    assert cli.main(["monitor", str(tmp_path), "--wait", "0"]) == 2
    assert "holds no metrics_<rank>.jsonl" in capsys.readouterr().err
