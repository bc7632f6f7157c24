"""What a DeepSpeed rank holds, and how a checkpoint reaches it: the state side of ``deepspeed_zero``.

Introduced in lesson 08 (memory held by each ZeRO stage) and lesson 10 (checkpoints).  Kept apart
from ``deepspeed_zero.py`` (the job's config and its training step) because these read DeepSpeed's
internals: the fp32 shards stage 3 hides between steps, the shards ``ds_tensor`` of its
parameters; a DeepSpeed upgrade that moves them changes this file only.
"""
from __future__ import annotations

from ..train.memory_held import held_bytes


class Stage3Optimizer:
    """Lesson 10: stage 3's inner optimizer, for a checkpoint to save and load.

    Between steps DeepSpeed's stage 3 empties its inner optimizer's list of parameters (the fp32
    shards are put in only for the update), but the optimizer's state is keyed by them: so for
    the moment of saving or loading they are put back (DeepSpeed's own two methods for it).
    """

    def __init__(self, zero3):
        self.zero3 = zero3

    @property
    def state(self):
        return self.zero3.optimizer.state

    def state_dict(self) -> dict:
        self.zero3._set_fp32_optimizer_param_groups()
        try:
            return self.zero3.optimizer.state_dict()
        finally:
            self.zero3._clear_fp32_optimizer_param_groups()

    def load_state_dict(self, saved: dict) -> None:
        self.zero3._set_fp32_optimizer_param_groups()
        try:
            self.zero3.optimizer.load_state_dict(saved)
        finally:
            self.zero3._clear_fp32_optimizer_param_groups()


def held(model, ds_optimizer) -> dict[str, int]:
    """Lesson 08: bytes held, by category: the model's parameters (stage 3: their shards,
    ``ds_tensor``), and as optimizer state the inner optimizer's moments *and* the fp32 copy
    of this rank's shard that DeepSpeed's ZeRO updates (it keeps one even when training in fp32)."""
    inner = getattr(ds_optimizer, "optimizer", ds_optimizer)
    shards = [p.ds_tensor for p in model.parameters() if hasattr(p, "ds_tensor")]
    return held_bytes(model, inner, more_params=shards)


def full_params(model, stage: int) -> dict:
    """The whole parameters on every rank (stage 3 gathers its shards for the moment)."""
    if stage < 3:
        return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
    import deepspeed

    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params):
        return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
