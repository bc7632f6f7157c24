"""ZeRO by hand: every rank keeps only its shard of the optimizer state (stage 1) and of the
gradients (stage 2), instead of a full copy of each.

Introduced in lesson 08 (``notebooks/08_zero_sharding_what_every_worker_copied.ipynb``).

Plain data parallelism all-reduces the gradients, then every rank runs the *same* optimizer
step on the *same* numbers, keeping the same optimizer state: N identical copies.  ZeRO
notices that an all-reduce is two halves, a reduce-scatter then an all-gather, and puts
the optimizer step in between:

1. after backward, a **reduce-scatter**: rank r receives the sum of everyone's gradients for
   its shard only (1/N of the parameters, one contiguous slice of a flat buffer);
2. rank r runs the optimizer on its shard alone: only it keeps that shard's optimizer state
   (Adam's two moments: 8 of every 16 bytes per parameter in fp32);
3. an **all-gather** of the updated shards gives every rank the whole new parameters.

The traffic is that of one all-reduce (a reduce-scatter plus an all-gather), the memory for
the optimizer state is 1/N.  The stages differ in what they free:

* **stage 1** (``ShardedOptimizer(stage=1)``): the full gradient buffer stays (the
  reduce-scatter writes this rank's slice of it; the rest of it is stale);
* **stage 2** (``stage=2``): the reduce-scatter writes into a buffer of one shard's size, and
  the full gradients are dropped after it, so between steps a rank holds 1/N of them.  This
  naive version still holds the full gradients during backward (they are made by it, then
  reduced, all at once after it);
* **stage 2, overlapped** (``OverlappedStage2``, ``train(overlap=True)``): the optimised
  version, as DeepSpeed and FSDP do it.  Each parameter is sharded on its own (its numbers cut
  into N equal pieces, padded), and the moment backward has made a parameter's gradient, a hook
  starts its reduce-scatter *asynchronously* and drops the parameter's ``.grad``: the
  communication runs while backward computes the layers before it.  The padded copy each
  reduce-scatter reads stays alive until ``communicate`` waits for it after backward, so this
  version buys overlap, not a lower peak (freeing each copy early would need a wait inside the
  hook).  Same numbers as the naive version, one collective per parameter instead of one;
* **stage 3** (the parameters too) is PyTorch's FSDP2 (``fsdp.py``) and DeepSpeed's stage 3
  (``deepspeed_zero.py``): it gathers each layer's parameters just before it is used.

Everything is elementwise in the optimizer (SGD, momentum, Adam), so updating shards
separately gives exactly the numbers of updating the whole: the tests check that ZeRO's
parameters equal plain data parallelism's.  Runs on torchrun (``torch.distributed``'s
reduce-scatter and all-gather, over gloo or NCCL).
"""
from __future__ import annotations

import time

import torch

from ..comm.collectives import check_torchrun
from ..precision import mixed
from ..train.memory_held import held_bytes
from ..data_parallel.data_parallel import per_rank_batch, validate_args
from ..data import rank_batch
from ..train.step import make_optimizer
from ..train.loop import Run, Strategy, start, train_steps

STAGES = (0, 1, 2)


def views(flat: torch.Tensor, params) -> list[torch.Tensor]:
    """Consecutive pieces of ``flat``, one shaped like each of ``params``."""
    out, offset = [], 0
    for p in params:
        out.append(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
    return out


class ShardedOptimizer(Strategy):
    """Lesson 08: ZeRO stage 1 or 2 as a strategy of the training loop (see the module's docstring).

    ``stage=0`` is plain data parallelism written the same way (one flat buffer, one
    all-reduce, every rank updating everything), so that the stages differ only in what they
    shard: the naive version before the optimised ones.
    """

    def __init__(self, worker, stage: int, optimizer: str, lr: float):
        check_torchrun(worker)
        if stage not in STAGES:
            raise ValueError(f"the hand-written ZeRO has stages {STAGES}; stage 3 is FSDP2 or DeepSpeed")
        self.worker, self.stage, self.optimizer, self.lr = worker, stage, optimizer, lr

    def prepare(self, run: Run) -> None:
        """Put every parameter and gradient in one flat buffer, and give the optimizer only my slice."""
        n, r = self.worker.world_size, self.worker.rank
        params = list(run.model.parameters())
        total = sum(p.numel() for p in params)
        self.size = -(-total // n)                       # shard length; the buffer is padded to n * size
        self.flat = torch.zeros(n * self.size, dtype=params[0].dtype, device=params[0].device)
        with torch.no_grad():
            for p, view in zip(params, views(self.flat, params)):   # the parameters become views of it
                view.copy_(p)
                p.data = view
        self.worker.broadcast(self.flat, src=0)      # start from rank 0's parameters, as DDP does
        self.mine = slice(r * self.size, (r + 1) * self.size) if self.stage else slice(None)
        self.shard = self.flat.detach()[self.mine]     # my slice of the parameters (a view: no copy)
        if self.stage < 2:                             # stages 0 and 1 keep a full gradient buffer
            self.flat_grad = torch.zeros_like(self.flat)
            for p, view in zip(params, views(self.flat_grad, params)):   # backward adds into them
                p.grad = view
        run.optimizer = make_optimizer(self.optimizer, shard_precision(run, self.worker, params, self.flat,
                                                                         self.mine, self.shard), self.lr)

    def communicate(self, run: Run, step: int) -> tuple[float, float]:
        """Reduce-scatter: my shard of everyone's summed gradient, averaged."""
        start_t = time.time()
        if self.stage == 0:                            # everyone gets the whole sum
            grad = self.worker.all_reduce(self.flat_grad)
        elif self.stage == 1:
            received = self.worker.reduce_scatter(self.flat_grad)
            grad = self.flat_grad[self.mine].copy_(received)   # (the others' slices are stale now)
        else:                                          # stage 2: backward made full gradients...
            params = list(run.model.parameters())
            padding = self.flat.new_zeros(self.flat.numel() - sum(p.numel() for p in params))
            grad = self.worker.reduce_scatter(torch.cat([p.grad.flatten() for p in params] + [padding]))
            for p in params:                           # ...and they go: only my shard's stays
                p.grad = None
        self.shard.grad = grad.div_(self.worker.world_size)
        return start_t, time.time()

    def update(self, run: Run, step: int) -> None:
        """Update my shard (through the precision: lesson 14), then all-gather the shards into everyone's
        parameters."""
        run.precision.step(run.optimizer)
        if self.stage:                                 # (stage 0 updated everything itself)
            self.flat.copy_(torch.cat(self.worker.all_gather(self.shard)))
        self.held = held_bytes(run.model, run.optimizer, more_grads=[self.shard.grad])   # held between steps


class OverlappedStage2(Strategy):
    """Lesson 08: ZeRO-2 with each gradient reduce-scattered during backward, as soon as it exists."""

    def __init__(self, worker, optimizer: str, lr: float):
        check_torchrun(worker)
        self.worker, self.optimizer, self.lr = worker, optimizer, lr

    def prepare(self, run: Run) -> None:
        n, r = self.worker.world_size, self.worker.rank
        self.params = list(run.model.parameters())
        with torch.no_grad():
            for p in self.params:                      # start from rank 0's parameters, as DDP does
                self.worker.broadcast(p.data, src=0)
        self.size = [-(-p.numel() // n) for p in self.params]           # each parameter's piece, padded
        # my piece of each parameter: a view, so the optimizer's update lands in the parameter
        self.shards = [p.detach().view(-1)[r * c:(r + 1) * c] for p, c in zip(self.params, self.size)]
        self.pending: dict = {}             # parameter's position -> its reduce-scatter in flight (a Pending)
        self.position = {id(p): i for i, p in enumerate(self.params)}
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._reduce_scatter)
        run.optimizer = make_optimizer(self.optimizer, self.shards, self.lr)

    def _reduce_scatter(self, p: torch.Tensor) -> None:
        """Called by backward the moment ``p.grad`` is complete: start its reduce-scatter, drop it."""
        i = self.position[id(p)]
        n, c = self.worker.world_size, self.size[i]
        padded = torch.zeros(n * c, dtype=p.dtype, device=p.device)
        padded[:p.numel()] = p.grad.view(-1)
        self.pending[i] = self.worker.reduce_scatter(padded, async_op=True)   # my piece, when waited for
        p.grad = None                                  # the full gradient goes now, not after backward
        self.started = self.started or time.time()

    def before_step(self, run: Run, step: int) -> None:
        self.started = None

    def communicate(self, run: Run, step: int) -> tuple[float, float]:
        """Wait for what backward started; hand each shard its averaged gradient."""
        for i, shard in enumerate(self.shards):
            mine = self.pending.pop(i).wait()
            shard.grad = mine[:shard.numel()].div_(self.worker.world_size)
        return self.started, time.time()

    def update(self, run: Run, step: int) -> None:
        run.optimizer.step()
        for p, shard, c in zip(self.params, self.shards, self.size):
            mine = torch.zeros(c, dtype=p.dtype, device=p.device)
            mine[:shard.numel()] = shard
            whole = torch.cat(self.worker.all_gather(mine))
            with torch.no_grad():
                p.view(-1).copy_(whole[:p.numel()])
        self.held = held_bytes(run.model, run.optimizer)


def shard_precision(run: Run, worker, params, flat: torch.Tensor, mine: slice, shard: torch.Tensor) -> list:
    """Lesson 14: what the optimizer updates, with the run's precision sharded as ZeRO shards the rest.

    fp32 and autocast: the shard itself.  bf16 master weights: an fp32 master of this rank's shard only
    (the ZeRO paper's K = 12 counts the master copy with the optimizer's state, 1/N of it per rank), cut
    from the whole model's masters ``start`` made, which then go: the policy's pairs become (shard, its
    master).  fp16's loss scaler sees only this rank's shard of the gradients, so the ranks agree on
    "finite" with one all-reduce before anyone steps (PyTorch's ``ShardedGradScaler`` does the same)."""
    policy = run.precision
    mixed.agree_on_overflow(policy, worker)
    if not isinstance(policy, mixed.MasterWeights):
        return [shard]
    masters = torch.zeros(flat.numel(), dtype=torch.float32, device=flat.device)
    for (_, master), view in zip(policy.pairs, views(masters, params)):
        view.copy_(master)
    worker.broadcast(masters, src=0)
    policy.pairs[:] = [(shard, masters[mine].clone())]
    return [policy.pairs[0][1]]


def start_sharded(worker, method: str, *, optimizer: str, model: str, width: int, depth: int,
                  batch_size: int | None, global_batch_size: int | None, steps: int, lr: float, seed: int,
                  dtype: str, precision: str = "fp32", **more) -> tuple[Run, object]:
    """Lesson 08: what every ZeRO training here starts from (by hand, FSDP2, DeepSpeed): the run,
    its record's config (with ``more``, e.g. the stage), and this rank's batches, ``batch_at(step)``.
    ``precision`` (lesson 14): ``mixed.policy``'s name."""
    b = per_rank_batch(worker.world_size, batch_size, global_batch_size)
    run = start(worker, model=model, width=width, lr=lr, seed=seed, dtype=dtype, method=method,
                config=dict(model=model, width=width, depth=depth, batch_size=b, steps=steps, lr=lr,
                            seed=seed, dtype=dtype, optimizer=optimizer, **more, **mixed.named(precision)),
                depth=depth, optimizer=optimizer, precision=mixed.policy(precision, worker.device.type))
    n, rank, world = run.data.n_train, worker.rank, worker.world_size
    return run, lambda step: rank_batch(n, rank, world, b, step, seed=seed)


def train(worker, *, stage: int = 2, optimizer: str = "adam", model: str = "mlp", width: int = 64,
          depth: int = 2, batch_size: int | None = None, global_batch_size: int | None = None,
          steps: int = 10, lr: float = 0.01, seed: int = 0, dtype: str = "float32", overlap: bool = False,
          precision: str = "fp32"):
    """Lesson 08: train with hand-written ZeRO ``stage`` 1 or 2 (0: plain data parallelism); return
    this rank's record.  ``precision`` (lesson 14): ``"fp32"``, ``"bf16"``, ``"fp16"`` or ``"bf16_master"``
    (``shard_precision``; not with ``overlap``).

    The record's ``memory`` holds the bytes this rank held after the last update, by category
    (``train.memory_held.held_bytes``): what the memory model predicts.  ``overlap=True``
    (stage 2 only): the optimised version, ``OverlappedStage2``.
    """
    run, batch_at = start_sharded(worker, f"zero{stage}", optimizer=optimizer, model=model, width=width,
                                  depth=depth, batch_size=batch_size, global_batch_size=global_batch_size,
                                  steps=steps, lr=lr, seed=seed, dtype=dtype, stage=stage, overlap=overlap,
                                  precision=precision)
    strategy = OverlappedStage2(worker, optimizer, lr) if overlap else ShardedOptimizer(worker, stage, optimizer, lr)
    record = train_steps(run, strategy, steps, batch_at)
    record.memory = getattr(strategy, "held", {})    # (no step left to run after resuming: nothing measured)
    return record


def check_train(world_size: int, *, stage: int = 2, optimizer: str = "adam", model: str = "mlp",
                width: int = 64, depth: int = 2, batch_size=None, global_batch_size=None,
                steps: int = 10, lr: float = 0.01, seed: int = 0, dtype: str = "float32",
                overlap: bool = False, backend: str = "torchrun", device: str = "cpu",
                precision: str = "fp32") -> None:
    """Lesson 08: a ZeRO job's settings, checked before any process starts."""
    if backend != "torchrun":
        raise ValueError("zero.train runs on launch(backend='torchrun') only: its reduce-scatter and all-gather "
                         "are torch.distributed's")
    if stage not in STAGES:
        raise ValueError(f"the hand-written ZeRO has stages {STAGES}; stage 3 is FSDP2 or DeepSpeed")
    if overlap and stage != 2:
        raise ValueError(f"overlap=True is the optimised stage 2; stage {stage} has no such version here")
    if overlap and precision != "fp32":
        raise ValueError(f"precision={precision!r} with overlap=True: the overlapped stage 2 keeps one shard per "
                         "parameter and updates them in fp32 only; use overlap=False")
    validate_args(world_size, method="by_hand", collective="dist", model=model, width=width,
                  batch_size=batch_size, global_batch_size=global_batch_size, steps=steps, lr=lr,
                  dtype=dtype, straggler=None, warmup_steps=0, depth=depth, optimizer=optimizer,
                  precision=precision)


train.validate_args = check_train
train.supports = frozenset({"torchrun", "cpu", "cuda", "checkpoint", "fault"})
