"""Where a rank's memory goes, predicted before anything runs: every axis, every ZeRO stage.

Introduced in lesson 08 (``notebooks/08_zero_sharding_what_every_worker_copied.ipynb``).

Data parallelism copies everything onto every rank: the parameters, their gradients and the
optimizer's state.  For Adam in mixed precision that is 16 bytes per parameter, so a
7.5-billion-parameter model needs 120 GB on *every* rank however many ranks there are.  The
Zero Redundancy Optimizer (ZeRO, Rajbhandari et al. 2020, "ZeRO: Memory optimizations toward
training trillion parameter models", section 5 and figure 1) removes the copies in three stages.
With Psi parameters, N data-parallel ranks and K bytes of optimizer state per parameter, the
paper's per-rank bytes (mixed precision: 2-byte parameters and gradients) are:

========================  ==============================  ==========================
stage                     bytes per rank                   paper's example (below)
========================  ==============================  ==========================
0: plain data parallel    (2 + 2 + K) Psi                  120 GB
1: P_os (optimizer state) (2 + 2) Psi + K Psi / N          31.4 GB
2: P_os+g (+ gradients)   2 Psi + (2 + K) Psi / N          16.6 GB
3: P_os+g+p (+ params)    (2 + 2 + K) Psi / N              1.9 GB
========================  ==============================  ==========================

with Psi = 7.5e9, N = 64, K = 12 (an fp32 master copy, 4 bytes, and Adam's two moments, 8).

The other axes divide the model before ZeRO shards the copies (lessons 06, 07, 12, 13):

* **pipeline**: each stage holds the layers of the *real* cut (``stage_cut``), which balances
  work, not parameters: the fullest stage may hold most of the model;
* **tensor**: each rank holds ``1/t`` of the layers tensor parallelism really splits, and the
  rest whole;
* **expert**: each rank holds ``1/e`` of the experts, and the dense layers whole;
* **context**: every rank of a context group holds the same parameters (only activations shrink).

ZeRO then shards each parameter's state over the ranks that hold a copy of it: a dense part
over ``N / (pipeline x tensor)`` ranks (data and context and expert ranks alike), an expert's over
``N / (pipeline x tensor x expert)``.  A model known only by its parameter count is cut evenly,
all of it split by tensor parallelism (nearly true of a stack of equal transformer blocks).
Activations are not sharded by ZeRO: they are given in bytes (``activations.py`` predicts them).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from .alpha_beta import ring_bytes
from .flops import layer_costs
from .stage_cut import balanced_starts, stage_of

PRECISIONS = {            # bytes per parameter of: (parameters, gradients, fp32 master copy)
    "fp32": (4, 4, 0),    # everything in float32: the optimizer updates the parameters themselves
    "mixed": (2, 2, 4),   # 16-bit parameters and gradients, fp32 master weights for the update
    "autocast": (4, 4, 0),  # lesson 14: torch.autocast: fp32 parameters and gradients; each matrix product
                            # casts its weight to 16 bits (a copy kept for backward: activations.py)
}
# lesson 14: the accounting of each precision policy of ``precision.mixed`` (bf16 and fp16 autocast alike;
# fp16's loss scaler holds one number, not one per parameter)
POLICY_ACCOUNTING = {"fp32": "fp32", "bf16": "autocast", "fp16": "autocast", "fp16_unscaled": "autocast",
                     "bf16_master": "mixed"}
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
    """Lesson 08: bytes one rank holds, by category."""

    params: float
    grads: float
    optimizer: float        # optimizer state, including any fp32 master copy of the parameters
    activations: float = 0.0

    @property
    def total(self) -> float:
        """Lesson 08: everything the rank holds, what must fit its memory."""
        return self.params + self.grads + self.optimizer + self.activations

    def as_dict(self) -> dict:
        """Lesson 08: the categories and their total, as the widgets' bars take them."""
        return dict(asdict(self), total=self.total)


@dataclass(frozen=True)
class Layer:
    """Lesson 08: one layer with weights, as the memory model sees it: plain numbers."""

    name: str
    params: float
    cost: float = 0.0            # multiply-adds per sample (flops.layer_costs): where a pipeline cuts
    tensor_split: float = 0.0    # of its params, those tensor parallelism shares out among the tensor ranks
    expert_split: float = 0.0    # of its params, those expert parallelism shares out (the experts' own)


def layers(model: nn.Module, sample=None, *, tensor=(), expert=()) -> list[Layer]:
    """Lesson 08: ``model``'s layers with weights, counted.  An ``nn.Sequential`` with a ``sample``
    gives one ``Layer`` per child with weights and its multiply-adds (a pipeline can cut it); any
    other model one ``Layer`` for all of it.  A parameter whose name contains one of ``tensor``
    (``tensor.tensor_parallel.SPLIT``'s names, ``tensor.heads_split.SPLIT``'s) is split by
    tensor parallelism; one whose name contains one of ``expert`` (``".experts."``) by expert
    parallelism."""
    def layer(name: str, module: nn.Module, prefix: str, cost: float = 0.0) -> Layer:
        """Lesson 08: ``module``'s parameters counted, and those the splits share out."""
        sizes = {prefix + n: p.numel() for n, p in module.named_parameters()}
        return Layer(name, sum(sizes.values()), cost, sum(n for k, n in sizes.items() if any(t in k for t in tensor)),
                     sum(n for k, n in sizes.items() if any(e in k for e in expert)))

    if sample is None or not isinstance(model, nn.Sequential):
        return [layer(type(model).__name__, model, "")]
    costs = layer_costs(model, sample)
    return [layer(name, child, name + ".", cost) for (name, child), cost in zip(model.named_children(), costs)
            if any(True for _ in child.parameters())]


def check(params, world_size: int, stage: int, optimizer: str, precision: str, pipeline: int = 1,
          tensor: int = 1, context: int = 1, expert: int = 1) -> int:
    """Lesson 08: the checks every function here shares; returns the data-parallel degree."""
    if isinstance(params, (int, float)) and not params > 0:
        raise ValueError(f"params must be a positive number of parameters, got {params!r}")
    for name, value in (("world_size", world_size), ("pipeline", pipeline), ("tensor", tensor),
                        ("context", context), ("expert", expert)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES} (0: plain data parallel), got {stage!r}")
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_STATE)}, got {optimizer!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    split = pipeline * tensor * context * expert
    if world_size % split:
        raise ValueError(f"world_size {world_size} is not a multiple of pipeline x tensor x context x expert = "
                         f"{split}: every model-parallel group needs all its ranks")
    if not isinstance(params, (int, float)) and pipeline > len(params):
        raise ValueError(f"{pipeline} pipeline stages but the model has {len(params)} layers with weights to share")
    return world_size // split


def held(params, pipeline: int = 1, tensor: int = 1, expert: int = 1) -> list[tuple[float, float]]:
    """Lesson 08: per pipeline stage, the (dense, expert) parameters one of its ranks holds: the real
    cut for a list of ``Layer``s, an even one for a parameter count."""
    if isinstance(params, (int, float)):
        return [(params / (pipeline * tensor), 0.0)] * pipeline
    stage = stage_of(balanced_starts([layer.cost for layer in params], pipeline), len(params))
    out = [[0.0, 0.0] for _ in range(pipeline)]
    for layer, s in zip(params, stage):
        out[s][0] += layer.params - layer.tensor_split - layer.expert_split + layer.tensor_split / tensor
        out[s][1] += layer.expert_split / expert
    return [(dense, experts) for dense, experts in out]


def per_stage(params, world_size: int, *, stage: int = 0, optimizer: str = "adam", precision: str = "mixed",
              activations: float = 0.0, pipeline: int = 1, tensor: int = 1, context: int = 1, expert: int = 1,
              master_copy: bool | None = None) -> list[Memory]:
    """Lesson 08: the bytes one rank of each pipeline stage holds, by category, in the ZeRO paper's
    accounting (ranks of one stage hold alike).

    ``params`` is the model: its parameter count, or its ``layers``; ``world_size`` all ranks;
    ``stage`` 0 (plain data parallelism) to 3; ``activations`` this rank's activation bytes, added as
    they are.  ``master_copy`` forces an fp32 copy of the parameters in the optimizer state (True)
    or leaves it out (False); by default mixed precision has one and fp32 does not (DeepSpeed's
    ZeRO-1 and 2 keep one even in fp32).  Fractions of a byte are kept: the paper's are averages."""
    check(params, world_size, stage, optimizer, precision, pipeline, tensor, context, expert)
    copies = world_size // (pipeline * tensor)          # ranks holding the same dense part
    p_bytes, g_bytes, master = PRECISIONS[precision]
    if master_copy is not None:
        master = 4 if master_copy else 0
    k = master + OPTIMIZER_STATE[optimizer]

    def sharded(dense: float, experts: float, from_stage: int) -> float:
        """Lesson 08: what one rank keeps of a category ZeRO shards from ``from_stage`` on."""
        if stage < from_stage:
            return dense + experts
        return dense / copies + experts / (copies // expert)

    return [Memory(params=p_bytes * sharded(d, e, 3), grads=g_bytes * sharded(d, e, 2),
                   optimizer=k * sharded(d, e, 1), activations=float(activations))
            for d, e in held(params, pipeline, tensor, expert)]


def per_rank(params, world_size: int, **settings) -> Memory:
    """Lesson 08: the bytes the fullest rank holds (``per_stage``'s settings): what must fit."""
    return max(per_stage(params, world_size, **settings), key=lambda m: m.total)


def zero_volume(params, world_size: int, *, stage: int = 0, precision: str = "mixed", exact: bool = True,
                pipeline: int = 1, tensor: int = 1) -> dict:
    """Lesson 08: what the fullest rank sends per step for its data-parallel copies (ZeRO paper,
    section 7), in elements and bytes.

    Stages 0 to 2: a reduce-scatter and an all-gather of the (model-parallel part of the)
    parameters' size; stage 3 gathers the parameters twice, for forward and for backward.
    ``exact`` counts a ring's (N-1)/N (``alpha_beta.ring_bytes``); ``exact=False`` gives the
    paper's rounded 2 Psi and 3 Psi."""
    check(params, world_size, stage, "sgd", precision, pipeline, tensor)
    mine = max(dense for dense, _ in held(params, pipeline, tensor))
    data = world_size // (pipeline * tensor)
    share = ring_bytes(mine, data, "reduce_scatter") if exact else mine
    passes = {"reduce_scatter": 1, "all_gather": 2 if stage == 3 else 1}
    elements = {k: n * share for k, n in passes.items()}
    # gradients travel at gradient precision; parameters are gathered at parameter precision
    p_bytes, g_bytes, _ = PRECISIONS[precision]
    nbytes = g_bytes * elements["reduce_scatter"] + p_bytes * elements["all_gather"]
    return dict(elements=sum(elements.values()), bytes=nbytes, **{f"{k}_elements": v for k, v in elements.items()})


def largest_model(budget_bytes: float, world_size: int, *, activations: float = 0.0, **settings) -> float:
    """Lesson 08: the most parameters that fit ``budget_bytes`` per rank (0 if none fit), for a model
    cut evenly.  Every category is proportional to the parameter count, so the bytes of one
    parameter (``per_rank(1, ...)``) say it all."""
    one = per_rank(1, world_size, **settings).total
    return max(0.0, (budget_bytes - activations) / one)


def zero_paper_example() -> dict[int, float]:
    """Lesson 08: the ZeRO paper's figure 1, Psi = 7.5e9, N = 64, Adam in mixed precision, in GB."""
    return {s: per_rank(7.5e9, 64, stage=s).total / 1e9 for s in STAGES}


def bytes_per_parameter(policy: str, optimizer: str = "adam") -> dict[str, int]:
    """Lesson 14: what one parameter costs a rank that holds a whole copy, by category, under a precision
    policy of ``precision.mixed`` (``POLICY_ACCOUNTING``): ``params``, ``grads``, ``master`` (the fp32 copy
    the optimizer updates) and ``optimizer`` (its own state).  With Adam: fp32 16, bf16 master 16 (the
    ZeRO paper's 2 + 2 + 12, and the Ultra-Scale Playbook's count without fp32 gradients), autocast 16
    plus a 2-byte copy of each weight while a step runs (``activations.mlp_saved_bytes``)."""
    if policy not in POLICY_ACCOUNTING:
        raise ValueError(f"policy must be one of {sorted(POLICY_ACCOUNTING)}, got {policy!r}")
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_STATE)}, got {optimizer!r}")
    p, g, master = PRECISIONS[POLICY_ACCOUNTING[policy]]
    return {"params": p, "grads": g, "master": master, "optimizer": OPTIMIZER_STATE[optimizer]}


OFFLOADS = ("none", "optimizer", "params")


def offload_bytes(params, world_size: int, offload: str = "optimizer", **settings) -> dict:
    """Lesson 14: ``per_rank``'s bytes split between the accelerator and the host's memory when some of
    them are moved off the accelerator, and the bytes that cross between the two each step.

    * ``"optimizer"``, ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload", section 4): the optimizer's state
      and the fp32 master copy live on the host and the update runs there; the gradients this rank keeps
      go down to it and the parameters its optimizer updated (its shard, from ZeRO-1 on) come back;
    * ``"params"``, as FSDP2's ``CPUOffloadPolicy`` and ZeRO-Infinity also keep the (sharded) parameters
      on the host: they come up for the forward and again for the backward (FSDP frees them between),
      and the gradients go down: ``2 params + grads`` bytes a step.
    Activations stay on the accelerator.  On a machine without one (a CPU rank) there is no second
    memory: these are the numbers a GPU run would show, not something a CPU run can measure."""
    if offload not in OFFLOADS:
        raise ValueError(f"offload must be one of {OFFLOADS}, got {offload!r}")
    m = per_rank(params, world_size, **settings)
    if offload == "none":
        return {"device": m.total, "host": 0.0, "traffic": 0.0}
    host = m.optimizer + m.grads + (m.params if offload == "params" else 0.0)
    if offload == "params":
        traffic = m.grads + 2 * m.params
    else:   # the elements this rank's optimizer updates: momentum keeps one fp32 number for each
        updated = per_rank(params, world_size, **{**settings, "precision": "fp32", "optimizer": "momentum",
                                                  "master_copy": False}).optimizer / 4
        traffic = m.grads + PRECISIONS[settings.get("precision", "mixed")][0] * updated
    return {"device": m.total - host, "host": host, "traffic": traffic}

