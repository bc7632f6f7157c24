"""Training the line reader with the one loop, on one process or with its blocks split across ranks.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  Nothing here is a
new loop: ``ReadLines`` is a ``Strategy`` whose step computes the transformer's two-part loss
(each digit, and whether the line checks out), and ``LineData`` hands the loop lines by number,
so checkpoints, metrics, faults and the step records come from ``parallel.loop`` as for every
other strategy.  ``train`` splits each block across the mesh's tensor group
(``sequence.tensor_parallel``); ``train_single`` is the one-process reference it must equal.
"""
from __future__ import annotations

import time

import torch

from ..data import load_digits
from ..parallel.loop import Done, Run, Strategy, check_settings, train_steps
from ..parallel.named_mesh import Mesh
from ..parallel.tensor_parallel import Traffic, check_backend
from ..processes.checks import check_int
from ..processes.worker import Worker
from ..records import RankRecord
from . import tensor_parallel as tp
from .lines import LineData
from .transformer import TransformerConfig, build_transformer, describe, line_loss


class ReadLines(Strategy):
    """Lesson 12: one step of the line reader: forward, the two-part loss, backward, Adam's update.
    With the blocks split, the all-reduces happen inside forward and backward (``Traffic`` counts them)."""

    def __init__(self, traffic: Traffic | None = None):
        self.traffic, self.last_step = traffic, {}     # last_step: the bytes the latest step all-reduced

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = time.time()
        before = dict(self.traffic.bytes) if self.traffic else {}
        loss, digits, _ = line_loss(*run.net(x), y)
        run.optimizer.zero_grad()
        loss.backward()
        t_compute_end = time.time()
        run.optimizer.step()
        if self.traffic:
            self.last_step = {k: v - before[k] for k, v in self.traffic.bytes.items()}
        return Done(loss.item(), digits, t_start, t_compute_end)

    @torch.no_grad()
    def finish(self, run: Run) -> None:
        """The record's last entries: the digit accuracy on the test lines (and, in its config, how
        often the line's check was read right), and this rank's parameters."""
        device = run.worker.device
        _, run.record.test_accuracy, check = line_loss(*run.model(run.data.x_test.to(device)),
                                                       run.data.y_test.to(device))
        run.record.config["test_check_accuracy"] = check
        run.record.params = {n: p.detach().cpu().clone() for n, p in run.model.named_parameters()}


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", d_model: int = 64,
                  heads: int = 4, layers: int = 2, digits: int = 4, global_batch_size: int = 32,
                  steps: int = 20, lr: float = 3e-3, seed: int = 0, causal: bool = False) -> None:
    """Lesson 12: the settings of a tensor-parallel line reader, checked before any process starts."""
    check_backend("sequence.training.train", backend, device)
    cfg = TransformerConfig(d_model=d_model, heads=heads, layers=layers, max_digits=max(digits, 1), causal=causal)
    tp.check_heads(cfg.heads, cfg.mlp_ratio * cfg.d_model, world_size)
    check_settings(world_size, model="mlp", width=d_model, steps=steps, lr=lr, dtype="float32")
    check_int("global_batch_size", global_batch_size)
    check_int("digits", digits, minimum=2)
    check_int("seed", seed, minimum=0)


def _run(worker, *, d_model, heads, layers, digits, global_batch_size, steps, lr, seed, causal, method,
         split=None) -> RankRecord:
    cfg = TransformerConfig(d_model=d_model, heads=heads, layers=layers, max_digits=digits, causal=causal)
    data = LineData(load_digits(), digits, seed)
    model = build_transformer(cfg, seed=seed).to(worker.device)
    traffic = None
    if split is not None:
        traffic = Traffic()
        tp.split_model(model, worker, split, traffic)
    record = RankRecord(worker.rank, worker.world_size, worker.backend, method, str(worker.device),
                        config=dict(describe(cfg), digits=digits, tokens=digits * 16, batch_size=global_batch_size,
                                    global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed),
                        shard=torch.arange(0))
    run = Run(worker, data, None, None, model, model, torch.optim.Adam(model.parameters(), lr=lr), record)
    strategy = ReadLines(traffic)
    record = train_steps(run, strategy, steps,
                         lambda step: torch.arange(step * global_batch_size, (step + 1) * global_batch_size))
    record.traffic = dict(strategy.last_step)
    return record


def train(worker, *, d_model: int = 64, heads: int = 4, layers: int = 2, digits: int = 4,
          global_batch_size: int = 32, steps: int = 20, lr: float = 3e-3, seed: int = 0,
          causal: bool = False) -> RankRecord:
    """Lesson 12: the line reader with every block split across all ranks (tensor parallelism by hand).

    Every rank trains on the whole batch (tensor parallelism does not split the data); the record's
    ``params`` are this rank's slices (``tensor_parallel.merge_params`` joins them), ``traffic`` the
    bytes it all-reduced in the last step, forward and backward."""
    mesh = Mesh(worker, tensor=worker.world_size)
    return _run(worker, d_model=d_model, heads=heads, layers=layers, digits=digits,
                global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed, causal=causal,
                method="transformer tensor parallel", split=mesh.group("tensor"))


def train_single(*, d_model: int = 64, heads: int = 4, layers: int = 2, digits: int = 4,
                 global_batch_size: int = 32, steps: int = 20, lr: float = 3e-3, seed: int = 0,
                 causal: bool = False) -> RankRecord:
    """Lesson 12: the reference: the same training in this process, nothing split."""
    alone = Worker(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"))
    return _run(alone, d_model=d_model, heads=heads, layers=layers, digits=digits,
                global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed, causal=causal,
                method="transformer, one process")


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})
