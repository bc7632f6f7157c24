"""Which device a rank computes on: its own GPU when there is one for every rank, else the CPU.

Introduced in lesson 00 (what this machine has).  One GPU per rank with NCCL when the machine has
at least as many GPUs as local ranks; otherwise CPU processes that talk over gloo.  The code path is
the same; only the device and the communication library change (``worker.Worker`` is the rest).
"""
from __future__ import annotations

import torch


def choose_device(requested: str = "auto", local_world_size: int = 1) -> str:
    """Lesson 00: pick ``"cuda"`` or ``"cpu"`` for a job of ``local_world_size`` ranks per machine.

    ``"auto"`` uses the GPUs only when there is one for every local rank (sharing a GPU
    between ranks of one job would hide what the lessons measure).  ``"cuda"`` insists
    and fails clearly when the GPUs are not there.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {requested!r}")
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "cuda" and n_gpus < local_world_size:
        raise RuntimeError(f"device='cuda' needs one GPU per rank: {local_world_size} ranks asked for, "
                           f"{n_gpus} GPU(s) visible. Use device='cpu' (or 'auto') to run on CPU "
                           "processes over gloo.")
    if requested == "auto":
        return "cuda" if n_gpus >= local_world_size else "cpu"
    return requested


def torch_device(dev: str, local_rank: int) -> torch.device:
    """The device of local rank ``local_rank``: its own GPU, or the CPU."""
    if dev == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
