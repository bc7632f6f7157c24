"""What a run hands back for teaching: small, plain records that widgets read.

Introduced in lesson 01.  Runs *produce* records (numbers and small tensors recorded on the
real ranks); widgets only *read* them.  Either side can change without the other, and a
picture in a lesson is always drawn from something that really happened.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepRecord:
    """One training step on one rank.  Times are ``time.time()`` seconds, comparable across
    the ranks of one machine (on a GPU read once the device has finished: ``loop.Run.clock``).
    ``comm_*`` are ``None`` when communication overlaps the backward pass (DistributedDataParallel)
    and cannot be timed apart from it.  ``flops``: counted by PyTorch's formulas (``train.flops.CountFlops``) in the
    first step (the shapes are the same every step), so FLOP/s and MFU can be read off any record."""

    step: int
    loss: float
    accuracy: float
    t_start: float
    t_compute_end: float
    t_comm_start: float | None
    t_comm_end: float | None
    t_end: float
    flops: float | None = None    # lesson 05: floating-point operations this rank computed in the step


@dataclass
class RankRecord:
    rank: int
    world_size: int
    backend: str
    method: str
    device: str
    config: dict
    shard: torch.Tensor                       # the sample indices this rank got (epoch 0)
    steps: list[StepRecord] = field(default_factory=list)
    # grads[step][layer] = {"local": this rank's gradient, "average": after the all-reduce}
    grads: dict[int, dict[str, dict[str, torch.Tensor]]] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)   # final parameters
    test_accuracy: float = float("nan")
    wall_time: float = 0.0                    # seconds from the first step to the last
    # model parallelism (lesson 06): every pass, send and receive, {"step", "kind", "micro",
    # "chunk", "start", "end", "held"} (held: micro-batches whose activations the rank keeps)
    events: list[dict] = field(default_factory=list)
    # tensor parallelism (lesson 07): bytes this rank passed to all-reduce per step, by direction
    traffic: dict[str, int] = field(default_factory=dict)
    # memory (lesson 08): bytes this rank held after its last update, by category
    memory: dict[str, int] = field(default_factory=dict)
    # checkpoints (lesson 10): the step this life of the run resumed from (None: from the start);
    # ``steps`` then holds only the steps trained since
    resumed_from: int | None = None
    # lesson 05: the floating-point operations of one step on this rank (``train.flops``, first step)
    flops_per_step: float | None = None
    # lesson 05: (step, training seconds so far, test accuracy) every evaluate_every steps
    evaluations: list[tuple[int, float, float]] = field(default_factory=list)
    # lessons 12-13 (``parallelize.watch``): the bytes of every step's collectives inside the blocks; the
    # ring's messages and attention times; the activations kept for backward; the shape held at each
    # point of a block; per step and block, the experts' tokens; the routers' choices on test lines
    traffic_by_step: list[dict[str, int]] = field(default_factory=list)
    ring: dict = field(default_factory=dict)
    activation_bytes: int = 0
    shapes: list = field(default_factory=list)
    routing: list = field(default_factory=list)
    router: dict = field(default_factory=dict)
    # lesson 14: (loss scale, update skipped) per update, when fp16 scales its loss (``precision.mixed``)
    loss_scale: list = field(default_factory=list)
    # lesson 15: per step, every bucket of gradients sent during backward (``train.overlap``): its launch and
    # when this rank's wait for it returned
    buckets: list = field(default_factory=list)

    @property
    def losses(self) -> list[float]:
        return [s.loss for s in self.steps]

    @property
    def samples_per_second(self) -> float:
        """Samples this rank processed per second of training (start-up excluded)."""
        batch = self.config["batch_size"]
        return batch * len(self.steps) / self.wall_time if self.wall_time > 0 else float("nan")


def max_param_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference between two sets of parameters with the same names."""
    if a.keys() != b.keys():
        raise ValueError(f"different parameter names: {sorted(a)} vs {sorted(b)}")
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def throughput(records: list[RankRecord]) -> float:
    """Samples per second of the whole job: all ranks' samples over the slowest rank's time."""
    total = sum(r.config["batch_size"] * len(r.steps) for r in records)
    return total / max(r.wall_time for r in records)
