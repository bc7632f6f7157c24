"""The same pipeline through PyTorch's own ``torch.distributed.pipelining``.

Introduced in lesson 06.  ``pipeline.py`` writes the schedules out by hand so that every
send and every pass can be seen; in a real project you would use the library's.  This runs
the *same* cut of the same model on the same batches with ``ScheduleGPipe`` or
``Schedule1F1B``, so the lesson (and the tests) can check that the two give the same
parameters: the hand-written version is the library's idea, not an approximation of it.

What the library needs from us is what ``pipeline.py`` worked out: each rank's part of the
model (a ``PipelineStage``), the number of micro-batches and a loss function.  The schedule
cuts the batch into micro-batches itself and, with ``scale_grads=True``, divides the summed
gradients by their number, the same averaging as dividing each micro-batch's loss by ``m``.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ..comm.collectives import check_torchrun
from ..data import global_batch, load_digits, shard_indices
from ..models import DTYPES, build_model
from ..records import RankRecord
from . import pipeline, stages
from ..train.loop import Done, Run, Strategy, train_steps

LIBRARY_SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def validate_args(world_size: int, *, schedule: str, backend: str = "torchrun", device: str = "cpu",
                  **settings) -> None:
    """Lesson 06: ``pipeline.validate_args``, for the library's two schedules."""
    pipeline.check_place("torch_pipeline.train", backend, device)
    if schedule not in LIBRARY_SCHEDULES:
        raise ValueError(f"torch.distributed.pipelining is used here with {' or '.join(LIBRARY_SCHEDULES)}, "
                         f"got {schedule!r}")
    settings.pop("seed", None)
    pipeline.validate_args(world_size, schedule=schedule, chunks=1, **settings)


def train(worker, *, model: str = "mlp", width: int = 64, depth: int = 2, global_batch_size: int = 64,
          micro_batches: int = 1, schedule: str = "gpipe", steps: int = 20, lr: float = 0.1,
          seed: int = 0, dtype: str = "float32") -> RankRecord:
    """Lesson 06: ``pipeline.train``'s job through ``torch.distributed.pipelining``."""
    check_torchrun(worker)
    p, rank, device = worker.world_size, worker.rank, worker.device
    data = load_digits(dtype=DTYPES[dtype])
    whole = build_model(model, width, seed=seed, dtype=DTYPES[dtype], depth=depth).to(device)
    part = stages.split(whole, p, data.x_train[:1].to(device))[rank]
    params = stages.owned_names(whole, part)
    optimizer = torch.optim.SGD(params.values(), lr=lr)
    stage = PipelineStage(part, rank, p, device)
    runner = LIBRARY_SCHEDULES[schedule](stage, micro_batches, loss_fn=F.cross_entropy)
    record = RankRecord(rank, p, worker.backend, f"torch.distributed.pipelining {schedule}", str(device),
                        config=dict(model=model, width=width, depth=depth, batch_size=global_batch_size // p,
                                    global_batch_size=global_batch_size, micro_batches=micro_batches,
                                    schedule=schedule, steps=steps, lr=lr, seed=seed, dtype=dtype),
                        shard=shard_indices(data.n_train, 0, 1, seed=seed))
    run = Run(worker, data, data.x_train.to(device), data.y_train.to(device), params, None, optimizer, record)
    return train_steps(run, LibrarySchedule(runner, rank, p), steps,
                       lambda step: global_batch(data.n_train, 1, global_batch_size, step, seed=seed))


class LibrarySchedule(Strategy):
    """Lesson 06: the library's schedule object as a strategy of the one loop: its ``step`` is the step.

    As in ``pipeline.PipelineSchedule``, ``run.model`` is this stage's parameters by name, so the
    loop's checkpoints hold this stage's shard and resume it.  The first stage feeds the images,
    the last the labels (and gets the micro-batches' losses back), a single stage both; a stage
    between feeds nothing.
    """

    def __init__(self, runner, rank: int, p: int):
        self.runner, self.rank, self.p = runner, rank, p

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = time.time()
        losses: list[torch.Tensor] = []
        first, last = self.rank == 0, self.rank == self.p - 1      # one stage is both
        self.runner.step(*((x,) if first else ()), **(dict(target=y, losses=losses) if last else {}))
        t_compute_end = time.time()
        run.optimizer.step()
        run.optimizer.zero_grad()
        loss = sum(x.item() for x in losses) / len(losses) if losses else float("nan")
        return Done(loss, float("nan"), t_start, t_compute_end, samples=len(y) // self.p)

    def finish(self, run: Run) -> None:
        run.record.params = {n: q.detach().cpu().clone() for n, q in run.model.items()}


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "cpu", "cuda", "checkpoint", "fault"})   # through the one loop
