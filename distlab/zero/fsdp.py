"""ZeRO-3 with PyTorch's FSDP2 (``fully_shard``): the parameters are sharded too.

Introduced in lesson 08 (``notebooks/08_zero_sharding_what_every_worker_copied.ipynb``).

The hand-written ZeRO (``zero.py``) shards the optimizer state and the gradients but keeps
a full copy of the parameters on every rank, because the forward pass needs them all.
Stage 3 keeps only a shard of each parameter too, and gathers a layer's full parameters
just before the layer runs:

* ``fully_shard(layer)`` cuts each of the layer's parameters along its first dimension into
  N pieces (padded to a multiple of N); each rank keeps one.  The parameters become
  ``DTensor``s: one tensor to the optimizer, a shard in memory;
* forward: before each layer, an **all-gather** of its parameters; after it, the gathered
  copies are freed (``reshard_after_forward=True``);
* backward: the same all-gather again (the parameters were freed), then a
  **reduce-scatter** of the layer's gradients, averaged, into this rank's gradient shard;
* the optimizer updates the shards it holds: nothing else to communicate.

So a rank holds 1/N of everything between steps, plus one layer's full parameters at a
time while it computes: the ZeRO paper's 3 Psi of traffic (two all-gathers and a
reduce-scatter) instead of 2 Psi.  PyTorch's FSDP2 does this with real overlap (the next
layer's all-gather starts while this one computes); it runs over gloo on CPU processes and
over NCCL on GPUs, through the same code.

Lesson 15 (Where the time goes) traces it (``measure.traces.train(..., trainer="fsdp")``) and switches
the prefetch (``PREFETCH``).  What torch 2.13 does on CPU ranks, read in its source and its traces: the
"implicit" prefetch of the default is a separate CUDA *stream*; a CPU rank has none, so each all-gather
is issued when its layer needs it and blocks the main thread (``gloo:all_gather`` on gloo's thread,
under ``c10d::_allgather_base_``), exposed.  An explicit one-layer-ahead prefetch issues it one layer
earlier, still blocking; only with FSDP2's (private) ``_set_unshard_async_op`` is it left in flight
while the layer before computes.
"""
from __future__ import annotations

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from ..comm.collectives import check_torchrun
from ..precision import mixed
from ..train.memory_held import held_bytes
from ..train.step import make_optimizer
from ..train.loop import Run, Strategy, train_steps
from .zero import STAGES, check_train, start_sharded
from .zero import train as train_by_hand


class FullyShard(Strategy):
    """Lesson 08: ZeRO-3 through FSDP2: shard every layer with weights, then the whole model."""

    in_backward = True          # the reduce-scatter runs inside backward, layer by layer

    def __init__(self, worker, optimizer: str, lr: float, precision: str = "fp32", offload: str = "none",
                 prefetch: str = "default"):
        check_torchrun(worker)
        self.worker, self.optimizer, self.lr, self.precision = worker, optimizer, lr, precision
        self.offload, self.prefetch = offload, prefetch

    def prepare(self, run: Run) -> None:
        mp = mixed_precision(self.precision)
        # lesson 14: the shards, their gradients and so the optimizer's state live in the host's memory
        off = CPUOffloadPolicy() if self.offload == "params" else OffloadPolicy()
        for layer in run.model:                      # one all-gather per layer, freed after use
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mp_policy=mp, offload_policy=off)
        fully_shard(run.model, mp_policy=mp, offload_policy=off)   # the root: whatever is left, and the schedule
        set_prefetch(run.model, self.prefetch)
        run.optimizer = make_optimizer(self.optimizer, run.model.parameters(), self.lr)

    def update(self, run: Run, step: int) -> None:
        run.optimizer.step()
        self.held = held_bytes(run.model, run.optimizer)   # what this rank holds between steps


def mixed_precision(precision: str) -> MixedPrecisionPolicy:
    """Lesson 14: FSDP2's own mixed precision.  ``"bf16"``: each layer's parameters are all-gathered in bf16
    (half the bytes on the wire, and the layer computes in bf16) while the shards a rank keeps stay fp32:
    they *are* the master copy, updated by the optimizer in fp32; gradients are reduce-scattered in fp32
    and the output handed back in fp32 (the loss is computed there).  Between steps a rank holds what fp32
    FSDP holds: the 16-bit copies live only while their layer runs.  ``"fp32"``: no casting."""
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                    output_dtype=torch.float32)
    return MixedPrecisionPolicy()


PREFETCH = {
    "default": "FSDP2's own: implicit in forward (a CUDA stream; none on CPU), the layer before in backward",
    "next": "explicit, one layer ahead: the next layer's all-gather issued when this one's has arrived "
            "(forward), the previous layer's when this one's backward starts",
    "next_async": "'next', the all-gather left in flight (FSDP2's private _set_unshard_async_op): it travels "
                  "while this layer computes, and the next layer waits for it",
}


def set_prefetch(model, prefetch: str) -> None:
    """Lesson 15: how far ahead FSDP2 gathers a layer's parameters (``PREFETCH``); ``model`` already sharded,
    its layers each an ``FSDPModule``.  FSDP2 has no switch that turns prefetching off: an empty list
    (``set_modules_to_backward_prefetch([])``) means "the default" to it."""
    if prefetch == "default":
        return
    layers = [m for m in model if isinstance(m, FSDPModule)]
    for before, after in zip(layers, layers[1:]):
        before.set_modules_to_forward_prefetch([after])
        after.set_modules_to_backward_prefetch([before])
    if prefetch == "next_async":
        for layer in layers:
            layer._set_unshard_async_op(True)


def check_prefetch(prefetch) -> None:
    """Lesson 15: ``prefetch`` must be one of ``PREFETCH``."""
    if prefetch not in PREFETCH:
        raise ValueError(f"fsdp.train takes prefetch {', '.join(map(repr, PREFETCH))}, got {prefetch!r}; FSDP2 "
                         "cannot turn prefetching off (an empty list means its default)")


def train(worker, *, stage: int = 3, optimizer: str = "adam", model: str = "mlp", width: int = 64,
          depth: int = 2, batch_size: int | None = None, global_batch_size: int | None = None,
          steps: int = 10, lr: float = 0.01, seed: int = 0, dtype: str = "float32", precision: str = "fp32",
          offload: str = "none", prefetch: str = "default", around_step=None):
    """Lesson 08: train with FSDP2 (ZeRO stage 3); return this rank's record.

    The record's ``params`` are the full parameters (gathered from the shards at the end),
    its ``memory`` the bytes this rank held after the last update, by category.  ``precision``
    (lesson 14): ``"fp32"`` or ``"bf16"``, FSDP2's ``MixedPrecisionPolicy`` (``mixed_precision``).
    ``offload`` (lesson 14): ``"params"`` keeps the shards (and with them their gradients and the optimizer's
    state) in the host's memory, FSDP2's ``CPUOffloadPolicy``: GPU ranks only (``check_offload``); not yet
    run on a GPU by this course.  ``prefetch`` (lesson 15): ``PREFETCH``'s names (``set_prefetch``);
    ``around_step`` (lesson 15): the loop runs each step inside ``around_step(step)``; ``measure.traces.train``
    profiles one step that way.
    """
    run, batch_at = start_sharded(worker, "fsdp2", optimizer=optimizer, model=model, width=width, depth=depth,
                                  batch_size=batch_size, global_batch_size=global_batch_size, steps=steps,
                                  lr=lr, seed=seed, dtype=dtype, stage=3)
    run.record.config.update(mixed.named(precision))     # (FSDP2 casts, not the loop: the loop's stays fp32)
    run.record.config.update(prefetch=prefetch)
    strategy = FullyShard(worker, optimizer, lr, precision, offload, prefetch)
    record = train_steps(run, strategy, steps, batch_at, around_step=around_step)
    record.memory = getattr(strategy, "held", {})
    record.params = {name: p.full_tensor().detach().cpu().clone() for name, p in run.model.named_parameters()}
    return record


def check_fsdp(world_size: int, *, stage: int = 3, backend: str = "torchrun", device: str = "cpu",
               precision: str = "fp32", offload: str = "none", prefetch: str = "default", around_step=None,
               **config) -> None:
    """Lesson 08: an FSDP2 job's settings, checked before any process starts."""
    check_prefetch(prefetch)
    mixed.check(precision, config.get("dtype", "float32"))
    check_offload(offload, device)
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"fsdp.train takes precision 'fp32' or 'bf16' (FSDP2's MixedPrecisionPolicy, whose fp32 "
                         f"shards are the master copy), got {precision!r}: fp16 would need a loss scaler that "
                         "all the shards agree on, and bf16 master weights are what 'bf16' does here")
    if backend != "torchrun":
        raise ValueError("fsdp.train runs on launch(backend='torchrun') only: FSDP2 shards over torch.distributed")
    if stage != 3:
        raise ValueError(f"FSDP2 is ZeRO stage 3 (parameters sharded too), got stage={stage!r}")
    check_train(world_size, stage=1, backend=backend, device=device, **config)


def check_offload(offload: str, device: str) -> None:
    """Lesson 14: offload moves state from an accelerator's memory to the host's; a CPU rank's memory is the
    host's already, so there is nothing to offload to, and a run that asked would silently hold what it
    held before: refused.  (``predict.memory.offload_bytes`` gives the accounting a GPU run would show.)"""
    if offload not in ("none", "params"):
        raise ValueError(f"fsdp.train takes offload 'none' or 'params' (FSDP2's CPUOffloadPolicy: the shards, "
                         f"their gradients and the optimizer's state in the host's memory), got {offload!r}")
    if offload != "none" and device != "cuda":
        raise ValueError(f"offload={offload!r} moves state off an accelerator into the host's memory, but these "
                         f"ranks run on device={device!r}: their memory is the host's already, there is nothing to "
                         "offload to. predict.memory.offload_bytes gives what a GPU run would hold and move")


train.validate_args = check_fsdp
train.supports = frozenset({"torchrun", "cpu", "cuda", "checkpoint", "fault"})


def every_stage(worker, **settings) -> dict:
    """Lesson 08: the same job at stages 0, 1 and 2 by hand, then 3 with FSDP2, in one launch.

    ``settings`` are ``train``'s (optimizer, model, width, batch, steps, ...); returns
    ``{stage: this rank's record}``.
    """
    out = {stage: train_by_hand(worker, stage=stage, **settings) for stage in STAGES}
    out[3] = train(worker, **settings)
    return out


def check_every_stage(world_size: int, *, backend: str = "torchrun", device: str = "cpu", **settings) -> None:
    if "stage" in settings:
        raise ValueError("every_stage runs every stage: leave out stage=")
    check_train(world_size, stage=1, backend=backend, device=device, **settings)


every_stage.validate_args = check_every_stage
every_stage.supports = frozenset({"torchrun", "cpu", "cuda"})   # four runs in one job: no one checkpoint
