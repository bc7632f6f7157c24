"""One settings object for a run: what model, on what data, trained how, split how.

Introduced in lesson 12 (the line reader split five ways) and read by lesson 09's run config, which maps
onto it section by section.  Before it, every training function listed its own 14 to 21 keyword
arguments, repeated in its checks, its one-process reference and the config's table.  A ``TrainSpec`` is
the one list (as nanoGPT's ``GPTConfig`` is for its model), in four sections that are the run config's:

===============  ========================================================================================
``model``        ``kind`` (mlp, cnn, transformer), ``width`` (hidden units, channels, or the transformer's
                 d_model), ``depth`` (hidden layers, or blocks), the transformer's heads, line length
                 (``digits``) and mask, and its experts (``experts`` > 0: a mixture in every block)
``data``         which digits, how many, the seed every rank draws the model and the batches from
``training``     steps, the global batch, learning rate, optimizer, number type, activation recomputation
``parallel``     the mesh: ``data``, ``pipeline``, ``expert``, ``context``, ``tensor`` (one of them may be -1,
                 "the ranks the others leave"); the pipeline's micro-batches and schedule; and the levers
                 of each axis (how gradients are reduced, sequence parallelism, ring or all-gathered
                 attention, the all-to-all by hand or the library's)
===============  ========================================================================================

A notebook still passes flat keywords (``launch(train, world_size=4, context=2, width=32)``): every
field's name is unique across the sections, so ``TrainSpec.of(**keywords)`` knows where each goes, and a
keyword that is no field is refused by name.  ``spec.flat()`` gives them back.  The defaults are the run
config's (a test keeps the two equal, key for key); a training function may start from its own
(``parallelize.trainer.DEFAULTS``: lesson 12's small transformer), and refuses what it does not use.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSpec:
    """Lesson 12: which model, and its sizes."""

    kind: str = "mlp"                 # "mlp", "cnn" or "transformer" (flat keyword: ``model``)
    width: int = 64                   # MLP hidden units, CNN channels, the transformer's d_model
    depth: int = 2                    # MLP hidden layers, the transformer's blocks
    heads: int = 4                    # transformer: attention heads
    digits: int = 3                   # transformer: digits per line (16 tokens each)
    causal: bool = False              # transformer: each token sees only the tokens before it
    experts: int = 0                  # transformer: experts in every block's MLP (0: a dense MLP)
    top_k: int = 1                    # experts each token goes to
    capacity_factor: float = 1.25     # tokens an expert takes, times the even share
    aux_weight: float = 0.01          # Switch Transformer's balancing loss, times this
    z_weight: float = 0.0             # the router z-loss, times this


@dataclass(frozen=True)
class DataSpec:
    """Lesson 05 (data sets) and 12 (lines): what the ranks train on."""

    dataset: str = "digits"
    samples: int | None = None
    root: str | None = None           # MNIST's folder (flat keyword: ``data_root``)
    seed: int = 0                     # the model's weights and the batches' order: the same on every rank
    test_lines: int = 256             # transformer: test lines the accuracy is read on


@dataclass(frozen=True)
class TrainingSpec:
    """Lesson 01: how long, how big a batch, how fast."""

    steps: int = 50
    global_batch_size: int = 64       # samples (lines) per step, over every rank together
    lr: float = 0.1
    optimizer: str = "sgd"            # "sgd", "momentum" or "adam" (``train.step.OPTIMIZERS``)
    dtype: str = "float32"
    recompute: str = "none"           # activation recomputation (lesson 14): "none", "full" (every block) or
                                      # "selective" (attention's core); the transformer's (``train.recompute``)
    precision: str = "fp32"           # lesson 14: "fp32", "bf16", "fp16" (with a loss scaler) or "bf16_master"
                                      # (``precision.mixed``); the MLP's data parallelism, ZeRO, the transformer


@dataclass(frozen=True)
class ParallelSpec:
    """Lessons 01-13: the mesh, and each axis's lever."""

    data: int = -1                    # data replicas (-1: the ranks the other axes leave)
    pipeline: int = 1                 # pipeline stages
    expert: int = 1                   # expert-parallel ranks (they share out the experts)
    context: int = 1                  # context-parallel ranks (they share out each line)
    tensor: int = 1                   # tensor-parallel ranks (they share out each block's heads and units)
    micro_batches: int = 1            # micro-batches per step (a pipeline's, or accumulated gradients)
    schedule: str = "gpipe"           # the pipeline's schedule
    chunks: int = 1                   # model chunks per pipeline rank (the interleaved schedule)
    method: str = "ddp"               # how gradients are reduced: "by_hand", "fused" (``train.reduce``) or
                                      # "ddp" (the backend's own: plain data parallelism, lesson 01); lesson 15:
                                      # "hooks", "buckets", "reduce_scatter" (sent during backward)
    bucket_mb: float = 25.0           # lesson 15: the cap of a bucket of gradients (DDP's bucket_cap_mb)
    zero_stage: int = 0               # ZeRO: what the data replicas shard (lesson 08)
    local_steps: int = 4              # local SGD: steps between all-reduces (lesson 04)
    average: str = "parameters"       # local SGD: "parameters", or "gradients" (accumulation)
    sequence_parallel: bool = False   # tensor parallelism's all-reduce cut into all-gather + reduce-scatter
    attention: str = "ring"           # context parallelism: "ring" or "all_gather" for the K/V
    split: str = "contiguous"         # context parallelism: "contiguous" or "zigzag" pieces of the line
    all_to_all: str = "library"       # expert parallelism: "by_hand" (send/recv) or "library"
    use_torch: bool = False           # tensor parallelism with PyTorch's parallelize_module

    @property
    def mesh(self) -> dict[str, int]:
        """The mesh's axis sizes (``train.mesh.Mesh(worker, **spec.parallel.mesh)``)."""
        return {a: getattr(self, a) for a in ("data", "pipeline", "expert", "context", "tensor")}


SECTIONS = {"model": ModelSpec, "data": DataSpec, "training": TrainingSpec, "parallel": ParallelSpec}
ALIASES = {("model", "kind"): "model", ("data", "root"): "data_root"}   # flat names that are not the field's


def flat_names() -> dict[str, tuple[str, str]]:
    """Lesson 12: every flat keyword and the ``(section, field)`` it sets."""
    out = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            out[ALIASES.get((section, f.name), f.name)] = (section, f.name)
    return out


@dataclass(frozen=True)
class TrainSpec:
    """Lesson 12: a run's settings in the run config's four sections."""

    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    parallel: ParallelSpec = field(default_factory=ParallelSpec)

    @classmethod
    def of(cls, **keywords) -> "TrainSpec":
        """Lesson 12: a spec from flat keywords (``width=32, context=2``); the rest keep their defaults."""
        names, parts = flat_names(), {s: {} for s in SECTIONS}
        for key, value in keywords.items():
            if key not in names:
                raise TypeError(f"{key}={value!r} is no setting of a run: the settings are {', '.join(names)}")
            section, name = names[key]
            parts[section][name] = value
        return cls(**{s: SECTIONS[s](**parts[s]) for s in SECTIONS})

    def flat(self) -> dict:
        """Lesson 12: the spec as flat keywords (the inverse of ``of``)."""
        return {flat: getattr(getattr(self, section), name) for flat, (section, name) in flat_names().items()}

    @staticmethod
    def where(keyword: str) -> tuple[str, str]:
        """Lesson 12: the ``(section, field)`` a flat keyword sets."""
        return flat_names()[keyword]

    def replace(self, **keywords) -> "TrainSpec":
        """Lesson 12: a copy with some flat keywords changed."""
        return TrainSpec.of(**{**self.flat(), **keywords})
