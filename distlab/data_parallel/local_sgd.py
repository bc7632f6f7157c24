"""The middle ground: talk every k steps instead of every step.

Introduced in lesson 04 ("Keeping workers in sync").  Synchronous SGD all-reduces after
every mini-batch; asynchronous SGD never waits but trains on stale parameters.  Two ways
to communicate less often while staying synchronous:

- **gradient accumulation** (``average="gradients"``): each rank averages the gradients
  of k micro-batches (each backward adds 1/k of its gradient into ``.grad``), *then*
  all-reduces once and takes one step.  Exactly one step at a
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

import torch

from ..data import load_digits, rank_batch, steps_per_epoch
from ..checks import check_int
from ..records import RankRecord
from .data_parallel import per_rank_batch
from .gradient_sync import AllReduceEachParameter
from ..train.loop import Run, check_settings, start, train_steps

AVERAGES = ("gradients", "parameters")


class Accumulate(AllReduceEachParameter):
    """Lesson 04: average the gradients of k micro-batches, then all-reduce once and update once."""

    def __init__(self, worker, k: int, steps: int):
        super().__init__(worker)
        self.k, self.steps = k, steps
        self.accumulate = k                  # the loop averages the gradients of k micro-batches

    def talks(self, step: int) -> bool:
        return (step + 1) % self.k == 0 or step + 1 == self.steps

    def communicate(self, run: Run, step: int):
        return super().communicate(run, step) if self.talks(step) else None

    def update(self, run: Run, step: int) -> None:
        if self.talks(step):
            run.optimizer.step()

    def state_dict(self, run: Run) -> dict:
        """Lesson 10: a checkpoint between two updates must carry the gradients added up so far."""
        return {"grads": [None if p.grad is None else p.grad.detach().cpu().clone() for p in run.model.parameters()]}

    def load_state_dict(self, run: Run, state: dict) -> None:
        for p, g in zip(run.model.parameters(), state.get("grads", ())):
            if g is not None:
                p.grad = g.to(p.device)


class LocalSGD(Accumulate):
    """Lesson 04: every rank takes its own SGD step each time; every k steps, average the parameters."""

    def __init__(self, worker, k: int, steps: int):
        super().__init__(worker, k, steps)
        self.accumulate = 1                  # every micro-batch is a step of its own

    def communicate(self, run: Run, step: int):
        run.optimizer.step()                 # a local step: nobody else is involved
        if not self.talks(step):
            return None
        start = run.clock()
        with torch.no_grad():
            for p in run.model.parameters():
                self.worker.all_reduce(p.data, op="avg")
        return start, run.clock()

    def update(self, run: Run, step: int) -> None:
        pass                                 # done in communicate, before the averaging

    def state_dict(self, run: Run) -> dict:
        return {}                            # every step ends with an update: no gradients in flight


def validate_args(world_size: int, *, k: int, average: str, model: str, width: int, batch_size: int,
                  steps: int, lr: float, dtype: str, backend: str = "torchrun", device: str = "cpu") -> int:
    """Check a job before any process starts; return the per-rank micro-batch size."""
    if average not in AVERAGES:
        raise ValueError(f"average must be one of {AVERAGES}, got {average!r}")
    check_int("k", k)
    check_settings(world_size, model=model, width=width, steps=steps, lr=lr, dtype=dtype)
    b = per_rank_batch(world_size, batch_size, None)
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
    rank, world, b = worker.rank, worker.world_size, batch_size
    run = start(worker, model=model, width=width, lr=lr, seed=seed, dtype=dtype,
                method="local_sgd" if average == "parameters" else "accumulate",
                config=dict(model=model, width=width, batch_size=b, steps=steps, lr=lr, seed=seed,
                            dtype=dtype, k=k, average=average))
    n = run.data.n_train
    if average == "gradients":
        def batch_at(step):                  # micro-batch j of the big batch of update u
            u, j = divmod(step, k)
            return rank_batch(n, rank, world, k * b, u, seed=seed)[j * b:(j + 1) * b]
        strategy = Accumulate(worker, k, steps)
    else:
        def batch_at(step):
            return rank_batch(n, rank, world, b, step, seed=seed)
        strategy = LocalSGD(worker, k, steps)
    return train_steps(run, strategy, steps, batch_at)


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})


def train_each(worker, *, runs: list[dict], **common) -> list[RankRecord]:
    """Lesson 04: ``train`` once per entry of ``runs`` (e.g. ``[dict(k=1), dict(k=16)]``), in
    one launch, because starting processes costs seconds.  Each entry overrides ``common``."""
    return [train(worker, **{**common, **run}) for run in runs]


def _validate_each(world_size: int, *, runs, backend: str = "torchrun", device: str = "cpu", **common) -> None:
    from ..processes.arguments import bind_arguments

    if not runs or not all(isinstance(run, dict) for run in runs):
        raise ValueError("runs must be a non-empty list of dicts, e.g. [dict(k=1), dict(k=4)]")
    for run in runs:
        bind_arguments(train, world_size, {**common, **run}, backend=backend, device=device)


train_each.validate_args = _validate_each
train_each.supports = frozenset({"torchrun", "horovod", "cpu", "cuda"})   # several runs: no one checkpoint


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


def all_reduce_seconds(records: list[RankRecord]) -> list[float]:
    """Lesson 04: how long each all-reduce of a run took, every rank's, in order."""
    return [s.t_comm_end - s.t_comm_start for r in records for s in r.steps if s.t_comm_start is not None]
