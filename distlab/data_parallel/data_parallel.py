"""Data parallelism: every rank trains a full copy of the model on its own shard of the data.

Introduced in lesson 01.  The idea in one sentence: every rank holds a full copy of the
model, trains on its own shard of the data, and before each update the ranks *average
their gradients*, so every copy takes the same step and the copies never drift apart.

Why averaging is exactly right: the loss of a mini-batch is the mean over its samples, so
the gradient of one big batch of N*B samples is the mean of the N gradients of N batches of
B samples.  N ranks at batch B therefore take the same steps as one process at batch N*B
(``train_single``), up to floating-point rounding; the tests check it to 1e-6.

``train`` is the training loop of ``loop.py`` with one of the gradient synchronisations of
``gradient_sync.py``: ``method="by_hand"`` (one all-reduce per parameter), ``"fused"`` (one
all-reduce for all of them) or ``"ddp"`` (DistributedDataParallel, or Horovod's
``DistributedOptimizer`` on the Horovod backend).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from ..predict.alpha_beta import ALGORITHMS
from ..data import check_world_size, global_batch, load_digits, rank_batch, steps_per_epoch
from ..datasets import check_dataset, train_samples
from ..models import build_model
from ..precision import mixed
from ..train.memory_held import training_bytes
from ..checks import check_int
from ..processes.worker import Worker
from ..records import RankRecord
from .gradient_sync import METHODS, make_sync
from ..train.overlap import DEFAULT_BUCKET_MB, check_bucket_mb
from ..train.step import check_optimizer
from ..train.loop import Strategy, check_settings, start, train_steps


def per_rank_batch(world_size: int, batch_size: int | None, global_batch_size: int | None,
                   n: int | None = None) -> int:
    """The per-rank batch, from either the per-rank or the global batch size, checked against ``n`` samples."""
    if (batch_size is None) == (global_batch_size is None):
        raise ValueError("give exactly one of batch_size (per rank) or global_batch_size")
    if global_batch_size is not None:
        check_int("global_batch_size", global_batch_size)
        if global_batch_size % world_size:
            raise ValueError(f"global batch {global_batch_size} does not divide among {world_size} "
                             f"ranks; use a multiple of {world_size}")
        batch_size = global_batch_size // world_size
    check_int("batch_size", batch_size)
    n = load_digits().n_train if n is None else n
    check_world_size(world_size, n)
    if steps_per_epoch(n, world_size, batch_size) == 0:
        raise ValueError(f"batch size {batch_size} per rank is larger than each rank's shard "
                         f"({-(-n // world_size)} samples of {n})")
    return batch_size


def validate_args(world_size: int, *, method: str, collective: str, model: str, width: int, batch_size,
                  global_batch_size,
                  steps: int, lr: float, dtype: str, straggler, warmup_steps: int, depth: int = 2,
                  optimizer: str = "sgd", dataset: str = "digits", samples: int | None = None,
                  data_root: str | None = None, evaluate_every: int = 0, backend: str = "torchrun",
                  device: str = "cpu", precision: str = "fp32", seed: int = 0,
                  bucket_mb: float = DEFAULT_BUCKET_MB) -> int:
    """Check a data-parallel job before any process starts; return the per-rank batch."""
    mixed.check(precision, dtype)
    check_bucket_mb(bucket_mb)
    if method == "ddp" and backend == "horovod" and bucket_mb != DEFAULT_BUCKET_MB:
        raise ValueError(f"bucket_mb={bucket_mb!r} with Horovod: its DistributedOptimizer fuses tensors in a buffer "
                         "whose size is set once, when the job starts (HOROVOD_FUSION_THRESHOLD), not per model; "
                         "use launch(backend='torchrun') (DDP's bucket_cap_mb) or method='buckets'")
    if precision == "fp16_unscaled":
        warn_unscaled(world_size, model=model, width=width, depth=depth, batch_size=batch_size,
                      global_batch_size=global_batch_size, lr=lr, seed=seed, optimizer=optimizer, dataset=dataset,
                      samples=samples, data_root=data_root)
    if precision == "bf16_master" and method == "ddp" and backend == "horovod":
        raise ValueError("precision='bf16_master' with Horovod's DistributedOptimizer: it all-reduces the "
                         "gradients of the tensors the optimizer updates, here the fp32 master copies, which "
                         "backward never reaches; use method='by_hand' or launch(backend='torchrun')")
    if collective != "dist" and backend != "torchrun":
        raise ValueError(f"collective={collective!r} runs on launch(backend='torchrun') only: the hand-written "
                         "all-reduces use torch.distributed send/recv, which Horovod does not have")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    if collective != "dist" and collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; choose 'dist' or one of {', '.join(ALGORITHMS)}")
    if collective != "dist" and method != "by_hand":
        raise ValueError("collective= chooses how method='by_hand' averages; DDP and Horovod use their own")
    check_int("warmup_steps", warmup_steps, minimum=0)
    check_optimizer(optimizer)
    check_settings(world_size, model=model, width=width, steps=steps, lr=lr, dtype=dtype, straggler=straggler)
    build_model(model, 1, depth=depth)                  # a tiny one, for build_model's check of depth
    check_int("evaluate_every", evaluate_every, minimum=0)
    check_dataset(dataset, samples, data_root)
    return per_rank_batch(world_size, batch_size, global_batch_size, n=train_samples(dataset, samples, data_root))


def warn_unscaled(world_size: int, **settings) -> None:
    """Lesson 14: before an fp16 run without loss scaling starts, measure its first gradients (one process on
    the global batch, in fp32: the all-reduced gradient every rank will hold) and warn with what fp16 would
    flush to zero (``precision.mixed.unscaled_warning``)."""
    first = train_single(world_size=world_size, steps=1, record_grads_at=(0,), **settings)
    text = mixed.unscaled_warning([g["local"] for g in first.grads[0].values()])
    if text:
        warnings.warn(text, UserWarning, stacklevel=2)


def warmup_lr(lr: float, step: int, warmup_steps: int, world_size: int) -> float:
    """Lesson 05: the learning rate at ``step`` with a linear warm-up (Goyal et al., 2017).

    N ranks averaging gradients take the steps of one process at N times the batch; the
    *linear scaling rule* multiplies the learning rate by N to match.  Early in training a
    step that large can overshoot, so the rate starts at ``lr / world_size`` (the
    single-worker rate) and grows linearly to ``lr`` over ``warmup_steps`` steps.
    """
    if step >= warmup_steps:
        return lr
    return lr * (1 / world_size + (1 - 1 / world_size) * step / warmup_steps)


def train(worker, *, method: str = "by_hand", model: str = "mlp", width: int = 64,
          batch_size: int | None = None, global_batch_size: int | None = None, steps: int = 50,
          lr: float = 0.1, seed: int = 0, record_grads_at: Sequence[int] = (0,),
          record_layers: Sequence[str] | None = None, dtype: str = "float32",
          straggler: tuple[int, float] | None = None, warmup_steps: int = 0,
          collective: str = "dist", depth: int = 2, optimizer: str = "sgd", dataset: str = "digits",
          samples: int | None = None, data_root: str | None = None, evaluate_every: int = 0,
          precision: str = "fp32", bucket_mb: float = DEFAULT_BUCKET_MB, around_step=None) -> RankRecord:
    """Lesson 01: train on this rank's shard, averaging gradients with the other ranks.

    Returns this rank's ``RankRecord``: loss and accuracy per step, the shard, timings, the
    local and averaged gradients at the steps in ``record_grads_at``, and the final
    parameters.

    ``straggler=(rank, seconds)`` (lesson 04) makes that rank sleep ``seconds`` inside the
    compute phase of every step, as a slower machine would: the others wait for it at
    every all-reduce.  ``warmup_steps`` (lesson 05) ramps the learning rate up (``warmup_lr``).
    ``collective`` (lesson 03): ``"dist"`` averages with the backend's all-reduce; ``"naive"``,
    ``"parameter_server"``, ``"ring"`` or ``"tree"`` with the hand-written ``comm.collectives``.
    ``depth``: the MLP's hidden layers (lesson 07 compares data parallelism with tensor
    parallelism on the depth-3 MLP).  ``optimizer`` (lesson 08): ``"sgd"``, ``"momentum"`` or
    ``"adam"``.  ``dataset``, ``samples``, ``data_root`` (lesson 05): the data (``datasets.load_dataset``;
    distorted digits are made on the rank, its own mini-batches only); ``evaluate_every=k``: test
    accuracy every k steps into ``record.evaluations`` (lesson 05's time to accuracy).
    ``precision`` (lesson 14): ``"fp32"``, ``"bf16"`` or ``"fp16"`` (autocast; fp16 with a loss scaler), or
    ``"bf16_master"`` (the parameters stored in bf16, an fp32 master copy updated): ``mixed.policy``;
    ``"fp16_unscaled"``, fp16 autocast with no loss scaler, warns before it starts (``warn_unscaled``).
    ``method`` (lesson 15) may also be ``"hooks"``, ``"buckets"`` or ``"reduce_scatter"``: the gradients sent
    during backward (``train.overlap``), each bucket's launch in ``record.buckets``; ``bucket_mb`` caps their
    buckets, and DDP's (``bucket_cap_mb``).  ``around_step`` (lesson 15): the loop runs each step inside
    ``around_step(step)``; ``measure.traces.train`` profiles one step that way.
    """
    world, rank = worker.world_size, worker.rank
    b = per_rank_batch(world, batch_size, global_batch_size, n=train_samples(dataset, samples, data_root))
    run = start(worker, model=model, width=width, lr=lr, seed=seed, dtype=dtype, method=method,
                config=dict(model=model, width=width, batch_size=b, steps=steps, lr=lr, seed=seed,
                            dtype=dtype, straggler=straggler, warmup_steps=warmup_steps,
                            collective=collective, depth=depth, optimizer=optimizer, dataset=dataset,
                            samples=samples, data_root=data_root, bucket_mb=bucket_mb, **mixed.named(precision)),
                depth=depth, optimizer=optimizer, dataset=dataset, samples=samples, data_root=data_root,
                precision=mixed.policy(precision, worker.device.type))
    n = run.data.n_train
    train_steps(run, make_sync(method, worker, collective, bucket_mb), steps,
                lambda step: rank_batch(n, rank, world, b, step, seed=seed),
                lr_at=lambda step: warmup_lr(lr, step, warmup_steps, world),
                straggler=straggler, record_grads_at=record_grads_at, layers=record_layers,
                evaluate_every=evaluate_every, around_step=around_step)
    return count_bytes(run, rank_batch(n, rank, world, b, 0, seed=seed))


def count_bytes(run, idx) -> RankRecord:
    """Lesson 14: the record with ``memory``: the bytes this rank holds by category, and what one more
    forward of the mini-batch ``idx`` keeps for backward (``train.memory_held.training_bytes``).  Counted
    on the tensors the run shows: DDP's buckets (a copy of the gradients inside its reducer) are not."""
    x, y = run.batch(idx)
    run.record.memory = training_bytes(run.model, run.optimizer, x, y, run.precision)
    return run.record


train.validate_args = validate_args   # distlab.launch calls it before starting any process
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})   # what launch may ask


def train_single(*, world_size: int = 1, model: str = "mlp", width: int = 64,
                 batch_size: int | None = None, global_batch_size: int | None = None,
                 steps: int = 50, lr: float = 0.1, seed: int = 0, record_grads_at=(0,),
                 record_layers=None, dtype: str = "float32", device: str = "cpu",
                 warmup_steps: int = 0, depth: int = 2, optimizer: str = "sgd", dataset: str = "digits",
                 samples: int | None = None, data_root: str | None = None,
                 evaluate_every: int = 0, precision: str = "fp32") -> RankRecord:
    """Lesson 01: the reference, one process at the global batch that ``world_size`` ranks share.

    Runs in the calling process, as a ``Worker`` of its own with no job, through the same
    loop with the base ``Strategy`` (nothing to communicate).  At every step it takes exactly
    the union of the ranks' mini-batches (``global_batch``), so its parameters are what data
    parallelism must give.
    ``grads[step][layer]["local"]`` and ``["average"]`` both hold the big-batch gradient.
    ``depth`` (the MLP's hidden layers) is for the pipeline lesson's deeper models.
    """
    b = validate_args(world_size, method="by_hand", collective="dist", model=model, width=width,
                      batch_size=batch_size,
                      global_batch_size=global_batch_size, steps=steps, lr=lr, dtype=dtype,
                      straggler=None, warmup_steps=warmup_steps, depth=depth, optimizer=optimizer,
                      dataset=dataset, samples=samples, data_root=data_root, evaluate_every=evaluate_every,
                      precision=precision)
    alone = Worker(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device(device))
    run = start(alone, model=model, width=width, lr=lr, seed=seed, dtype=dtype, method="single",
                config=dict(model=model, width=width, batch_size=b * world_size, steps=steps, lr=lr,
                            seed=seed, dtype=dtype, mimics_world_size=world_size,
                            warmup_steps=warmup_steps, depth=depth, optimizer=optimizer, dataset=dataset,
                            samples=samples, data_root=data_root, **mixed.named(precision)), shard=(0, 1),
                depth=depth, optimizer=optimizer, dataset=dataset, samples=samples, data_root=data_root,
                precision=mixed.policy(precision, torch.device(device).type))
    n = run.data.n_train
    train_steps(run, Strategy(), steps, lambda step: global_batch(n, world_size, b, step, seed=seed),
                lr_at=lambda step: warmup_lr(lr, step, warmup_steps, world_size),
                record_grads_at=record_grads_at, layers=record_layers, evaluate_every=evaluate_every)
    return count_bytes(run, global_batch(n, world_size, b, 0, seed=seed))


def train_both_methods(worker, **config) -> dict:
    """Lesson 02: ``train`` by hand, then with the backend's own wrapper, in one job.

    DistributedDataParallel under torchrun, ``hvd.DistributedOptimizer`` under Horovod.  Each
    run starts from the same seed; one launch instead of two saves seconds of start-up.
    ``config`` is any of ``train``'s arguments but ``method``.
    """
    return {method: train(worker, method=method, **config) for method in ("by_hand", "ddp")}


def _check_both_methods(world_size: int, *, backend: str = "torchrun", device: str = "cpu", **config) -> None:
    from ..processes.arguments import bind_arguments

    if "method" in config:
        raise ValueError("train_both_methods runs both methods: leave out method=")
    for method in ("by_hand", "ddp"):
        bind_arguments(train, world_size, dict(config, method=method), backend=backend, device=device)


train_both_methods.validate_args = _check_both_methods
train_both_methods.supports = frozenset({"torchrun", "horovod", "cpu", "cuda"})   # two runs: no one checkpoint
