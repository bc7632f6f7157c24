"""The safety of long runs: what a run shows to the network, and what it trusts.

A learner's laptop may sit on a café's network for hours while a run trains.  So:

* a single-machine run listens on 127.0.0.1 only: its rendezvous and stores speak no password,
  and Horovod's stores hand pickled data to the driver, which unpickles it;
* nothing unpickles data from outside the run: the warm ranks' job files sit in a folder
  only its owner can open;
* a config file is data, never code: YAML is safe-loaded.
"""
import os
import stat
import subprocess
import sys
import threading
import time

import psutil
import pytest

import distlab
import workers
from helpers import ROOT, children
from distlab.cluster import config as cfg
from distlab.processes import pool
from distlab.processes.arguments import free_port

LOOPBACK = "127.0.0.1"
SAMPLE_EVERY = 0.2   # seconds between two looks at the job's sockets


# ---- looking at a running job from outside ----------------------------------------------------
def listening_sockets(pids) -> set:
    """``(pid, address, port)`` of every listening TCP socket (IPv4 or IPv6) owned by one of ``pids``."""
    return {(c.pid, c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


def describe(sockets) -> str:
    """One line per socket: where it listens, and which program owns it."""
    lines = []
    for pid, ip, port in sorted(sockets, key=lambda s: (s[0], s[2])):
        try:
            program = " ".join(psutil.Process(pid).cmdline())[:150]
        except psutil.NoSuchProcess:
            program = "(gone)"
        lines.append(f"{ip}:{port}  pid {pid}  {program}")
    return "\n".join(lines)


def sockets_while(running) -> set:
    """Every listening socket of this test's descendants, looked at every ``SAMPLE_EVERY`` s while ``running()``."""
    programs = {}
    while running():
        for sock in listening_sockets(children()):
            if sock not in programs:
                programs[sock] = describe([sock])        # now, while its process still exists
        time.sleep(SAMPLE_EVERY)
    return set(programs.values())


def sockets_of_launch(**launch) -> set:
    """Run ``distlab.launch`` in a thread and return the sockets its processes listened on."""
    outcome = {}

    def run():
        try:
            outcome["records"] = distlab.launch(**launch)
        except BaseException as err:        # re-raised in the test's thread
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    seen = sockets_while(thread.is_alive)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return seen


def assert_loopback_only(seen: set) -> None:
    assert seen, "no listening socket was seen: the check looked at nothing"
    exposed = [line for line in seen if not line.startswith(f"{LOOPBACK}:")]
    assert not exposed, "listening beyond this machine:\n" + "\n".join(exposed) + \
        "\n\nevery listening socket:\n" + "\n".join(sorted(seen))


# ---- a single-machine run listens on 127.0.0.1 only --------------------------------------------
@pytest.mark.parametrize("backend", ["torchrun", pytest.param("horovod", marks=pytest.mark.horovod)])
def test_a_notebook_launch_listens_on_loopback_only(backend):
    seen = sockets_of_launch(fn=workers.hold, world_size=2, backend=backend, warm=False, progress="none",
                             seconds=3.0)
    assert_loopback_only(seen)


@pytest.mark.parametrize("backend", ["torchrun", pytest.param("horovod", marks=pytest.mark.horovod)])
def test_distlab_run_on_one_node_listens_on_loopback_only(tmp_path, backend):
    config = cfg.RunConfig.parse({"model": {"width": 16}, "training": {"steps": 300, "global_batch_size": 32},
                                  "launch": {"backend": backend, "processes_per_node": 2, "port": free_port()},
                                  "logging": {"dir": str(tmp_path / "runs"), "name": "security"}})
    path = config.save(str(tmp_path / "run.yaml"))
    log = tmp_path / "distlab_run.log"          # a file, not a pipe: nobody reads it while the run goes
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "distlab.cli", "run", path], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            seen = sockets_while(lambda: proc.poll() is None)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert_loopback_only(seen)


# ---- nothing is unpickled from outside the run ------------------------------------------------
def test_the_warm_ranks_folder_is_for_its_owner_only():
    """The warm ranks unpickle the job files handed to this folder: no other user may write there
    (nor read the jobs' arguments)."""
    distlab.launch(workers.echo, world_size=2, warm=True, progress="none")
    try:
        folder = pool.current().dir
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, oct(os.stat(folder).st_mode)
        assert os.stat(folder).st_uid == os.getuid()
    finally:
        distlab.shutdown()


# ---- a config is data, never code ----------------------------------------------------------
def test_a_yaml_config_cannot_run_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "run.yaml"
    path.write_text(f'model: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(cfg.ConfigError, match="not valid YAML"):
        cfg.load(str(path))
    assert not marker.exists(), "loading the config ran its command"
