"""Lesson 10: the files a job leaves for watching it: TensorBoard's event files and Horovod's timeline.

Every test reads what a real run wrote: ``distlab run`` of a small config (torchrun or
horovodrun), or ``distlab.launch`` on warm ranks.  TensorBoard's numbers must be the very numbers
of the metrics files and the records, and ``tensorboard --logdir RUN_FOLDER`` must serve them.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import once

import distlab
from distlab.cluster import config as cfg
from distlab.cluster import run
from distlab.long_runs.horovod_timeline import load_events, phase_totals, read_ready, read_timeline, rounds
from distlab.long_runs.metrics import metrics_path
from distlab.data_parallel import data_parallel
from distlab.processes import pool as pools
from distlab.processes.rank import job_dir

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

CLI = [sys.executable, "-m", "distlab.cli"]
STEPS = 20
TIMELINE_STEPS = 5


def config_file(tmp_path, name, port, **sections):
    data = {"model": {"width": 16}, "training": {"steps": STEPS, "global_batch_size": 32, "lr": 0.2},
            "parallel": {"method": "by_hand"}, "launch": {"processes_per_node": 2, "port": port},
            "logging": {"dir": str(tmp_path / "runs"), "name": name, "tensorboard": True}}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return cfg.RunConfig.parse(data).save(str(tmp_path / f"{name}.yaml"))


def distlab_run(path):
    out = subprocess.run([*CLI, "run", path], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def metrics_losses(folder, rank):
    with open(metrics_path(folder, rank)) as f:
        lines = [json.loads(line) for line in f]
    return [line["loss"] for line in lines if line["event"] == "step"], [
        line["step"] for line in lines if line["event"] == "step"]


def board(folder, rank):
    """That rank's TensorBoard scalars, as TensorBoard's own reader sees them: {tag: [(step, value)]}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.join(folder, "tensorboard", f"rank_{rank}"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_board_matches(folder, records):
    for rec in records:
        scalars = board(folder, rec.rank)
        assert {"loss", "samples_per_second", "step_seconds"} <= set(scalars), sorted(scalars)
        steps = [s for s, _ in scalars["loss"]]
        assert steps == list(range(1, len(rec.steps) + 1)), steps              # one value per step
        logged, logged_steps = metrics_losses(folder, rec.rank)
        assert logged_steps == steps
        for (_, value), in_file, in_record in zip(scalars["loss"], logged, rec.losses):
            assert value == pytest.approx(in_file, abs=1e-6) and value == pytest.approx(in_record, abs=1e-6)
        assert [s for s, _ in scalars["step_seconds"]] == steps
        assert all(v > 0 for _, v in scalars["samples_per_second"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def tensorboard_command():
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "tensorboard.main"]


def test_tensorboard_files_hold_every_ranks_steps_and_tensorboard_serves_them(tmp_path):
    path = config_file(tmp_path, "board", 29691)
    distlab_run(path)
    config = cfg.load(path)
    folder = run.run_dir(config)
    records = run.records(config)
    assert [r.rank for r in records] == [0, 1] and all(len(r.steps) == STEPS for r in records)
    assert sorted(os.listdir(os.path.join(folder, "tensorboard"))) == ["rank_0", "rank_1"]
    assert_board_matches(folder, records)

    # tensorboard --logdir RUN_FOLDER: both ranks are runs of their own, each with its loss
    port = free_port()
    log = open(tmp_path / "tensorboard.log", "w")
    server = subprocess.Popen([*tensorboard_command(), "--logdir", folder, "--port", str(port),
                               "--host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    wanted = {"tensorboard/rank_0", "tensorboard/rank_1"}
    runs, tags = [], {}
    try:
        deadline = time.time() + 60
        while time.time() < deadline and server.poll() is None:
            try:
                runs = get_json(f"http://127.0.0.1:{port}/data/runs")
                tags = get_json(f"http://127.0.0.1:{port}/data/plugin/scalars/tags")
                if wanted <= set(runs) and all("loss" in tags.get(r, {}) for r in wanted):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass                                   # not listening yet, or still loading
            time.sleep(0.5)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
    output = (tmp_path / "tensorboard.log").read_text()[-3000:]
    assert wanted <= set(runs), f"runs {runs}; tensorboard said:\n{output}"
    for r in wanted:
        assert {"loss", "samples_per_second", "step_seconds"} <= set(tags[r]), tags
    assert server.returncode is not None                                      # no server left behind


def test_launch_writes_tensorboard_files_only_when_asked():
    """``distlab.launch(..., tensorboard=True)``: the job's folder (on warm ranks, ``job_<n>`` in the
    pool's folder) holds TensorBoard files with the records' losses; the default writes none."""
    kwargs = dict(width=16, steps=8, lr=0.2, global_batch_size=32, method="ddp", record_grads_at=())
    try:
        with_board = distlab.launch(data_parallel.train, 2, tensorboard=True, warm=True, progress="none", **kwargs)
        pool = pools.current()
        assert pool is not None and pool.jobs == 1
        first = job_dir(pool.dir, 0)
        assert sorted(os.listdir(os.path.join(first, "tensorboard"))) == ["rank_0", "rank_1"]
        assert_board_matches(first, with_board)

        without = distlab.launch(data_parallel.train, 2, warm=True, progress="none", **kwargs)
        assert pools.current() is pool and pool.jobs == 2                       # the same ranks, job 1
        second = job_dir(pool.dir, 1)
        assert os.path.exists(metrics_path(second, 0)) and os.path.exists(metrics_path(second, 1))
        assert not os.path.exists(os.path.join(second, "tensorboard"))
        assert [r.losses for r in without] == [r.losses for r in with_board]    # watching changes nothing
    finally:
        distlab.shutdown()


def test_a_horovod_timeline_on_torchrun_is_refused():
    with pytest.raises(cfg.ConfigError, match="horovod"):
        cfg.RunConfig.parse({"launch": {"backend": "torchrun"}, "logging": {"horovod_timeline": True}})


def timeline_run(base: str):
    """A real Horovod run with ``logging.horovod_timeline: true`` (in a new folder under ``base``): its
    timeline file and its records."""
    tmp_path = Path(tempfile.mkdtemp(prefix="timeline", dir=base))
    path = config_file(tmp_path, "timeline", 29692, training={"steps": TIMELINE_STEPS},
                       parallel={"method": "ddp"}, launch={"backend": "horovod"},
                       logging={"horovod_timeline": True, "tensorboard": False})
    distlab_run(path)
    config = cfg.load(path)
    return os.path.join(run.run_dir(config), "horovod_timeline.json"), run.records(config)


@pytest.fixture
def timeline(tmp_path_factory):
    """``timeline_run``, run once for the tests that read it (helpers.once)."""
    return once(timeline_run, str(tmp_path_factory.getbasetemp()))


@pytest.mark.horovod
def test_the_horovod_timeline_shows_every_gradients_phases(timeline):
    path, records = timeline
    assert os.path.exists(path)
    spans = read_timeline(path)
    phases = {s["phase"] for s in spans}
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "GLOO_ALLREDUCE"} <= phases, phases
    assert {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"} <= phases, phases   # tensor fusion
    params = list(records[0].params)                       # fc1.weight, fc1.bias, ...
    for name in params:                                    # DistributedOptimizer: one all-reduce per gradient
        mine = [s for s in spans if s["tensor"] == f"allreduce.{name}"]
        for phase in ("NEGOTIATE_ALLREDUCE", "ALLREDUCE", "GLOO_ALLREDUCE"):
            assert sum(s["phase"] == phase for s in mine) >= TIMELINE_STEPS, (name, phase)
    allreduced = {s["tensor"] for s in spans if s["phase"] == "ALLREDUCE"}
    assert allreduced == {f"allreduce.{n}" for n in params}, allreduced
    assert all(s["microseconds"] >= 0 for s in spans)
    assert [s["start_us"] for s in spans] == sorted(s["start_us"] for s in spans)
    count, ms = phase_totals(spans)["ALLREDUCE"]
    assert count >= TIMELINE_STEPS * len(params) and ms > 0


@pytest.mark.horovod
def test_the_timeline_is_cut_into_rounds_with_each_ranks_ready_marks(timeline):
    """Lesson 10's picture: the broadcast of the parameters, then one all-reduce round per step;
    in the negotiations Horovod did not answer from its cache, a ready mark from every rank."""
    from distlab.widgets.horovod import timeline_figure

    path, records = timeline
    ready = read_ready(path)
    assert {m["rank"] for m in ready} == {0, 1}
    groups = rounds(read_timeline(path), ready)
    assert groups[0][0]["tensor"].startswith("broadcast.")
    steps = [g for g in groups if g[0]["tensor"].startswith("allreduce.")]
    assert len(steps) == TIMELINE_STEPS
    for g in steps:                                   # every gradient all-reduced once per round
        assert sorted(s["tensor"] for s in g if s["phase"] == "ALLREDUCE") == sorted(
            f"allreduce.{n}" for n in records[0].params)
    marked = [g for g in groups if any(s["phase"] == "ready" for s in g)]
    assert marked and all({s["rank"] for s in g if s["phase"] == "ready"} == {0, 1} for g in marked)
    fig = timeline_figure(path)
    assert len(fig.axes) == len(groups)
    assert [ax.get_title() for ax in fig.axes][1:] == [f"all-reduce, step {k}" for k in range(1, TIMELINE_STEPS + 1)]


@pytest.mark.horovod
def test_a_timeline_cut_short_reads_up_to_the_cut(timeline, tmp_path):
    path, _ = timeline
    text = open(path).read()
    full = load_events(path)
    cut = int(len(text) * 0.6)
    short = tmp_path / "cut.json"
    short.write_text(text[:cut])
    events = load_events(str(short))
    # the events that end before the cut, found by decoding the whole file one event at a time
    decoder, ends, i = json.JSONDecoder(), [], text.index("[") + 1
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "]":
            break
        _, i = decoder.raw_decode(text, i)
        ends.append(i)
    assert len(ends) == len(full)
    complete = sum(end <= cut for end in ends)
    assert 0 < len(events) < len(full)
    assert events == full[:len(events)] and len(events) == complete
    spans = read_timeline(str(short))
    assert 0 < len(spans) < len(read_timeline(path))

