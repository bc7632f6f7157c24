"""Pipeline parallelism on real ranks: each rank trains a stage, micro-batches flow through.

Introduced in lesson 06 ("Splitting the model").  ``stages.py`` cuts the model, and
``schedules.py`` says in which order each stage runs its passes; this module *runs* them.
A rank does only two things, over and over:

* **forward** of micro-batch ``i``: take the input (the images on the first stage, otherwise
  receive the previous stage's activations), run its layers, send the output on (the last
  stage computes the loss instead) and keep what the backward pass will need;
* **backward** of micro-batch ``i``: receive the gradient of its output from the next stage
  (the last stage starts from the loss), run backward through its layers, send the gradient
  of its input back.

Only activations and their gradients travel, as point-to-point messages (``send``/``recv``
over gloo between CPU processes, NCCL between GPUs); the parameters never leave their rank.
After all passes of a step each rank updates its own parameters.  Why the result equals one
process training the whole model: each micro-batch's loss is divided by ``m``, so the
gradients the backward passes add up in ``.grad`` are those of the whole batch's mean loss.

Sends are posted without waiting (``Worker.send(..., async_op=True)``) and completed at the end of the step: a rank
that waited for its message to be received while its neighbour waited for *its* message
would deadlock.  Receives block, and that wait is the pipeline's bubble made visible: every
pass, receive and send is written down with its start and end time (``record.events``), and
the number of micro-batches whose activations the rank holds after each pass (``held``).
"""
from __future__ import annotations


import torch

from ..comm.collectives import check_torchrun
from ..data import global_batch, load_digits, shard_indices
from ..models import DTYPES, build_model
from ..checks import check_int, check_positive
from ..records import RankRecord
from . import schedules, stages
from ..train.loop import Done, Run, Strategy, train_steps
from .pipeline_stage import Stage


def check_place(name: str, backend: str, device: str) -> None:
    """Lesson 06: a pipeline sends activations point to point, which only torch.distributed offers."""
    if backend != "torchrun":
        raise ValueError(f"{name} runs on launch(backend='torchrun') only: Horovod has no point-to-point "
                         f"send/recv, and a pipeline's stages pass activations that way (got backend={backend!r})")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"{name} runs on device 'cpu' (gloo) or 'cuda' (NCCL), got {device!r}")


def validate_args(world_size: int, *, model: str, width: int, depth: int, global_batch_size: int,
                  micro_batches: int, schedule: str, chunks: int, steps: int, lr: float, dtype: str,
                  order=None, backend: str = "torchrun", device: str = "cpu") -> None:
    """Lesson 06: a pipeline job's settings, checked before any process starts."""
    check_place("pipeline.train", backend, device)
    schedules.check_schedule(schedule, world_size, micro_batches, chunks)
    if order is not None:
        schedules.check_order(order, world_size, micro_batches)
    check_int("steps", steps)
    check_positive("lr", lr)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    check_int("global_batch_size", global_batch_size)
    if global_batch_size % micro_batches:
        raise ValueError(f"{micro_batches} micro-batches do not divide the batch of {global_batch_size}: "
                         f"use a batch that is a multiple of {micro_batches}")
    data = load_digits()
    if global_batch_size > data.n_train:
        raise ValueError(f"the batch of {global_batch_size} is larger than the {data.n_train} training samples")
    stages.check_stages(build_model(model, width, depth=depth), world_size * chunks)


def train(worker, *, model: str = "mlp", width: int = 64, depth: int = 2, global_batch_size: int = 64,
          micro_batches: int = 1, schedule: str = "gpipe", chunks: int = 1, steps: int = 20,
          lr: float = 0.1, seed: int = 0, dtype: str = "float32", order=None) -> RankRecord:
    """Lesson 06: train the model cut into ``world_size * chunks`` stages, one rank each (or
    ``chunks`` each, interleaved), with the given schedule and number of micro-batches.

    ``micro_batches=1`` with ``"gpipe"`` is naive model parallelism: one stage works at a time.
    ``"zb_h1"`` (lesson 15) splits each backward into B and W and runs the W's where 1F1B idles.
    ``order`` (lesson 06's build-it exercise): each stage's passes as ``[[("F", 0), ...], ...]``,
    run instead of the named schedule's (``schedules.check_order`` checks it first).
    Returns this rank's record: its own parameters (named as in the whole model), the loss per
    step (on the rank that computes it; NaN elsewhere) and the timeline ``events``.
    """
    check_torchrun(worker)
    return train_stage(worker, list(range(worker.world_size)), model=model, width=width, depth=depth,
                       global_batch_size=global_batch_size, micro_batches=micro_batches, schedule=schedule,
                       chunks=chunks, steps=steps, lr=lr, seed=seed, dtype=dtype, order=order)


def train_stage(worker, peers: list[int], *, model: str, width: int, depth: int, global_batch_size: int,
                micro_batches: int, schedule: str, chunks: int, steps: int, lr: float, seed: int, dtype: str,
                group=None, replica: tuple[int, int] = (0, 1), average=None, order=None) -> RankRecord:
    """Lesson 06: one rank's part of a pipeline whose stages are the ranks ``peers`` (in order).

    On its own a pipeline is every rank (``train``).  In lesson 07's mesh there are several
    pipelines side by side: ``group`` is this pipeline's process group, ``replica=(d, D)``
    says that it trains on the ``d``-th of ``D`` equal slices of every batch, and
    ``average(params)``, called after the passes, averages the gradients with the other
    pipelines (data parallelism across pipelines).
    """
    p, m, device = len(peers), micro_batches, worker.device
    rank = peers.index(worker.rank)                           # this rank's stage
    data = load_digits(dtype=DTYPES[dtype])
    whole = build_model(model, width, seed=seed, dtype=DTYPES[dtype], depth=depth).to(device)
    sample = data.x_train[:1].to(device)
    parts = stages.split(whole, p * chunks, sample)
    shapes, layers = stages.boundary_shapes(parts, sample), [[str(n) for n, _ in part.named_children()]
                                                              for part in parts]
    mine = [parts[c * p + rank] for c in range(chunks)]       # virtual stage c * p + rank
    params = {n: q for part in mine for n, q in stages.owned_names(whole, part).items()}
    # keep only this rank's parts: the rest of the model is dropped here, as on a real cluster
    # where it would not fit (every rank built it whole only to draw the same initial weights)
    parts = [part if v % p == rank else None for v, part in enumerate(parts)]
    del whole
    held = sum(q.numel() for part in parts if part is not None for q in part.parameters())
    optimizer = torch.optim.SGD(params.values(), lr=lr)
    d, replicas = replica
    batch = global_batch_size // replicas                     # what this pipeline trains on per step
    record = RankRecord(worker.rank, worker.world_size, worker.backend, f"pipeline {schedule}", str(device),
                        config=dict(model=model, width=width, depth=depth, batch_size=batch // p,
                                    global_batch_size=global_batch_size, micro_batches=m, schedule=schedule,
                                    chunks=chunks, steps=steps, lr=lr, seed=seed, dtype=dtype, stage=rank,
                                    layers=layers, parameters_held=held),
                        shard=shard_indices(data.n_train, 0, 1, seed=seed))
    return run_stage(worker, data, Stage(worker, parts, shapes, rank, peers, batch // m, group), params, optimizer,
                     record, schedule=schedule, chunks=chunks, steps=steps, seed=seed, replica=replica,
                     global_batch_size=global_batch_size, average=average, order=order)


def run_stage(worker, data, stage: Stage, params: dict, optimizer, record: RankRecord, *, schedule: str,
              chunks: int, steps: int, seed: int, replica: tuple[int, int], global_batch_size: int,
              average=None, order=None) -> RankRecord:
    """Lessons 06 and 07: train one built stage with the one loop: this pipeline's ``d``-th of ``D``
    slices of every global batch (``replica=(d, D)``), the schedule's passes as its step.  Shared by
    ``train_stage`` and the mesh's pipeline x tensor, whose stages split a block across ranks."""
    p, m, rank, device = stage.p, record.config["micro_batches"], stage.rank, worker.device
    d, batch = replica[0], global_batch_size // replica[1]
    run = Run(worker, data, data.x_train.to(device), data.y_train.to(device), params, None, optimizer, record)
    ops = (schedules.schedule(schedule, p, m, chunks) if order is None else schedules.as_ops(order))[rank]
    strategy = PipelineSchedule(stage, ops, m, average)
    return train_steps(run, strategy, steps, lambda step: global_batch(data.n_train, 1, global_batch_size, step,
                                                                       seed=seed)[d * batch:(d + 1) * batch])


def stage_of(model, plan, worker, mesh, micro_batches: int, batch: int, line_piece=None):
    """Lesson 12: this rank's stage of ``model`` (already split by the other transforms) along the mesh's
    pipeline axis, cut where ``plan`` (``stages.plan`` on the unsplit model) says.  ``batch``: the lines this
    pipeline trains per step.  With ``line_piece`` a rank holds only its piece of every line, so the
    activations it passes hold that piece's tokens.  Returns the stage and the parameters it holds,
    under the whole model's names."""
    starts, shapes = plan
    seq = stages.as_sequential(model)
    parts = [seq[a:b] for a, b in zip(starts, [*starts[1:], len(seq)])]
    if line_piece is not None:
        shapes = [None if s is None else (len(line_piece.mine), *s[1:]) for s in shapes]
    rank = mesh.coordinates["pipeline"]
    stage = Stage(worker, [part if v == rank else None for v, part in enumerate(parts)], shapes, rank,
                  mesh.peers("pipeline"), batch // micro_batches, mesh.group("pipeline"), loss=type(model).loss)
    return stage, stages.owned_names(model, parts[rank])


class PipelineSchedule(Strategy):
    """Lesson 06: the pipeline as a strategy of the one loop: its step is the schedule's passes.

    A pipeline cannot be cut into forward, backward, communicate and update (the passes of
    many micro-batches interleave with the messages), so it replaces the whole ``step``; the
    loop still does the rest (records, metrics, checkpoints of this stage's own parameters,
    faults).  ``run.model`` is this rank's parameters by name (``{name: tensor}``), as the
    whole model names them, so a checkpoint holds exactly this stage's shard.
    """

    def __init__(self, stage: Stage, ops, micro_batches: int, average=None):
        self.stage, self.ops, self.m, self.average = stage, ops, micro_batches, average

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = run.clock()
        loss, correct = self.stage.run(step, self.ops, x.chunk(self.m), y.chunk(self.m), self.m)
        t_compute_end = run.clock()
        if self.average is not None:         # lesson 07's mesh: average with the other pipelines
            self.average(run.model)
        comm = (t_compute_end, run.clock()) if self.average is not None else None
        run.precision.step(run.optimizer)     # lesson 14: fp16 unscales and may skip; bf16 master rounds
        run.optimizer.zero_grad(set_to_none=False)
        return Done(loss, correct / len(y), t_start, t_compute_end, comm, samples=len(y) // self.stage.p)

    def finish(self, run: Run) -> None:
        """The timeline, the bytes sent per step, this stage's parameters, the whole model's test accuracy."""
        record, device = run.record, run.worker.device
        record.events = self.stage.events
        record.traffic = {"pipeline": self.stage.sent_bytes // max(len(record.steps), 1)}
        record.params = {n: q.detach().cpu().clone() for n, q in run.model.items()}
        record.test_accuracy = self.stage.evaluate(run.data.x_test.to(device), run.data.y_test.to(device))
        record.loss_scale = run.precision.trace()


train.validate_args = validate_args
# what it runs on (the ``fn.supports`` every launchable training function has): torch.distributed's
# send/recv on CPU (gloo) or GPU (NCCL); checkpoints and faults through the one loop (loop.py)
train.supports = frozenset({"torchrun", "cpu", "cuda", "checkpoint", "fault"})


def merge_params(records: list[RankRecord]) -> dict[str, torch.Tensor]:
    """Lesson 06: the whole model's parameters, put back together from the stages' records."""
    merged = {}
    for r in records:
        merged.update(r.params)
    return merged



# Lesson 06 reads a run's measured timeline from here too: it is the schedules' form, read from records.
timeline = schedules.timeline
