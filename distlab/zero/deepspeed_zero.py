"""ZeRO stages 1 to 3 with DeepSpeed itself, configured from the same settings as ours.

Introduced in lesson 08 (``notebooks/08_zero_sharding_what_every_worker_copied.ipynb``).

DeepSpeed is where ZeRO comes from.  A DeepSpeed job is a model and a *config*: a JSON
document that says the batch sizes, the precision, the ZeRO stage, the optimizer and its
settings.  ``config`` writes it from the settings the hand-written ZeRO (``zero.py``) and FSDP2
(``fsdp.py``) take, so the three can be compared on the same job, and ``train`` runs exactly
the config ``config`` returns (DeepSpeed builds the optimizer from it); ``validate`` parses it with
DeepSpeed's own ``DeepSpeedConfig`` (what ``deepspeed.initialize`` does), so a bad setting
fails with DeepSpeed's message before any process starts.

``train`` runs it: ``deepspeed.initialize`` wraps the model in an *engine* whose
``backward`` and ``step`` do the reduce-scatters and all-gathers of the chosen stage; the
engine is the step of the one training loop (``Engine``), so a DeepSpeed run writes metrics,
keeps checkpoints, resumes and obeys faults like every other.
On a machine without a GPU, DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``) runs it in
CPU processes over gloo.  DeepSpeed is optional for a learner (``tools/install_deepspeed.sh``
installs it against the torch already there; the test set-up requires it); what is not
installed is said plainly (``available``).
"""
from __future__ import annotations

import json

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..comm.collectives import check_torchrun
from ..long_runs.checkpoint import CheckpointError
from ..data_parallel.data_parallel import per_rank_batch
from .deepspeed_setup import available, prebuild, status  # noqa: F401 (lesson 08 calls them from here)
from .deepspeed_state import Stage3Optimizer, full_params, held  # noqa: F401 (held: lesson 08)
from ..train.step import check_optimizer
from ..train.loop import Done, Run, Strategy, evaluate, train_steps
from .zero import check_train as check_zero
from .zero import start_sharded

PRECISION_KEYS = {"fp32": {}, "mixed": {"bf16": {"enabled": True}}}
# Our optimizers (train.step.OPTIMIZERS) as a DeepSpeed config names them.  Two defaults of DeepSpeed
# would change the update: its "Adam" is AdamW (decoupled weight decay, torch's default 0.01)
# unless "adam_w_mode" is false, and without "torch_adam" it is DeepSpeed's own fused kernel.
# "SGD" is not one of DeepSpeed's names: it takes torch.optim.SGD by that name.
OPTIMIZER_KEYS = {"sgd": {"type": "SGD", "params": {}},
                  "momentum": {"type": "SGD", "params": {"momentum": 0.9}},
                  "adam": {"type": "Adam", "params": {"torch_adam": True, "adam_w_mode": False}}}
# DeepSpeed's default buckets (5e8 numbers) are sized for GPUs: 2 GB of fp32 per rank, more than
# Binder's whole memory.  Ours are 1M numbers (4 MB).  And stage 3 keeps parameters under
# 100,000 numbers whole on every rank by default (gathering them costs more than it saves);
# every layer of the course's models is that small, so the threshold is 0: shard them all.
BUCKET = 1 << 20
ZERO_KEYS = {0: {}, 1: {"reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET},
             2: {"reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET},
             3: {"reduce_bucket_size": BUCKET, "stage3_prefetch_bucket_size": BUCKET,
                 "stage3_param_persistence_threshold": 0}}


def config(world_size: int, *, stage: int, optimizer: str = "adam", lr: float = 0.01,
           batch_size: int | None = None, global_batch_size: int | None = None,
           precision: str = "fp32", gradient_clipping: float = 0.0) -> dict:
    """Lesson 08: the DeepSpeed config (a plain dict, JSON-ready) for these settings.

    It names the optimizer (``OPTIMIZER_KEYS``) so that DeepSpeed builds the same
    ``torch.optim`` optimizer as our runs, and it sets ``gradient_clipping``, 0 (off) unless
    told otherwise: DeepSpeed's default (0.19) is 1.0, which scales the gradients down whenever
    their global norm exceeds 1, and none of our runs clips.  With that default, DeepSpeed's
    Adam on the width-256 MLP of lesson 08 equals ours for 3 steps, then the 4th gradient's norm
    exceeds 1 and its update differs (lesson 08 prints by how much, beside the rounding gap);
    with clipping off it equals ours bit for bit.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (plain data parallel) to 3, got {stage!r}")
    if precision not in PRECISION_KEYS:
        raise ValueError(f"precision must be one of {sorted(PRECISION_KEYS)}, got {precision!r}")
    check_optimizer(optimizer)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if isinstance(gradient_clipping, bool) or not isinstance(gradient_clipping, (int, float)) or gradient_clipping < 0:
        raise ValueError(f"gradient_clipping must be 0 (off) or a positive norm, got {gradient_clipping!r}")
    b = per_rank_batch(world_size, batch_size, global_batch_size)
    named = OPTIMIZER_KEYS[optimizer]
    return {"train_micro_batch_size_per_gpu": b, "gradient_accumulation_steps": 1,
            "train_batch_size": b * world_size,
            "optimizer": {"type": named["type"], "params": {"lr": lr, **named["params"]}},
            "gradient_clipping": float(gradient_clipping),
            "zero_optimization": {"stage": stage, **ZERO_KEYS[stage]},
            "steps_per_print": 10**9, "wall_clock_breakdown": False, **PRECISION_KEYS[precision],
            # ZeRO refuses optimizers it has not been tested with (SGD) unless told: ours is elementwise
            "zero_allow_untested_optimizer": True}


def validate(cfg: dict, world_size: int | None = None):
    """Lesson 08: parse ``cfg`` with DeepSpeed's own parser; returns its ``DeepSpeedConfig``.

    Inside a job DeepSpeed checks the batch sizes against the job's world size.  Outside one
    it assumes a single rank, so here the batch arithmetic for ``world_size`` ranks is checked
    first, then DeepSpeed parses the config as one rank of it would see it.
    """
    reason = available()
    if reason:
        raise RuntimeError(reason)
    from deepspeed.runtime.config import DeepSpeedConfig

    if world_size is None or dist.is_initialized():
        return DeepSpeedConfig(cfg)
    micro, accumulate = cfg.get("train_micro_batch_size_per_gpu"), cfg.get("gradient_accumulation_steps", 1)
    total = cfg.get("train_batch_size")
    if None not in (micro, total) and total != micro * accumulate * world_size:
        raise ValueError(f"train_batch_size {total} is not train_micro_batch_size_per_gpu {micro} x "
                         f"gradient_accumulation_steps {accumulate} x {world_size} ranks")
    one_rank = dict(cfg, train_batch_size=micro * accumulate) if None not in (micro, total) else cfg
    return DeepSpeedConfig(one_rank)


def train(worker, *, stage: int = 2, optimizer: str = "adam", model: str = "mlp", width: int = 64,
          depth: int = 2, batch_size: int | None = None, global_batch_size: int | None = None,
          steps: int = 10, lr: float = 0.01, seed: int = 0, dtype: str = "float32",
          gradient_clipping: float = 0.0):
    """Lesson 08: train with DeepSpeed's ZeRO ``stage`` (0 to 3); return this rank's record.

    DeepSpeed builds the optimizer from ``config(...)``, the dict a learner reads; the record
    keeps it (``record.config["deepspeed"]``).

    DeepSpeed's engine must run the backward pass and the update itself (``engine.backward(loss)``
    hooks the reduce-scatters into backward, ``engine.step()`` updates the shard and gathers), so
    the strategy ``Engine`` replaces the loop's whole step; the loop (``loop.train_steps``) keeps
    the records, metrics, checkpoints and faults.  The record's ``memory`` is what this rank held
    after the last step (``held``); its ``params`` the full parameters.
    """
    check_torchrun(worker)
    reason = available()                 # (also chooses DeepSpeed's CPU accelerator without a GPU)
    if reason:
        raise RuntimeError(reason)
    import deepspeed

    deepspeed.init_distributed(dist_backend=dist.get_backend())   # DeepSpeed joins our process group
    run, batch_at = start_sharded(worker, f"deepspeed{stage}", optimizer=optimizer, model=model, width=width,
                                  depth=depth, batch_size=batch_size, global_batch_size=global_batch_size,
                                  steps=steps, lr=lr, seed=seed, dtype=dtype, stage=stage)
    cfg = config(worker.world_size, stage=stage, optimizer=optimizer, lr=lr, batch_size=run.record.config["batch_size"],
                 gradient_clipping=gradient_clipping)
    run.record.config["deepspeed"] = cfg
    return train_steps(run, Engine(cfg, stage), steps, batch_at)


class Engine(Strategy):
    """Lesson 08: DeepSpeed's engine as a strategy of the one loop.

    ``prepare`` hands the model to ``deepspeed.initialize``, which builds the optimizer from the
    config; ``run.net`` becomes the engine and ``run.optimizer`` the plain ``torch.optim`` optimizer
    inside it (over this rank's shard), whose state a checkpoint holds like any other.  What
    DeepSpeed keeps beyond the model and that optimizer, ``state_dict`` adds: the fp32 master
    copy of this rank's shard (stages 1-3), stage 3's shards of the parameters themselves (the
    module's own tensors are empty between steps), and the engine's step counters.
    """

    def __init__(self, cfg: dict, stage: int):
        self.cfg, self.stage = cfg, stage

    def prepare(self, run: Run) -> None:
        import deepspeed

        self.engine, self.ds_optimizer, _, _ = deepspeed.initialize(
            model=run.model, model_parameters=run.model.parameters(), config=json.loads(json.dumps(self.cfg)))
        run.net = self.engine                # (the optimizer start() made is dropped: DeepSpeed made its own)
        run.optimizer = (Stage3Optimizer(self.ds_optimizer) if self.stage == 3
                         else getattr(self.ds_optimizer, "optimizer", self.ds_optimizer))

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = run.clock()
        out = self.engine(x)
        loss = F.cross_entropy(out, y)
        self.engine.backward(loss)                  # backward, and the stage's gradient reduction
        t_compute_end = run.clock()
        self.engine.step()                          # the sharded update, and the parameters' gather
        return Done(loss.item(), (out.argmax(1) == y).double().mean().item(), t_start, t_compute_end)

    def _masters(self) -> list[torch.Tensor]:
        """The fp32 master copy of this rank's shard (none at stage 0: the optimizer updates the model)."""
        if self.stage == 3:
            return list(self.ds_optimizer.fp32_partitioned_groups_flat)
        return list(getattr(self.ds_optimizer, "single_partition_of_fp32_groups", []))

    def _shards(self, run: Run) -> list[torch.Tensor]:
        return [p.ds_tensor for p in run.model.parameters()] if self.stage == 3 else []

    def state_dict(self, run: Run) -> dict:
        e = self.engine
        return {"masters": self._masters(), "shards": self._shards(run),
                "counters": [e.global_steps, e.global_samples, e.micro_steps]}

    @torch.no_grad()
    def load_state_dict(self, run: Run, state: dict) -> None:
        for name in ("masters", "shards"):
            mine = self._masters() if name == "masters" else self._shards(run)
            if len(mine) != len(state[name]):
                raise CheckpointError(f"the checkpoint holds {len(state[name])} {name}, this DeepSpeed run "
                                      f"{len(mine)}: it was saved at another ZeRO stage")
            for tensor, saved in zip(mine, state[name]):
                tensor.copy_(saved)
        self.engine.global_steps, self.engine.global_samples, self.engine.micro_steps = state["counters"]

    def finish(self, run: Run) -> None:
        record, device = run.record, run.worker.device
        record.memory = held(run.model, self.ds_optimizer)
        record.params = full_params(run.model, self.stage)
        record.test_accuracy = evaluate(self.engine, run.data.x_test.to(device), run.data.y_test.to(device))


def check_train(world_size: int, *, stage: int = 2, optimizer: str = "adam", gradient_clipping: float = 0.0,
                backend: str = "torchrun", device: str = "cpu", **settings) -> None:
    """Lesson 08: a DeepSpeed job's settings, checked before any process starts."""
    if backend != "torchrun":
        raise ValueError("deepspeed_zero.train runs on launch(backend='torchrun') only: DeepSpeed joins "
                         f"torch.distributed's process group, which Horovod jobs lack (got backend={backend!r})")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"deepspeed_zero.train runs on device 'cpu' (DeepSpeed's CPU accelerator) or 'cuda', "
                         f"got {device!r}")
    reason = available()
    if reason:
        raise RuntimeError(reason)
    config(world_size, stage=stage, optimizer=optimizer, lr=settings.get("lr", 0.01),
           batch_size=settings.get("batch_size"), global_batch_size=settings.get("global_batch_size"),
           gradient_clipping=gradient_clipping)
    check_zero(world_size, stage=1, optimizer=optimizer, **settings)


train.validate_args = check_train
train.supports = frozenset({"torchrun", "cpu", "cuda", "checkpoint", "fault"})   # through the one loop
