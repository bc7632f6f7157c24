"""``distlab run CONFIG``: the training a run config describes, started by torchrun or horovodrun.

Introduced in lesson 09 (from laptop to cluster).  A notebook's ``distlab.launch`` keeps warm
ranks and draws widgets; a cluster has neither, and starts jobs with the engines built for it.
So this module does not launch anything of its own: it saves the config (``--set`` overrides
applied) into the run's folder and hands it to **torchrun** (``python -m torch.distributed.run``)
or **horovodrun**, whose ranks each run ``cluster/config_rank.py`` on it: read the config, join
the job, train, save the record.  Every scheduler (SLURM, Azure ML, Kubernetes: ``job_files``)
starts the same rank program.  While the ranks train this shows a progress line for the ranks on
this node; afterwards it reads their records and prints what they reached.

On several nodes the same command runs on every node (``--node-rank``, usually from the
scheduler: ``$SLURM_NODEID``, ``$NODE_RANK``).  torchrun's **c10d rendezvous** then meets on the
first node: each node's torchrun connects to ``hosts[0]:port``, they agree on the group, and
global ranks are handed out node by node.  Each node writes the config into its own copy of the
run's folder, so nothing needs a shared file system; each rank's record lands on its node.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import psutil

from .config import ConfigError, RunConfig
from ..long_runs import diagnosis
from ..processes.progress import ProgressReader, describe


def run_dir(config: RunConfig) -> str:
    return os.path.abspath(os.path.join(config.logging.dir, config.logging.name))


def interface_of(address: str) -> str | None:
    """The network interface that carries ``address`` on this machine (None: not one of ours).

    gloo must be told which interface to talk on (``GLOO_SOCKET_IFNAME``): left alone it picks
    the one the host name resolves to, often loopback, and the other nodes cannot reach it.
    """
    try:
        ip = socket.gethostbyname(address)
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None


def torchrun_command(config: RunConfig, node_rank: int = 0) -> tuple[list[str], dict]:
    """Lesson 09: the torchrun line (and environment) that runs ``config`` on node ``node_rank``."""
    launch = config.launch
    entry = ["-m", "distlab.cluster.config_rank", config_path(config)]
    base = [sys.executable, "-m", "torch.distributed.run"]
    if launch.nodes == 1:                      # torchrun whose store listens on 127.0.0.1 only (lesson 10)
        base = [sys.executable, "-m", "distlab.processes.torchrun_local"]
        flags = ["--nnodes=1", f"--nproc-per-node={launch.processes_per_node}", "--master-addr=127.0.0.1",
                 f"--master-port={launch.port}"]
        return [*base, *flags, *restart_flags(config), *entry], {}
    if not launch.hosts:
        raise ConfigError("launch.hosts must name every node for a multi-node run (the first hosts the rendezvous)")
    if not 0 <= node_rank < launch.nodes:
        raise ConfigError(f"--node-rank {node_rank} is not a node of this run: nodes are 0 to {launch.nodes - 1}")
    me = launch.hosts[node_rank]
    flags = [f"--nnodes={launch.nodes}", f"--nproc-per-node={launch.processes_per_node}",
             "--rdzv-backend=c10d", f"--rdzv-endpoint={launch.hosts[0]}:{launch.port}",
             f"--rdzv-id={config.logging.name}",
             # who hosts the rendezvous store: the first node; torchrun's own guess compares host
             # names, which fails when every node's name resolves to 127.0.0.1
             f"--rdzv-conf=is_host={1 if node_rank == 0 else 0}",
             f"--local-addr={me}"]
    env = {}
    interface = interface_of(me)
    if interface and interface != "lo":
        env["GLOO_SOCKET_IFNAME"] = interface
    return [*base, *flags, *restart_flags(config), *entry], env


def restart_flags(config: RunConfig) -> list[str]:
    """Lesson 10: how often torchrun may restart the ranks.  When one fails, torchrun's agent stops
    the others and, while restarts are left, starts them all again: a new life of the same job,
    which resumes from the newest checkpoint (``checkpoint.every`` must be set, or it starts over)."""
    return [f"--max-restarts={config.launch.max_restarts}", "--monitor-interval=0.1"]


def horovodrun_command(config: RunConfig) -> tuple[list[str], dict]:
    """Lesson 09: the horovodrun line for ``config``: started once, on the first node, it starts
    every rank itself (on other nodes over ssh, in the same folder, with the same config path: on
    a cluster that path must be on a shared file system, or copied to every node first).

    On one node it is horovodrun through ``processes/horovodrun_local.py``, whose servers listen
    on 127.0.0.1 only (no other machine needs to reach them; that file says why it matters)."""
    from ..processes.horovod_backend import LOOPBACK

    launch = config.launch
    if launch.nodes == 1:
        here = os.path.dirname(os.path.abspath(__file__))
        horovodrun = [sys.executable, os.path.join(os.path.dirname(here), "processes",
                                                   "horovodrun_local.py")]     # by path: no PyTorch import
        hosts, interface = f"localhost:{launch.world_size}", LOOPBACK
    else:
        horovodrun = [shutil.which("horovodrun") or os.path.join(os.path.dirname(sys.executable), "horovodrun")]
        if not launch.hosts:
            raise ConfigError("launch.hosts must name every node for a multi-node run")
        hosts = ",".join(f"{h}:{launch.processes_per_node}" for h in launch.hosts)
        interface = interface_of(launch.hosts[0]) or LOOPBACK
    ssh = []
    if launch.nodes > 1:
        ssh = ["--ssh-port", str(launch.ssh_port)]
        if launch.ssh_identity_file:
            ssh += ["--ssh-identity-file", launch.ssh_identity_file]
    cmd = [*horovodrun, "-np", str(launch.world_size), "--gloo", "-H", hosts, "--network-interfaces", interface,
           *ssh, sys.executable, "-m", "distlab.cluster.config_rank", config_path(config)]
    return cmd, {}


def command(config: RunConfig, node_rank: int = 0) -> tuple[list[str], dict]:
    if config.launch.backend == "horovod":
        return horovodrun_command(config)
    return torchrun_command(config, node_rank)


def config_path(config: RunConfig) -> str:
    return os.path.join(run_dir(config), "config.yaml")


def prepare(config: RunConfig) -> str:
    """A fresh run folder holding the config the ranks will read; returns the folder.

    What an earlier run left there goes, except its checkpoints when this run may resume from
    them (lesson 10: run the same command again after a crash, and it carries on).
    """
    folder = run_dir(config)
    keep = config.checkpoint_dir() if config.checkpoint.every and config.checkpoint.resume else None
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if path == keep:
                continue
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    os.makedirs(folder, exist_ok=True)
    config.save(config_path(config))
    return folder


def run(config: RunConfig, node_rank: int = 0, stream=None) -> int:
    """Lesson 09: train as ``config`` says, on this node; return the exit code (0: every local rank finished).

    Ctrl-C stops torchrun (and so every rank on this node) and returns 130.
    """
    stream = stream or sys.stdout
    if config.launch.backend == "horovod" and node_rank != 0:
        print(f"node {node_rank}: nothing to start here: horovodrun, on the first node, starts every rank",
              file=stream)
        return 0
    config.check_call()                     # what the notebook launcher checks, before any process starts
    cmd, extra_env = command(config, node_rank)
    folder = prepare(config)
    log_path = os.path.join(folder, f"launcher_node{node_rank}.log")
    print(f"distlab run: {config.parallel.strategy} parallelism, {config.launch.nodes} node(s) x "
          f"{config.launch.processes_per_node} ranks on {config.launch.backend}; this is node {node_rank}",
          file=stream)
    print("  " + " ".join(cmd), file=stream, flush=True)
    started = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env={**os.environ, **extra_env}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        reader = ProgressReader(folder, config.launch.world_size)
        last = 0.0
        try:
            while proc.poll() is None:
                if reader.poll() and time.time() - last >= 1.0:
                    last = time.time()
                    print("  " + " | ".join(f"rank {r}: {describe(p)}" for r, p in enumerate(reader.latest)
                                            if p is not None), file=stream, flush=True)
                time.sleep(0.1)
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            print("  interrupted: every rank on this node was stopped", file=stream)
            return 130
    return _report(config, folder, proc.returncode, time.time() - started, log_path, stream, node_rank)


def start(config_path: str, *overrides: str) -> subprocess.Popen:
    """Lesson 10: ``distlab run CONFIG`` started in the background, as from a second terminal.

    A notebook can then watch it (``widgets.monitor``), or break it, while it trains.  Its output
    goes to ``CONFIG.log``; ``.wait()`` returns its exit code.  Stop it with ``.send_signal(SIGINT)``
    (Ctrl-C: ``distlab run`` stops every rank and returns 130).
    """
    cmd = [sys.executable, "-m", "distlab.cli", "run", config_path, *(x for o in overrides for x in ("--set", o))]
    with open(f"{config_path}.log", "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _report(config, folder, code, seconds, log_path, stream, node_rank=0) -> int:
    import torch

    errors = diagnosis.read_errors(folder)
    restarts = _restarts(folder)
    with open(log_path, errors="replace") as f:
        log = f.read()
    killed = diagnosis.killed_in_log(log, first_rank=node_rank * config.launch.processes_per_node)
    failures = diagnosis.failure_lines(errors, killed)
    if code != 0:
        for line in failures:
            print(line, file=stream)
        print(f"distlab run: failed (exit {code}); the launcher's log, {log_path}, ends:\n{log[-3000:]}", file=stream)
        return 1
    if restarts:                         # lesson 10: failures that restarts got over
        print(f"  torchrun restarted the ranks {restarts} time(s) ({'; '.join(failures) or 'a rank died'}); "
              "they resumed from a checkpoint", file=stream)
    records = {rec.rank: rec for rec in _records(folder)}
    summary = {"seconds": round(seconds, 2), "ranks_here": sorted(records), "restarts": restarts,
               "resumed_from": {r: rec.resumed_from for r, rec in records.items()},
               "final_loss": {r: rec.losses[-1] for r, rec in records.items() if rec.steps},
               "test_accuracy": {r: rec.test_accuracy for r, rec in records.items()}}
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for r, rec in sorted(records.items()):
        loss = f"final loss {rec.losses[-1]:.4f}" if rec.steps else "no steps recorded"
        print(f"  rank {r}: {len(rec.steps)} steps, {loss}, test accuracy {rec.test_accuracy:.3f}", file=stream)
    if config.checkpoint.dir and 0 in records:
        os.makedirs(config.checkpoint.dir, exist_ok=True)
        path = os.path.join(config.checkpoint.dir, f"{config.logging.name}.pt")
        torch.save(records[0].params, path)
        print(f"  rank 0's parameters saved to {path}", file=stream)
    print(f"distlab run: done in {seconds:.1f} s; records in {folder}", file=stream)
    return 0


def _restarts(folder: str) -> int:
    """How many times the ranks on this node were restarted, as their metrics files say (``monitor``)."""
    from ..long_runs.monitor import RunMonitor

    monitor = RunMonitor(folder)
    monitor.poll()
    return max((r.restarts for r in monitor.status().ranks), default=0)


def _records(folder: str) -> list:
    import torch

    found = [n for n in os.listdir(folder) if n.startswith("record_") and n.endswith(".pt")]
    return sorted((torch.load(os.path.join(folder, n), weights_only=False) for n in found), key=lambda r: r.rank)


def records(config: RunConfig) -> list:
    """Lesson 09: the records this node's ranks left (``distlab run`` or a job), in rank order."""
    return _records(run_dir(config))
