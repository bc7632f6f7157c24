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

Lesson 15 ("Where the time goes") adds the library's zero-bubble schedules, all of which split the
backward into B and W: ``ScheduleInterleavedZeroBubble`` with one stage a rank (``"zb_h1"``: the
paper's ZB1P, the order ``schedules.zb_h1`` writes by hand) or two (``"interleaved_zb"``, chunks
``r`` and ``r + p``); ``ScheduleZBVZeroBubble`` (``"zbv"``) and DeepSeek's ``ScheduleDualPipeV``
(``"dualpipev"``), whose two chunks a rank run down and back up a V (chunks ``r`` and ``2p - 1 - r``).
All four train on gloo CPU ranks in torch 2.13 (two ranks checked) to one process's parameters; what
PyTorch would refuse on the ranks is refused here first (``validate_args``).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe,
                                          ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)

from ..comm.collectives import check_torchrun
from ..data import global_batch, load_digits, shard_indices
from ..models import DTYPES, build_model
from ..records import RankRecord
from . import pipeline, schedules, stages
from ..train.loop import Done, Run, Strategy, train_steps

LIBRARY_SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B,
                     # lesson 15: the zero-bubble family (B and W apart), each rank holding CHUNKS chunks
                     "zb_h1": ScheduleInterleavedZeroBubble, "interleaved_zb": ScheduleInterleavedZeroBubble,
                     "zbv": ScheduleZBVZeroBubble, "dualpipev": ScheduleDualPipeV}
CHUNKS = {"interleaved_zb": 2, "zbv": 2, "dualpipev": 2}     # model chunks a rank holds (1 for the others)
V_SHAPED = ("zbv", "dualpipev")                               # rank r holds chunks r and 2p - 1 - r


def chunks_of(schedule: str, rank: int, p: int) -> list[int]:
    """Lesson 15: the virtual stages (chunks of the model, in its order) rank ``rank`` of ``p`` holds."""
    if CHUNKS.get(schedule, 1) == 1:
        return [rank]
    return [rank, 2 * p - 1 - rank] if schedule in V_SHAPED else [rank, rank + p]


def validate_args(world_size: int, *, schedule: str, backend: str = "torchrun", device: str = "cpu",
                  **settings) -> None:
    """Lesson 06: ``pipeline.validate_args``, for the library's schedules; lesson 15: with the rules
    PyTorch itself enforces only once the ranks have started, checked here first."""
    pipeline.check_place("torch_pipeline.train", backend, device)
    if schedule not in LIBRARY_SCHEDULES:
        raise ValueError("torch.distributed.pipelining is used here with gpipe or 1f1b, or (lesson 15) its "
                         f"zero-bubble schedules {', '.join(list(LIBRARY_SCHEDULES)[2:])}; got {schedule!r}")
    settings.pop("seed", None)
    p, m, chunks = world_size, settings.get("micro_batches", 1), CHUNKS.get(schedule, 1)
    if schedule == "1f1b" and m < p:        # Schedule1F1B's own ValueError, raised on the ranks otherwise
        raise ValueError(f"PyTorch's Schedule1F1B needs micro_batches >= stages: got {m} for {p} stages")
    if schedule == "dualpipev" and m < p * chunks:     # measured: DualPipeV raises this on every rank
        raise ValueError(f"PyTorch's ScheduleDualPipeV needs at least as many micro-batches as stages: "
                         f"{p} ranks x 2 chunks = {p * chunks} stages, got micro_batches={m}")
    rounds = max(1, m // p)
    if schedule == "interleaved_zb" and m % rounds:
        raise ValueError(f"PyTorch's ScheduleInterleavedZeroBubble sends micro-batches round in {rounds} rounds "
                         f"(micro_batches // stages): micro_batches={m} must be a multiple of {rounds}")
    # the hand-written checks of the same settings: zb_h1's own (m >= p), the others' as GPipe's
    pipeline.validate_args(world_size, schedule=schedule if schedule in schedules.SCHEDULES else "gpipe",
                           chunks=1, **settings)
    if chunks > 1:
        stages.check_stages(build_model(settings.get("model", "mlp"), settings.get("width", 64),
                                        depth=settings.get("depth", 2)), p * chunks)


def train(worker, *, model: str = "mlp", width: int = 64, depth: int = 2, global_batch_size: int = 64,
          micro_batches: int = 1, schedule: str = "gpipe", steps: int = 20, lr: float = 0.1,
          seed: int = 0, dtype: str = "float32") -> RankRecord:
    """Lesson 06: ``pipeline.train``'s job through ``torch.distributed.pipelining``; lesson 15: the
    zero-bubble schedules too.  The record's ``config["order"]`` is the passes PyTorch planned for this
    rank (``"0F0"``: virtual stage 0's forward of micro-batch 0; ``I``: B, the input's half; ``W``)."""
    check_torchrun(worker)
    p, rank, device = worker.world_size, worker.rank, worker.device
    data = load_digits(dtype=DTYPES[dtype])
    whole = build_model(model, width, seed=seed, dtype=DTYPES[dtype], depth=depth).to(device)
    total = p * CHUNKS.get(schedule, 1)                        # virtual stages, in the model's order
    parts, mine = stages.split(whole, total, data.x_train[:1].to(device)), chunks_of(schedule, rank, p)
    params = {n: q for v in mine for n, q in stages.owned_names(whole, parts[v]).items()}
    optimizer = torch.optim.SGD(params.values(), lr=lr)
    built = [PipelineStage(parts[v], v, total, device) for v in mine]
    several = LIBRARY_SCHEDULES[schedule] not in (ScheduleGPipe, Schedule1F1B)    # takes a list of stages
    runner = LIBRARY_SCHEDULES[schedule](built if several else built[0], micro_batches, loss_fn=F.cross_entropy)
    order = [str(a) for a in getattr(runner, "pipeline_order", {}).get(rank, []) if a is not None]
    record = RankRecord(rank, p, worker.backend, f"torch.distributed.pipelining {schedule}", str(device),
                        config=dict(model=model, width=width, depth=depth, batch_size=global_batch_size // p,
                                    global_batch_size=global_batch_size, micro_batches=micro_batches,
                                    schedule=schedule, steps=steps, lr=lr, seed=seed, dtype=dtype,
                                    chunks=len(mine), virtual_stages=mine, order=order),
                        shard=shard_indices(data.n_train, 0, 1, seed=seed))
    run = Run(worker, data, data.x_train.to(device), data.y_train.to(device), params, None, optimizer, record)
    return train_steps(run, LibrarySchedule(runner, 0 in mine, total - 1 in mine, p), steps,
                       lambda step: global_batch(data.n_train, 1, global_batch_size, step, seed=seed))


class LibrarySchedule(Strategy):
    """Lesson 06: the library's schedule object as a strategy of the one loop: its ``step`` is the step.

    As in ``pipeline.PipelineSchedule``, ``run.model`` is this stage's parameters by name, so the
    loop's checkpoints hold this stage's shard and resume it.  The rank with the first stage feeds the
    images, the one with the last the labels (and gets the micro-batches' losses back), a single stage
    (or a V's rank 0, lesson 15) both; a rank between feeds nothing.
    """

    def __init__(self, runner, first: bool, last: bool, p: int):
        self.runner, self.first, self.last, self.p = runner, first, last, p

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = time.time()
        losses: list[torch.Tensor] = []
        first, last = self.first, self.last
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
