"""The one training loop: every way of training in distlab is this loop plus a strategy.

Introduced in lesson 01.  Whatever the parallelism, one rank's training has the same
skeleton: load the data, build the model from a seed, then, step after step, take a
mini-batch, run forward and backward, *do what the strategy says to stay in agreement with
the other ranks*, update, and write down what happened.  Only the part in italics changes
from lesson to lesson, so it is the only part a strategy writes:

=====================  ========================================================================
``Strategy`` hook      called ...
=====================  ========================================================================
``prepare(run)``       once, before the first step: wrap the model or optimizer, make every
                       rank start from the same parameters
``before_step(run,s)`` before the forward pass (asynchronous SGD takes the parameters it pulled)
``communicate(run,s)`` after backward; returns when its communication started and ended, or
                       None when it did not communicate (or cannot be timed apart from backward)
``update(run, s)``     the optimizer step (gradient accumulation steps only every k-th time)
=====================  ========================================================================

The base class, ``Strategy``, is one process on its own: nothing to communicate, a plain
optimizer step.  Data parallelism (``gradient_sync.py``) averages gradients in
``communicate``; local SGD (``local_sgd.py``) averages parameters every k steps; the
asynchronous worker (``async_sgd.py``) pushes its gradient and pulls new parameters.

The loop writes one ``StepRecord`` per step (times of the step's parts, loss, accuracy)
into the rank's ``RankRecord``, which is what the lessons' pictures are drawn from.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..checkpoint import Checkpointer
from ..data import shard_indices
from ..datasets import load_dataset
from ..faults import maybe_fail
from ..metrics import MetricsLog
from ..models import DTYPES, MODELS, build_model
from ..processes.checks import check_int, check_positive
from ..records import RankRecord, StepRecord


def check_settings(world_size: int, *, model: str, width: int, steps: int, lr: float, dtype: str,
                   straggler=None) -> None:
    """Lesson 01: the checks every training function shares, made before any process starts."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")
    check_int("width", width)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    check_int("steps", steps)
    check_positive("lr", lr)
    check_straggler(straggler, world_size)


def check_straggler(straggler, world_size: int) -> None:
    """Lesson 04: ``straggler`` is ``None`` or ``(rank, seconds)``: that rank computes slower."""
    if straggler is None:
        return
    if (not isinstance(straggler, (tuple, list)) or len(straggler) != 2
            or isinstance(straggler[0], bool) or not isinstance(straggler[0], int)
            or isinstance(straggler[1], bool) or not isinstance(straggler[1], (int, float))):
        raise ValueError(f"straggler must be (rank, seconds), e.g. (1, 0.05), got {straggler!r}")
    rank, delay = straggler
    if not 0 <= rank < world_size:
        raise ValueError(f"straggler rank {rank} is outside 0..{world_size - 1}")
    if not 0 <= delay <= 10:
        raise ValueError(f"straggler delay must be between 0 and 10 seconds, got {delay!r}")


@dataclass
class Run:
    """What one rank trains with, and the record it fills in."""

    worker: object                 # a processes.worker.Worker
    data: object                   # data.Digits, on the CPU
    x: torch.Tensor | None         # the training images, on the worker's device (None: made
    y: torch.Tensor | None         # batch by batch, lesson 05's distorted digits)
    model: torch.nn.Module         # the plain model (its parameters are the record's)
    net: torch.nn.Module           # what the forward pass calls: the model, or a wrapper (DDP)
    optimizer: torch.optim.Optimizer
    record: RankRecord
    loss: float = float("nan")       # the current step's mini-batch loss and accuracy, set by
    accuracy: float = float("nan")   # the loop after backward (asynchronous SGD sends them on)

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The images and labels of samples ``idx``: from memory, or made now (lesson 05's distorted digits)."""
        if self.x is not None:
            return self.x[idx], self.y[idx]
        x, y = self.data.train_batch(idx)
        return x.to(self.worker.device), y.to(self.worker.device)


OPTIMIZERS = {   # lesson 08: what an optimizer keeps per parameter is what ZeRO shards
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),                   # nothing
    "momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),  # a velocity
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),                 # two moments
}


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """Lesson 08: the optimizer called ``name`` (one of ``OPTIMIZERS``) over ``params``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {name!r}")
    return OPTIMIZERS[name](params, lr)


def start(worker, *, model: str, width: int, lr: float, seed: int, dtype: str, method: str,
          config: dict, shard: tuple[int, int] | None = None, depth: int = 2,
          optimizer: str = "sgd", dataset: str = "digits", samples: int | None = None,
          data_root: str | None = None) -> Run:
    """Lesson 01: load the data, build the model from ``seed``, make the optimizer and the record.

    ``shard=(position, of)`` says whose share of the data this rank trains on (default: its
    own rank among all ranks); the record keeps those sample indices.  ``optimizer``
    (lesson 08): plain ``"sgd"`` unless told otherwise.  ``dataset``, ``samples``, ``data_root``
    (lesson 05): which data (``datasets.load_dataset``); distorted digits are made batch by batch
    (``Run.batch``), so ``Run.x`` and ``Run.y`` are None for them.
    """
    data = load_dataset(dataset, samples, seed=seed, root=data_root, dtype=DTYPES[dtype])
    net = build_model(model, width, seed=seed, dtype=DTYPES[dtype], depth=depth,
                      side=data.side).to(worker.device)
    position, of = shard or (worker.rank, worker.world_size)
    record = RankRecord(worker.rank, worker.world_size, worker.backend, method, str(worker.device),
                        config=config, shard=shard_indices(data.n_train, position, of, seed=seed))
    in_memory = hasattr(data, "x_train")
    return Run(worker, data, data.x_train.to(worker.device) if in_memory else None,
               data.y_train.to(worker.device) if in_memory else None, net, net,
               make_optimizer(optimizer, net.parameters(), lr), record)


class Strategy:
    """How a rank stays in agreement with the others (see the module's docstring).

    This base class is a process on its own: no communication, a plain optimizer step.
    """

    accumulate = 1           # micro-batches whose gradients add up before one update
    in_backward = False      # True: the gradients are averaged inside backward (DDP, Horovod)

    def prepare(self, run: Run) -> None:
        pass

    def before_step(self, run: Run, step: int) -> None:
        pass

    def communicate(self, run: Run, step: int) -> tuple[float, float] | None:
        return None

    def update(self, run: Run, step: int) -> None:
        run.optimizer.step()


def train_steps(run: Run, strategy: Strategy, steps: int, batch_at, *, lr_at=None, straggler=None,
                record_grads_at=(), layers=None, evaluate_every: int = 0) -> RankRecord:
    """Lesson 01: ``steps`` training steps of ``run`` with ``strategy``; returns the finished record.

    ``batch_at(step)`` gives the sample indices of this rank's mini-batch; ``lr_at(step)`` the
    learning rate (default: constant).  ``straggler=(rank, seconds)`` (lesson 04) makes that
    rank sleep inside the compute part of every step, as a slower machine would.  At the
    steps in ``record_grads_at`` the gradients of ``layers`` (default: all) are recorded
    twice: this rank's own (``"local"``), and what the strategy made of them (``"average"``).

    Lesson 10: every step is also written to the rank's metrics file (``metrics.MetricsLog``);
    when the job keeps checkpoints (``worker.checkpoint``) the loop first resumes from the newest
    one and saves one every few steps (``checkpoint.Checkpointer``); ``faults.maybe_fail`` breaks
    the rank mid-step when the job asked for a failure on purpose.

    Lesson 05: ``evaluate_every=k`` measures test accuracy after every k-th step and appends
    ``(step, training seconds so far, accuracy)`` to ``record.evaluations``; the seconds leave out
    the evaluations themselves, so the clock is the training's.
    """
    worker, record, k = run.worker, run.record, strategy.accumulate
    strategy.prepare(run)
    names = [n for n, _ in run.model.named_parameters()]
    layers = names if layers is None else list(layers)
    book = Logbook(worker, record, run.model, run.optimizer, steps)
    t_first = time.time()
    x_test = y_test = None
    if evaluate_every:
        x_test, y_test = run.data.x_test.to(worker.device), run.data.y_test.to(worker.device)
    for step in range(book.first, steps):
        idx = batch_at(step).to(worker.device)
        x, y = run.batch(idx)
        wanted = step in record_grads_at
        # DDP and Horovod average inside backward: compute this rank's own gradient on the side
        local = own_gradients(run.model, x, y, layers) if wanted and strategy.in_backward else None
        strategy.before_step(run, step)
        t_start = time.time()
        out = run.net(x)
        loss = F.cross_entropy(out, y)
        if step % k == 0:
            run.net.zero_grad(set_to_none=False)   # (Horovod 0.28's optimizer wrapper has no set_to_none)
        (loss / k if k > 1 else loss).backward()   # k > 1: .grad adds up the mean of k micro-batches
        if straggler is not None and worker.rank == straggler[0]:
            time.sleep(straggler[1])
        maybe_fail(worker, step)
        t_compute_end = time.time()
        run.loss, run.accuracy = loss.item(), (out.argmax(1) == y).double().mean().item()
        if wanted and local is None:
            local = {n: p.grad.detach().cpu().clone() for n, p in run.model.named_parameters() if n in layers}
        if lr_at is not None:
            for group in run.optimizer.param_groups:
                group["lr"] = lr_at(step)
        comm = strategy.communicate(run, step)
        strategy.update(run, step)
        t_end = time.time()
        if wanted:   # after update: Horovod writes the averaged gradients into .grad in step()
            record.grads[step] = {n: {"local": local[n], "average": p.grad.detach().cpu().clone()}
                                  for n, p in run.model.named_parameters() if n in layers}
        record.steps.append(StepRecord(step, run.loss, run.accuracy, t_start, t_compute_end,
                                       *(comm or (None, None)), t_end))
        book.step_done(step + 1, loss=run.loss, accuracy=run.accuracy, samples=len(idx),
                       step_seconds=t_end - t_start, comm_seconds=comm[1] - comm[0] if comm else None)
        worker.progress(step + 1, steps, loss=run.loss)
        if evaluate_every and (step + 1) % evaluate_every == 0:
            t_eval = time.time()
            record.evaluations.append((step + 1, t_eval - t_first, evaluate(run.model, x_test, y_test)))
            t_first += time.time() - t_eval           # the training clock stops while it evaluates
    record.wall_time = time.time() - t_first
    finish(run)
    book.close(record.test_accuracy)
    return record


class Logbook:
    """Lesson 10: what a training loop does besides training (this one, and the pipeline's).

    Before the first step it resumes from the newest checkpoint, if the job keeps them
    (``checkpoint.Checkpointer``; ``first`` is the step to start from); after each step it writes
    the rank's metrics line (``metrics.MetricsLog``) and saves a checkpoint when one is due.
    The mini-batches are a function of (seed, step), so the seed and the step are the sampler's state.
    """

    def __init__(self, worker, record, model, optimizer, steps: int):
        self.model, self.optimizer, self.steps = model, optimizer, steps
        self.saver = Checkpointer.of(worker, record.config)
        self.sampler = {"seed": record.config.get("seed")}
        self.first = self.saver.resume(model, optimizer, self.sampler) if self.saver else 0
        record.resumed_from = self.first or None
        self.log = MetricsLog(worker, steps, resumed_from=record.resumed_from, tensorboard=worker.tensorboard)

    def step_done(self, done: int, **metrics) -> None:
        self.log.step(done, **metrics)
        if self.saver and (saved := self.saver.after_step(done, self.steps, self.model, self.optimizer,
                                                          self.sampler)):
            self.log.write("checkpoint", **saved)

    def close(self, test_accuracy: float) -> None:
        self.log.close(self.steps, test_accuracy)


def own_gradients(model, x, y, layers) -> dict[str, torch.Tensor]:
    """This rank's own gradient of ``layers``, computed on the plain model: no all-reduce happens."""
    params = [(n, p) for n, p in model.named_parameters() if n in layers]
    grads = torch.autograd.grad(F.cross_entropy(model(x), y), [p for _, p in params])
    return {n: g.detach().cpu().clone() for (n, _), g in zip(params, grads)}


def finish(run: Run) -> RankRecord:
    """Lesson 01: the record's last entries: test accuracy and the final parameters."""
    device = run.worker.device
    run.record.test_accuracy = evaluate(run.model, run.data.x_test.to(device), run.data.y_test.to(device))
    run.record.params = {n: p.detach().cpu().clone() for n, p in run.model.named_parameters()}
    return run.record


@torch.no_grad()
def evaluate(model, x, y) -> float:
    """Lesson 01: accuracy on a held-out set."""
    model.eval()
    accuracy = (model(x).argmax(1) == y).double().mean().item()
    model.train()
    return accuracy
