"""The torchrun backend: ranks started by torchrun, talking through ``torch.distributed``.

Introduced in lesson 01.  Two halves, one on each side of the process boundary:

* in the notebook, ``TorchrunJob`` starts torchrun.  In a terminal or a cluster job that is
  ``torchrun --nproc-per-node=N ... -m distlab.processes.rank POOL_DIR`` (``torchrun_command``),
  and every rank is a new Python that imports PyTorch (two to three seconds each, after
  torchrun's own import).  From a notebook distlab runs the same torchrun, with the same flags,
  inside a process that has imported PyTorch and distlab once (``main`` below), and asks it to
  *fork* the ranks from itself: they start with everything imported (lesson 00 measures it);
* in each rank, ``start_worker`` joins the process group (torchrun passes RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR and MASTER_PORT in the environment) and returns a ``TorchWorker``
  (``torch_worker``: the collectives).
"""
from __future__ import annotations

import glob
import importlib
import json
import os
import pickle
import signal
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from .jobs import Job
from .torch_worker import NAME, TorchWorker, comm_library
from .devices import choose_device, torch_device
from .rank import SETTINGS
from .worker import DEFAULT_TIMEOUT


def start_worker(device: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 run_dir: str | None = None) -> TorchWorker:
    """Join the job: called once at the start of every rank that torchrun started."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    dev = choose_device(device, local_world)
    device_ = torch_device(dev, local_rank)
    dist.init_process_group(comm_library(dev), timeout=timedelta(seconds=timeout), store=life_store(world, timeout),
                            rank=rank, world_size=world)
    return TorchWorker(rank, world, local_rank, local_world, device_, timeout, run_dir)


def life_store(world_size: int, timeout: float):
    """Lesson 10: where the ranks of this *life* of the job meet: torchrun's store, under a prefix
    of its own for every restart.

    torchrun keeps one store (a key-value server) for the whole job, and the ranks write their
    addresses into it when they build their process group.  After a restart (``--max-restarts``)
    the new ranks would find the dead ranks' addresses still there and try to connect to them
    (gloo: "Connection refused"); so each life writes under its own prefix.  Under torchrun its
    agent hosts the store; started otherwise (e.g. by a scheduler that only sets MASTER_ADDR and
    MASTER_PORT), rank 0 does.
    """
    host_it = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" and os.environ["RANK"] == "0"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=host_it, timeout=timedelta(seconds=timeout))
    return dist.PrefixStore(f"distlab/life_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def check_available() -> None:
    """torch.distributed comes with PyTorch; nothing to check."""


def torchrun_flags(world_size: int, port: int) -> list[str]:
    """Lesson 01: torchrun's flags for ``world_size`` ranks on this machine, rendezvous on ``port``."""
    return ["--nnodes=1", f"--nproc-per-node={world_size}", "--master-addr=127.0.0.1",
            f"--master-port={port}", "--max-restarts=0", "--monitor-interval=0.1"]


def torchrun_command(world_size: int, port: int, pool_dir: str) -> list[str]:
    """Lesson 01: the same job from a terminal: every rank a fresh Python."""
    return ["torchrun", *torchrun_flags(world_size, port), "-m", "distlab.processes.rank", pool_dir]


class TorchrunJob(Job):
    """torchrun and its ranks (``main`` below, run as a program of its own)."""

    def __init__(self, world_size: int, port: int, env: dict, run_dir: str):
        cmd = [sys.executable, "-m", "distlab.processes.torch_backend", str(world_size), str(port), run_dir]
        super().__init__(cmd, env, run_dir)

    def exit_codes(self) -> dict[int, int]:
        """Read from the ``exit_<rank>.json`` files ``record_exits`` writes: torchrun's own summary
        names only the first rank it saw fail, which may be a survivor of the one killed."""
        codes = {}
        for path in glob.glob(os.path.join(self.run_dir, "exit_*.json")):
            with open(path) as f:
                ended = json.load(f)
            codes[ended["rank"]] = ended["code"]
        return codes


def start_job(world_size: int, port: int, env: dict, run_dir: str) -> TorchrunJob:
    """Lesson 01: start the ranks serving ``run_dir`` under torchrun (called by ``distlab.launch``)."""
    return TorchrunJob(world_size, port, env, run_dir)


def record_exits(pool_dir: str, world_size: int) -> None:
    """How each rank ended, written to ``exit_<rank>.json`` (exit code; -n: killed by signal n).

    Only a process's parent can learn how it ended, and torchrun, the parent, keeps it to
    itself.  So a thread per rank, in torchrun's process, waits for that rank to end without
    collecting it (``WNOWAIT``: torchrun still does) and writes down what the system says.
    """
    def wait(rank: int, pid: int) -> None:
        try:
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:                       # already collected by torchrun
            return
        code = -ended.si_status if ended.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else ended.si_status
        with open(os.path.join(pool_dir, f"exit_{rank}.json"), "w") as f:
            json.dump({"rank": rank, "code": code}, f)

    def watch() -> None:
        waiting = set(range(world_size))
        while waiting:                                  # each rank writes its pid when it starts
            for rank in list(waiting):
                try:
                    with open(os.path.join(pool_dir, f"pid_{rank}")) as f:
                        pid = int(f.read())
                except (OSError, ValueError):
                    continue
                waiting.discard(rank)
                threading.Thread(target=wait, args=(rank, pid), daemon=True).start()
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()


def stop_all_when_orphaned(parent_pid: int, grace: float = 5.0) -> None:
    """If the notebook kernel that started this launcher dies, end the launcher and its ranks.

    The kernel's death sends SIGTERM (``jobs.die_with_parent``), and torchrun's handler then
    stops the ranks; but a second SIGTERM that arrives while it does so (the kernel's own
    clean-up sends one too) breaks torchrun's shutdown half-way and left launcher and ranks
    running.  So, orphaned and still alive ``grace`` seconds later, the launcher kills its
    whole process group (it leads a session of its own: the ranks are in it).
    """
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    time.sleep(grace)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def start_method(pool_dir: str, local_world_size: int) -> str:
    """Lesson 00: ``"fork"`` for ranks on CPU processes, ``"spawn"`` for ranks that will use a GPU.

    A forked child cannot start CUDA once its parent has touched the driver (PyTorch raises "Cannot
    re-initialize CUDA in forked subprocess"), and asking how many GPUs there are is enough to touch
    it: on an H200 machine every GPU rank forked from this launcher failed so (bench/gpu_check.py,
    issue 37).  Spawned ranks start a fresh Python and import PyTorch again (seconds each, once per
    pool): the price of a GPU.  CPU ranks keep the fork and its head start."""
    with open(os.path.join(pool_dir, SETTINGS), "rb") as f:
        requested = pickle.load(f)["device"]
    return "spawn" if choose_device(requested, local_world_size) == "cuda" else "fork"


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.processes.torch_backend N PORT POOL_DIR``: torchrun, forking its ranks.

    torchrun's own argument parser and launcher (``torch.distributed.run``), with
    ``--start-method=fork`` (``spawn`` for GPU ranks: ``start_method``) and ``rank.serve`` as the
    function every rank runs.  Forking CPU ranks is safe here: this process has done no tensor
    work (no half-used thread pool to inherit), and its other threads (torchrun's store,
    ``record_exits``) only wait and are not needed by the ranks: they reach the store over TCP
    like any client.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    import torch._dynamo  # noqa: F401  (torch.optim imports it when the first optimizer is built: 2-3 s)

    from ..data import digit_arrays
    from .rank import serve
    from .torchrun_local import listen_on_loopback

    listen_on_loopback()                                       # the job's store: this machine only

    world_size, port, pool_dir = (argv or sys.argv[1:])
    digit_arrays()                                             # read once, here, for every rank
    if os.environ.get("DISTLAB_PRELOAD"):      # the first job's module (launch names it): the ranks inherit it
        importlib.import_module(os.environ["DISTLAB_PRELOAD"])
    with open(os.path.join(pool_dir, "launcher_ready.json"), "w") as f:       # for lesson 00
        json.dump({"ready": time.time()}, f)
    method = start_method(pool_dir, int(world_size))
    config, _, _ = config_from_args(parse_args([*torchrun_flags(int(world_size), int(port)),
                                                f"--start-method={method}", "distlab-rank"]))
    record_exits(pool_dir, int(world_size))
    threading.Thread(target=stop_all_when_orphaned, args=(os.getppid(),), daemon=True).start()
    try:
        elastic_launch(config, entrypoint=serve)(pool_dir, NAME)
    except ChildFailedError as err:
        print(err.format_msg(), flush=True)                   # the launcher reads who failed from it
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
