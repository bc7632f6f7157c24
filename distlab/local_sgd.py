"""The middle ground: talk every k steps instead of every step.

Introduced in lesson 04 ("Keeping workers in sync").  Synchronous SGD all-reduces after
every mini-batch; asynchronous SGD never waits but trains on stale parameters.  Two ways
to communicate less often while staying synchronous:

- **gradient accumulation** (``average="gradients"``): each rank adds up the gradients
  of k micro-batches, *then* all-reduces once and takes one step.  Exactly one step at a
  k times larger batch, for 1/k of the all-reduces; the price is k times fewer updates.
- **local SGD** (``average="parameters"``): each rank takes k ordinary SGD steps on its
  own, then the ranks average their *parameters*.  As many updates as synchronous SGD, 1/k
  of the all-reduces; the price is that the copies drift apart between averages.  With
  k = 1 it is synchronous SGD again (averaging p - lr*g_i over ranks is p - lr*mean(g_i)).

Both process ``steps`` micro-batches of ``batch_size`` per rank whatever k is, so runs with
different k see the same number of samples and can be compared fairly.  The
communicating steps carry ``t_comm_start``/``t_comm_end``; the others have ``None``.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from .data import load_digits, rank_batch, shard_indices, steps_per_epoch
from .data_parallel import DTYPES, evaluate
from .data_parallel import validate_args as validate_data_parallel
from .models import build_model
from .records import RankRecord, StepRecord

AVERAGES = ("gradients", "parameters")


def validate_args(world_size: int, *, k: int = 4, average: str = "parameters",
                  batch_size: int = 32, steps: int = 64, **kwargs) -> int:
    """Check a job before any process starts; return the per-rank micro-batch size."""
    if average not in AVERAGES:
        raise ValueError(f"average must be one of {AVERAGES}, got {average!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    b = validate_data_parallel(world_size, batch_size=batch_size, steps=steps, **kwargs)
    if average == "gradients":
        if steps % k:
            raise ValueError(f"with gradient accumulation, steps ({steps}) must be a multiple of k ({k})")
        if steps_per_epoch(load_digits().n_train, world_size, k * b) == 0:
            raise ValueError(f"k * batch_size = {k * b} is larger than each rank's shard")
    return b


def train(worker, *, k: int = 4, average: str = "parameters", model: str = "mlp", width: int = 64,
          batch_size: int = 32, steps: int = 64, lr: float = 0.1, seed: int = 0,
          dtype: str = "float32") -> RankRecord:
    """Lesson 04: synchronous training that all-reduces only every ``k`` micro-batches.

    ``average="gradients"``: accumulate k micro-batches, all-reduce the gradients, one step.
    The k micro-batches of update u are the batch of ``k * batch_size`` that a rank would
    take at step u, cut into k pieces, so the run equals ``steps // k`` steps at batch
    ``k * batch_size`` (``data_parallel.train_single`` checks it).
    ``average="parameters"``: k local SGD steps, then all-reduce the parameters.
    """
    b = validate_args(worker.world_size, k=k, average=average, model=model, width=width,
                      batch_size=batch_size, steps=steps, dtype=dtype)
    data = load_digits(dtype=DTYPES[dtype])
    net = build_model(model, width, seed=seed, dtype=DTYPES[dtype]).to(worker.device)
    with torch.no_grad():                       # start from the same parameters everywhere
        for p in net.parameters():
            worker.broadcast(p.data, src=0)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    record = RankRecord(worker.rank, worker.world_size, worker.backend,
                        "local_sgd" if average == "parameters" else "accumulate", str(worker.device),
                        config=dict(model=model, width=width, batch_size=b, steps=steps, lr=lr,
                                    seed=seed, dtype=dtype, k=k, average=average),
                        shard=shard_indices(data.n_train, worker.rank, worker.world_size, seed=seed))
    n, rank, world = data.n_train, worker.rank, worker.world_size
    t_first = time.time()
    opt.zero_grad(set_to_none=False)
    for step in range(steps):
        if average == "gradients":              # micro-batch j of the big batch of update u
            u, j = divmod(step, k)
            idx = rank_batch(n, rank, world, k * b, u, seed=seed)[j * b:(j + 1) * b]
        else:
            idx = rank_batch(n, rank, world, b, step, seed=seed)
        x, y = data.x_train[idx].to(worker.device), data.y_train[idx].to(worker.device)
        t0 = time.time()
        out = net(x)
        loss = F.cross_entropy(out, y)
        talk = (step + 1) % k == 0 or step + 1 == steps
        if average == "gradients":
            (loss / k).backward()               # .grad adds up: the mean over k micro-batches
            t1 = t_comm = time.time()
            if talk:
                for p in net.parameters():
                    worker.all_reduce(p.grad, op="avg")
                t_comm = (t_comm, time.time())
                opt.step()
                opt.zero_grad(set_to_none=False)
        else:
            loss.backward()
            opt.step()                          # a local step: nobody else is involved
            opt.zero_grad(set_to_none=False)
            t1 = t_comm = time.time()
            if talk:
                with torch.no_grad():
                    for p in net.parameters():
                        worker.all_reduce(p.data, op="avg")
                t_comm = (t_comm, time.time())
        acc = (out.argmax(1) == y).double().mean().item()
        record.steps.append(StepRecord(step, loss.item(), acc, t0, t1,
                                       t_comm[0] if talk else None, t_comm[1] if talk else None,
                                       time.time()))
        worker.progress(step + 1, steps, loss=loss.item())
    record.wall_time = time.time() - t_first
    record.test_accuracy = evaluate(net, data.x_test.to(worker.device), data.y_test.to(worker.device))
    record.params = {name: p.detach().cpu().clone() for name, p in net.named_parameters()}
    return record


train.validate_args = validate_args


def train_each(worker, *, runs: list[dict], **common) -> list[RankRecord]:
    """Lesson 04: ``train`` once per entry of ``runs`` (e.g. ``[dict(k=1), dict(k=16)]``), in
    one launch, because starting processes costs seconds.  Each entry overrides ``common``."""
    return [train(worker, **{**common, **run}) for run in runs]


def _validate_each(world_size: int, *, runs: list[dict], **common) -> None:
    if not runs or not all(isinstance(run, dict) for run in runs):
        raise ValueError("runs must be a non-empty list of dicts, e.g. [dict(k=1), dict(k=4)]")
    for run in runs:
        validate_args(world_size, **{**common, **run})


train_each.validate_args = _validate_each


# -------------------------------------------------------------------------------------------
# reading the records
# -------------------------------------------------------------------------------------------
def all_reduce_rounds(record: RankRecord) -> int:
    """How many times this rank communicated (steps with an all-reduce)."""
    return sum(s.t_comm_start is not None for s in record.steps)


def comm_seconds_per_sample(records: list[RankRecord]) -> float:
    """Lesson 04: seconds spent inside all-reduces per training sample, mean over ranks."""
    per_rank = [sum(s.t_comm_end - s.t_comm_start for s in r.steps if s.t_comm_start is not None)
                / (r.config["batch_size"] * len(r.steps)) for r in records]
    return sum(per_rank) / len(per_rank)
