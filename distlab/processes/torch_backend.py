"""The torchrun backend: ranks started by torchrun, talking through ``torch.distributed``.

Introduced in lesson 01.  Two halves, one on each side of the process boundary:

* in the notebook, ``TorchrunJob`` starts
  ``python -m torch.distributed.run --nproc-per-node=N ... -m distlab.processes.rank RUN_DIR``:
  the same program, and the same launcher, that a cluster job would run;
* in each rank, ``start_worker`` joins the process group (torchrun passes RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR and MASTER_PORT in the environment) and returns a ``TorchWorker``.
"""
from __future__ import annotations

import os
import re
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from .jobs import Job
from .worker import DEFAULT_TIMEOUT, Worker, choose_device, torch_device

NAME = "torchrun"


def comm_library(device: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device == "cuda" else "gloo"


class TorchWorker(Worker):
    """``Worker`` on ``torch.distributed`` (gloo or NCCL)."""

    backend = NAME

    def all_reduce(self, tensor, op="sum"):
        self.check_op(op)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)   # gloo has no AVG: sum, then divide
        if op == "avg":
            tensor.div_(self.world_size)
        return tensor

    def broadcast(self, tensor, src=0):
        dist.broadcast(tensor, src=src)
        return tensor

    def all_gather(self, tensor):
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor)
        return out

    def barrier(self):
        dist.barrier()

    def data_parallel(self, model, optimizer):
        """DistributedDataParallel: it broadcasts rank 0's parameters when it is built, then
        all-reduces gradients in buckets while ``backward`` is still running."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        cuda = self.device.type == "cuda"
        return DDP(model, device_ids=[self.device.index] if cuda else None), optimizer

    def stop(self):
        if dist.is_initialized():
            dist.destroy_process_group()


def start_worker(device: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 run_dir: str | None = None) -> TorchWorker:
    """Join the job: called once at the start of every rank that torchrun started."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    dev = choose_device(device, local_world)
    device_ = torch_device(dev, local_rank)
    dist.init_process_group(comm_library(dev), timeout=timedelta(seconds=timeout))
    return TorchWorker(rank, world, local_rank, local_world, device_, timeout, run_dir)


def check_available() -> None:
    """torch.distributed comes with PyTorch; nothing to check."""


# torchrun's summary of a failure: "rank : 1 ... exitcode : -9" for each failed rank
_FAILURE = re.compile(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


class TorchrunJob(Job):
    """torchrun and its ranks."""

    def __init__(self, world_size: int, port: int, env: dict, run_dir: str):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
               f"--nproc-per-node={world_size}", "--master-addr=127.0.0.1",
               f"--master-port={port}", "--max-restarts=0", "--monitor-interval=0.1",
               "-m", "distlab.processes.rank", run_dir]
        super().__init__(cmd, env, run_dir)

    def exit_codes(self) -> dict[int, int]:
        return {int(r): int(c) for r, c in _FAILURE.findall(self.log())}


def start_job(world_size: int, port: int, env: dict, run_dir: str) -> TorchrunJob:
    """Lesson 01: start the job in ``run_dir`` under torchrun (called by ``distlab.launch``)."""
    return TorchrunJob(world_size, port, env, run_dir)
