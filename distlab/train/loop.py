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

Some strategies cannot be cut into forward, backward, communicate and update: a pipeline
(lesson 06) interleaves the passes of many micro-batches with its messages, and DeepSpeed
(lesson 08) must run backward and the update itself (``engine.backward``, ``engine.step``).
They replace the whole step; three more hooks say what only they know:

===========================  ==================================================================
``step(run, s, x, y)``       one training step on the mini-batch; returns ``Done`` (loss,
                             accuracy, times).  The default is the four hooks above, in order
``state_dict(run)``,         what a checkpoint must hold beyond ``run.model``'s parameters and
``load_state_dict(run, d)``  ``run.optimizer``'s state (DeepSpeed's fp32 copy of its shard)
``finish(run)``              the record's last entries: test accuracy and final parameters
===========================  ==================================================================

Everything else happens here, once, whatever the strategy: the mini-batch, the learning rate,
a fault on purpose (``faults.maybe_fail``), one ``StepRecord`` per step (times of the step's
parts, loss, accuracy) in the rank's ``RankRecord``, which is what the lessons' pictures are
drawn from, the progress bar, and (``logbook.Logbook``, lesson 10) the metrics file,
TensorBoard, checkpoints and resuming from them.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..data import shard_indices
from ..datasets import load_dataset
from ..long_runs.faults import maybe_fail
from ..models import DTYPES, MODELS, build_model
from ..checks import check_int, check_positive
from ..records import RankRecord, StepRecord
from .flops import CountFlops
from .step import FP32, Precision, make_optimizer, micro_step
from .logbook import Logbook


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
    model: torch.nn.Module         # the plain model (its parameters are the record's; a pipeline
                                   # stage's: {name: parameter}, the ones it holds)
    net: torch.nn.Module | None    # what the forward pass calls: the model, or a wrapper (DDP)
    optimizer: torch.optim.Optimizer   # (with the model: what a checkpoint holds)
    record: RankRecord
    loss: float = float("nan")       # the current step's mini-batch loss and accuracy, set by
    accuracy: float = float("nan")   # the step after backward (asynchronous SGD sends them on)
    straggler: tuple | None = None   # lesson 04: (rank, seconds) that rank sleeps in every step
    grads_at: set = field(default_factory=set)   # steps whose gradients the record keeps, of
    layers: list = field(default_factory=list)   # these parameters (lessons 01-03)
    precision: Precision = FP32      # lesson 14: how the micro-step computes and the update is taken

    def clock(self) -> float:
        """Lesson 05: now, once this rank's device has done the work queued so far (``time.time()`` after
        ``Worker.synchronize``): on a GPU the Python that launches kernels runs ahead of them."""
        self.worker.synchronize()
        return time.time()

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The images and labels of samples ``idx``: from memory, or made now (lesson 05's distorted digits)."""
        if self.x is not None:
            return self.x[idx], self.y[idx]
        x, y = self.data.train_batch(idx)
        return x.to(self.worker.device), y.to(self.worker.device)


def start(worker, *, model: str, width: int, lr: float, seed: int, dtype: str, method: str,
          config: dict, shard: tuple[int, int] | None = None, depth: int = 2,
          optimizer: str = "sgd", dataset: str = "digits", samples: int | None = None,
          data_root: str | None = None, precision: Precision = FP32) -> Run:
    """Lesson 01: load the data, build the model from ``seed``, make the optimizer and the record.

    ``shard=(position, of)`` says whose share of the data this rank trains on (default: its
    own rank among all ranks); the record keeps those sample indices.  ``optimizer``
    (lesson 08): plain ``"sgd"`` unless told otherwise.  ``dataset``, ``samples``, ``data_root``
    (lesson 05): which data (``datasets.load_dataset``); distorted digits are made batch by batch
    (``Run.batch``), so ``Run.x`` and ``Run.y`` are None for them.  ``precision`` (lesson 14) is the run's
    ``Precision``: it may store the model in 16 bits and give the optimizer an fp32 master copy to update.
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
               make_optimizer(optimizer, precision.prepare(net), lr), record, precision=precision)


class Done(NamedTuple):
    """Lesson 01: what a strategy's ``step`` hands back to the loop, which records it."""

    loss: float                               # the mini-batch's loss (NaN on a rank that does not compute it)
    accuracy: float                           # and accuracy (NaN where not known)
    start: float                              # when the step's work started (time.time())
    compute_end: float                        # when its computation ended
    comm: tuple[float, float] | None = None   # when its communication started and ended, if timed apart
    samples: int | None = None                # samples this rank counts as trained (default: its mini-batch)


class Strategy:
    """How a rank takes one training step and stays in agreement with the others (see the module's docstring).

    This base class is a process on its own: no communication, a plain optimizer step.
    """

    accumulate = 1           # micro-batches whose gradients add up before one update
    in_backward = False      # True: the gradients are averaged inside backward (DDP, Horovod)

    def prepare(self, run: Run) -> None:
        pass

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        """One training step on the mini-batch ``(x, y)``: forward, backward, communicate, update."""
        k, wanted = self.accumulate, step in run.grads_at
        # DDP and Horovod average inside backward: compute this rank's own gradient on the side
        local = own_gradients(run.model, x, y, run.layers, run.precision) if wanted and self.in_backward else None
        self.before_step(run, step)
        t_start = run.clock()
        if step % k == 0:
            run.net.zero_grad(set_to_none=False)   # (Horovod 0.28's optimizer wrapper has no set_to_none)
        # the one micro-step (train/step.py); k > 1: .grad adds up the mean of k micro-batches
        run.loss, run.accuracy = micro_step(run.model, x, y, net=run.net, share=k, precision=run.precision)
        if run.straggler is not None and run.worker.rank == run.straggler[0]:
            time.sleep(run.straggler[1])
        t_compute_end = run.clock()
        if wanted and local is None:
            local = {n: p.grad.detach().cpu().clone() for n, p in run.model.named_parameters() if n in run.layers}
        comm = self.communicate(run, step)
        self.update(run, step)
        if wanted:   # after update: Horovod writes the averaged gradients into .grad in step()
            run.record.grads[step] = {n: {"local": local[n], "average": p.grad.detach().cpu().clone()}
                                      for n, p in run.model.named_parameters() if n in run.layers}
        return Done(run.loss, run.accuracy, t_start, t_compute_end, comm)

    def before_step(self, run: Run, step: int) -> None:
        pass

    def communicate(self, run: Run, step: int) -> tuple[float, float] | None:
        return None

    def update(self, run: Run, step: int) -> None:
        run.precision.step(run.optimizer)       # fp32: optimizer.step(); fp16: unscale, skip an overflow

    def state_dict(self, run: Run) -> dict:
        return {}

    def load_state_dict(self, run: Run, state: dict) -> None:
        pass

    def finish(self, run: Run) -> None:
        """Lesson 01: the record's last entries: test accuracy and the final parameters (lesson 14: and the
        loss scale's trace)."""
        device = run.worker.device
        run.record.test_accuracy = evaluate(run.model, run.data.x_test.to(device), run.data.y_test.to(device))
        run.record.params = {n: p.detach().cpu().clone() for n, p in run.model.named_parameters()}
        run.record.loss_scale = run.precision.trace()


def train_steps(run: Run, strategy: Strategy, steps: int, batch_at, *, lr_at=None, straggler=None,
                record_grads_at=(), layers=None, evaluate_every: int = 0, around_step=None) -> RankRecord:
    """Lesson 01: ``steps`` training steps of ``run`` with ``strategy``; returns the finished record.

    ``batch_at(step)`` gives the sample indices of this rank's mini-batch; ``lr_at(step)`` the
    learning rate (default: constant).  ``straggler=(rank, seconds)`` (lesson 04) makes that
    rank sleep inside the compute part of every step, as a slower machine would.  At the
    steps in ``record_grads_at`` the gradients of ``layers`` (default: all) are recorded
    twice: this rank's own (``"local"``), and what the strategy made of them (``"average"``).

    Lesson 10: every step is also written to the rank's metrics file (``metrics.MetricsLog``);
    when the job keeps checkpoints (``worker.checkpoint``) the loop first resumes from the newest
    one and saves one every few steps (``logbook.Logbook``); ``faults.maybe_fail`` breaks the
    rank at the start of a step's work when the job asked for a failure on purpose.

    Lesson 05: ``evaluate_every=k`` measures test accuracy after every k-th step and appends
    ``(step, training seconds so far, accuracy)`` to ``record.evaluations``; the seconds leave out
    the evaluations themselves, so the clock is the training's.

    Lesson 15: each step runs inside the context manager ``around_step(step)``, if given (one profiled: ``traces``).
    """
    worker, record = run.worker, run.record
    run.straggler, run.grads_at = straggler, set(record_grads_at)
    if run.grads_at:
        run.layers = [n for n, _ in run.model.named_parameters()] if layers is None else list(layers)
    strategy.prepare(run)
    book = Logbook(run, strategy, steps)         # resumes from the newest checkpoint, if any
    t_first = run.clock()
    x_test = y_test = None
    if evaluate_every:
        x_test, y_test = run.data.x_test.to(worker.device), run.data.y_test.to(worker.device)
    for step in range(book.first, steps):
        idx = batch_at(step).to(worker.device)
        x, y = run.batch(idx)
        if lr_at is not None:
            for group in run.optimizer.param_groups:
                group["lr"] = lr_at(step)
        maybe_fail(worker, step)              # the others then wait for this rank in their next message
        first = step == book.first            # this life's first step: its FLOPs counted (the same every step)
        with (around_step or nullcontext)(step), (CountFlops() if first else nullcontext()) as counter:
            done = strategy.step(run, step, x, y)
            t_end = run.clock()               # (before a profiler around the step stops: lesson 15)
        if first:
            record.flops_per_step = counter.total
        record.steps.append(StepRecord(step, done.loss, done.accuracy, done.start, done.compute_end,
                                       *(done.comm or (None, None)), t_end, record.flops_per_step))
        book.step_done(step + 1, loss=done.loss, accuracy=done.accuracy, samples=done.samples or len(idx),
                       step_seconds=t_end - done.start,
                       comm_seconds=done.comm[1] - done.comm[0] if done.comm else None)
        worker.progress(step + 1, steps, **({"loss": done.loss} if done.loss == done.loss else {}))
        if evaluate_every and (step + 1) % evaluate_every == 0:
            t_eval = time.time()
            record.evaluations.append((step + 1, t_eval - t_first, evaluate(run.model, x_test, y_test)))
            t_first += time.time() - t_eval           # the training clock stops while it evaluates
    record.wall_time = run.clock() - t_first
    strategy.finish(run)
    book.close(record.test_accuracy)
    return record


def own_gradients(model, x, y, layers, precision: Precision = FP32) -> dict[str, torch.Tensor]:
    """This rank's own gradient of ``layers``, computed on the plain model: no all-reduce happens (under
    the run's precision: lesson 14's 16-bit forward, unscaled)."""
    params = [(n, p) for n, p in model.named_parameters() if n in layers]
    with precision.autocast():
        loss = model.loss(model(x), y)[0]
    grads = torch.autograd.grad(loss, [p for _, p in params])
    return {n: g.detach().cpu().clone() for (n, _), g in zip(params, grads)}


@torch.no_grad()
def evaluate(model, x, y) -> float:
    """Lesson 01: accuracy on a held-out set (images in the parameters' number type: lesson 14's
    16-bit parameters read 16-bit images)."""
    model.eval()
    accuracy = (model(x.to(next(model.parameters()).dtype)).argmax(1) == y).double().mean().item()
    model.train()
    return accuracy
