"""Where a rank's memory goes, predicted before anything runs (lesson 08, ZeRO).

Introduced in lesson 08 (``notebooks/08_zero_sharding_what_every_worker_copied.ipynb``).

Data parallelism copies everything onto every rank: the parameters, their gradients and the
optimizer's state.  For Adam in mixed precision that is 16 bytes per parameter, so a
7.5-billion-parameter model needs 120 GB on *every* rank however many ranks there are:
adding ranks buys speed, never room.  The Zero Redundancy Optimizer (ZeRO, Rajbhandari et
al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models") removes
the copies in three stages.  With Psi parameters, N data-parallel ranks and K bytes of
optimizer state per parameter, the paper's per-rank bytes (mixed precision: 2-byte
parameters and gradients) are:

========================  ==============================  ==========================
stage                     bytes per rank                   paper's example (below)
========================  ==============================  ==========================
0: plain data parallel    (2 + 2 + K) Psi                  120 GB
1: P_os (optimizer state) (2 + 2) Psi + K Psi / N          31.4 GB
2: P_os+g (+ gradients)   2 Psi + (2 + K) Psi / N          16.6 GB
3: P_os+g+p (+ params)    (2 + 2 + K) Psi / N              1.9 GB
========================  ==============================  ==========================

with the paper's example Psi = 7.5e9, N = 64, K = 12 (Adam keeps an fp32 master copy of
the parameters, 4 bytes, and two fp32 moments, 8 bytes).  ``per_rank`` computes these for
any precision and optimizer; ``zero_paper_example`` reproduces the table (a test checks it).

What each stage costs in communication, per rank and step (the paper's section 7, in
parameter-sized elements; a ring sends (N-1)/N of that, which the paper rounds to 1):

* stages 0, 1 and 2: 2 Psi.  An all-reduce *is* a reduce-scatter (Psi) then an all-gather
  (Psi); ZeRO-1/2 do the same two halves, only with the optimizer step in between, on
  the shard each rank owns.  Sharding the optimizer and gradients is free in bandwidth.
* stage 3: 3 Psi: the parameters are all-gathered once for the forward pass and once more
  for the backward pass (each rank drops the others' shards in between), plus the
  gradients' reduce-scatter: 1.5 times the traffic, for N times less memory.

Model parallelism (lessons 06 and 07) divides the model before ZeRO shards the copies:
with ``pipeline`` stages and ``tensor`` ways, each rank holds 1/(pipeline x tensor) of the
parameters (an even cut assumed), and ZeRO shards that over the
N / (pipeline x tensor) ranks that hold the same part.

Activations are not part of ZeRO's sharding (each rank keeps its own micro-batch's), so
they are given in bytes (``activations=``); ``mlp_activation_bytes`` counts them for the
course's MLP.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

PRECISIONS = {            # bytes per parameter of: (parameters, gradients, fp32 master copy)
    "fp32": (4, 4, 0),    # everything in float32: the optimizer updates the parameters themselves
    "mixed": (2, 2, 4),   # 16-bit parameters and gradients, fp32 master weights for the update
}
OPTIMIZER_STATE = {       # fp32 bytes of state per parameter, besides any master copy
    "sgd": 0,             # plain SGD keeps nothing between steps
    "momentum": 4,        # one velocity per parameter
    "adam": 8,            # two moments per parameter
}
STAGES = (0, 1, 2, 3)
STAGE_NAMES = {0: "plain data parallel", 1: "ZeRO-1 (optimizer state sharded)",
               2: "ZeRO-2 (+ gradients)", 3: "ZeRO-3 / FSDP (+ parameters)"}
KNOWN_MODELS = {          # parameter counts a learner may want to try (published figures)
    "GPT-2 XL": 1.5e9,
    "ZeRO paper's example": 7.5e9,
    "Llama 2 7B": 6.74e9,
    "Llama 2 70B": 68.98e9,
    "GPT-3": 175e9,
}


@dataclass(frozen=True)
class Memory:
    """Bytes one rank holds, by category."""

    params: float
    grads: float
    optimizer: float        # optimizer state, including any fp32 master copy of the parameters
    activations: float = 0.0

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations

    def as_dict(self) -> dict:
        return dict(asdict(self), total=self.total)


def check(params: float, world_size: int, stage: int, optimizer: str, precision: str,
          pipeline: int = 1, tensor: int = 1) -> int:
    """The checks ``per_rank`` and ``volume`` share; returns the data-parallel degree."""
    if not params > 0:
        raise ValueError(f"params must be a positive number of parameters, got {params!r}")
    for name, value in (("world_size", world_size), ("pipeline", pipeline), ("tensor", tensor)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES} (0: plain data parallel), got {stage!r}")
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_STATE)}, got {optimizer!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if world_size % (pipeline * tensor):
        raise ValueError(f"world_size {world_size} is not a multiple of pipeline x tensor = "
                         f"{pipeline * tensor}: every model-parallel group needs all its ranks")
    return world_size // (pipeline * tensor)


def per_rank(params: float, world_size: int, *, stage: int = 0, optimizer: str = "adam",
             precision: str = "mixed", activations: float = 0.0, pipeline: int = 1,
             tensor: int = 1, master_copy: bool | None = None) -> Memory:
    """Lesson 08: the bytes one rank holds, by category, in the ZeRO paper's accounting.

    ``params`` is the whole model's parameter count; ``world_size`` all ranks; ``stage`` 0
    (plain data parallelism) to 3; ``activations`` this rank's activation bytes, added as
    they are.  ``master_copy`` forces an fp32 copy of the parameters in the optimizer state
    (True) or leaves it out (False); by default mixed precision has one and fp32 does not
    (DeepSpeed's ZeRO-1 and 2 keep one even in fp32).  Fractions of a byte are kept: the
    paper's figures are averages too.
    """
    data = check(params, world_size, stage, optimizer, precision, pipeline, tensor)
    mine = params / (pipeline * tensor)          # the part of the model this rank's group holds
    p_bytes, g_bytes, master = PRECISIONS[precision]
    if master_copy is not None:
        master = 4 if master_copy else 0
    k = master + OPTIMIZER_STATE[optimizer]
    return Memory(params=p_bytes * mine / (data if stage >= 3 else 1),
                  grads=g_bytes * mine / (data if stage >= 2 else 1),
                  optimizer=k * mine / (data if stage >= 1 else 1),
                  activations=float(activations))


def volume(params: float, world_size: int, *, stage: int = 0, precision: str = "mixed",
           exact: bool = True, pipeline: int = 1, tensor: int = 1) -> dict:
    """Lesson 08: what one rank sends per step for its data-parallel copies, in elements and bytes.

    Stages 0 to 2: a reduce-scatter and an all-gather of the (model-parallel part of the)
    parameters' size; stage 3 gathers the parameters twice.  ``exact`` counts a ring's
    (N-1)/N; ``exact=False`` gives the paper's rounded 2 Psi and 3 Psi.
    """
    data = check(params, world_size, stage, "sgd", precision, pipeline, tensor)
    mine = params / (pipeline * tensor)
    share = (data - 1) / data if exact else 1.0
    passes = {"reduce_scatter": 1, "all_gather": 2 if stage == 3 else 1}
    elements = {k: n * mine * share for k, n in passes.items()}
    # gradients travel at gradient precision; parameters are gathered at parameter precision
    nbytes = PRECISIONS[precision][1] * elements["reduce_scatter"] + PRECISIONS[precision][0] * elements["all_gather"]
    return dict(elements=sum(elements.values()), bytes=nbytes, **{f"{k}_elements": v for k, v in elements.items()})


def largest_model(budget_bytes: float, world_size: int, *, stage: int = 0, optimizer: str = "adam",
                  precision: str = "mixed", activations: float = 0.0, pipeline: int = 1,
                  tensor: int = 1) -> float:
    """Lesson 08: the most parameters that fit ``budget_bytes`` per rank (0 if none fit).

    Every category is proportional to the parameter count, so the bytes of one parameter
    (``per_rank(1, ...)``) say it all.
    """
    one = per_rank(1, world_size, stage=stage, optimizer=optimizer, precision=precision,
                   pipeline=pipeline, tensor=tensor).total
    return max(0.0, (budget_bytes - activations) / one)


def zero_paper_example() -> dict[int, float]:
    """Lesson 08: the ZeRO paper's Figure 1, Psi = 7.5e9, N = 64, Adam in mixed precision, in GB."""
    return {s: per_rank(7.5e9, 64, stage=s).total / 1e9 for s in STAGES}


def mlp_activation_bytes(batch: int, width: int, depth: int = 2, *, inputs: int = 64,
                         classes: int = 10, itemsize: int = 4) -> int:
    """Lesson 08: what the course's MLP keeps for its backward pass, per mini-batch.

    Each ``Linear`` keeps its input, each ``ReLU`` its output, which is the next ``Linear``'s
    input (one tensor, counted once), and the loss keeps the log-probabilities and the labels
    (64-bit integers): per sample, the input, ``depth`` hidden layers, the classes and a label.
    """
    return batch * ((inputs + depth * width + classes) * itemsize + 8)
