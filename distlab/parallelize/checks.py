"""What the five-axis trainer checks before any process starts: the layout against the model and the job.

Introduced in lesson 12 (and 13 for the experts, 06 for the pipeline).  Every transform has conditions:
whole heads per tensor rank, equal pieces of the line per context rank, whole experts per expert rank,
a stage's worth of layers per pipeline rank, a batch every share and micro-batch divides; and some
pairs are not built (sequence parallelism with context parallelism; lesson 14's selective recomputation
with ring attention, which keeps no probabilities to drop) or need what one backend lacks
(Horovod has no send/recv: no pipeline, no ring, no all-to-all by hand there).  Each is checked here,
with a message that says what to change, so that a mistake costs a second and not a job.
"""
from __future__ import annotations

from ..experts.expert_parallel import HOW, check_experts
from ..experts.moe import MoEConfig
from ..models import build_model
from ..pipeline import schedules, stages
from ..train.mesh import check_mesh
from ..checks import check_int, check_positive
from ..context import context_parallel as cp
from ..tensor import heads_split as tp
from ..tensor.sequence_parallel import check_split
from ..tensor.tensor_parallel import check_tensor_parallel
from ..sequence.transformer import TransformerConfig
from ..train.overlap import OVERLAPPED, check_bucket_mb
from ..train.reduce import METHODS
from ..precision import mixed
from ..train import recompute
from ..train.spec import TrainSpec
from ..train.step import check_optimizer

NOT_HERE = {"dataset": "digits", "samples": None, "root": None}   # the 8x8 digits (and lines made of them)


def check(world_size: int, spec: TrainSpec, backend: str = "torchrun", device: str = "cpu") -> dict[str, int]:
    """Lesson 12: ``spec`` checked for a job of ``world_size`` ranks on ``backend``; returns the mesh's sizes."""
    m, p, t = spec.model, spec.parallel, spec.training
    if m.kind not in ("mlp", "cnn", "transformer"):
        raise ValueError(f"unknown model kind {m.kind!r}: the trainer trains the mlp, the cnn or the transformer")
    for name, value in NOT_HERE.items():
        if getattr(spec.data, name) != value:
            raise ValueError(f"{name}={getattr(spec.data, name)!r}: this trainer reads the 8x8 digits (the "
                             f"transformer, lines of them); {name} is data_parallel.train's (lesson 05)")
    if t.dtype != "float32":
        raise ValueError(f"dtype={t.dtype!r}: this trainer trains in float32")
    for name, value in (("zero_stage", 0), ("chunks", 1), ("local_steps", 4), ("average", "parameters")):
        if getattr(p, name) != value:
            raise ValueError(f"{name}={getattr(p, name)!r} is a setting of the MLP's strategies (zero, pipeline "
                             "interleaved, local_sgd), which the five-axis trainer does not use: leave it out")
    sizes = check_mesh(world_size, p.mesh)
    mixed.check(t.precision, t.dtype)
    recompute.check_layout(t.recompute, kind=m.kind, context=sizes["context"], attention=p.attention)
    if m.kind == "transformer":
        _check_lines(spec, sizes, backend)
    else:
        _check_digits(spec, sizes)
    _check_pipeline(spec, sizes, p, backend)
    shares = sizes["data"] * sizes["expert"]
    check_int("global_batch_size", t.global_batch_size)
    check_int("micro_batches", p.micro_batches)
    if t.global_batch_size % (shares * p.micro_batches):
        raise ValueError(f"global_batch_size {t.global_batch_size} does not divide into {shares} shares (data x "
                         f"expert ranks each train lines of their own) of {p.micro_batches} micro-batches")
    if p.method not in METHODS:
        raise ValueError(f"method={p.method!r}: this trainer's gradients go through the one gradient reducer "
                         f"(train.reduce): set method to one of {', '.join(METHODS)}"
                         + (" ('ddp', the backend's own, is plain data parallelism's)" if p.method == "ddp" else ""))
    check_bucket_mb(p.bucket_mb)
    if p.method in OVERLAPPED and sizes["pipeline"] > 1:
        raise ValueError(f"method={p.method!r} sends gradients from hooks during backward; a pipeline stage runs "
                         "backward once per micro-batch in its schedule's order, which these hooks do not follow "
                         "(lesson 15): use method 'fused' or 'by_hand' with pipeline > 1")
    check_optimizer(t.optimizer)
    check_int("steps", t.steps)
    check_positive("lr", t.lr)
    check_int("seed", spec.data.seed, minimum=0)
    check_int("test_lines", spec.data.test_lines)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return sizes


def _check_lines(spec, sizes, backend) -> None:
    """Lesson 12: the transformer's sizes against the tensor, context and expert axes."""
    m, p = spec.model, spec.parallel
    check_int("digits", m.digits, minimum=2)
    cfg = TransformerConfig(d_model=m.width, heads=m.heads, layers=m.depth, max_digits=m.digits, causal=m.causal)
    if m.experts:
        MoEConfig(m.experts, m.top_k, m.capacity_factor, m.aux_weight, m.z_weight)
    elif (m.top_k, m.capacity_factor, m.aux_weight, m.z_weight) != (1, 1.25, 0.01, 0.0):
        raise ValueError("top_k, capacity_factor, aux_weight and z_weight are the experts' settings: give experts > 0")
    tokens = m.digits * 16
    _check_tensor(cfg, sizes, p, backend, tokens)
    if sizes["context"] > 1 or p.attention != "ring" or p.split != "contiguous":
        if p.attention not in cp.ATTENTION:
            raise ValueError(f"unknown context-parallel attention {p.attention!r}; "
                             f"use one of {', '.join(cp.ATTENTION)}")
        check_split(tokens, sizes["context"], p.split)
        if sizes["context"] > 1 and p.attention == "ring" and backend == "horovod":
            raise ValueError("ring attention passes K and V to the next rank point to point, which Horovod cannot "
                             "do (it has collectives only): use backend='torchrun', or attention='all_gather'")
    _check_experts(m, sizes, p, backend)


LINES_ONLY = ("heads", "digits", "causal", "experts", "top_k", "capacity_factor", "aux_weight", "z_weight")


def _check_digits(spec, sizes) -> None:
    """Lesson 01's models on the axes they have: data, pipeline, and tensor (lesson 07's split of the depth-3
    MLP's block); a line's settings or a context or expert axis would be silently ignored, so they are refused."""
    m, p, defaults = spec.model, spec.parallel, TrainSpec()
    for name in LINES_ONLY:
        if getattr(m, name) != getattr(defaults.model, name):
            raise ValueError(f"{name}={getattr(m, name)!r} is the transformer's; model kind {m.kind!r} has none")
    for name in ("sequence_parallel", "use_torch", "attention", "split", "all_to_all"):
        if getattr(p, name) != getattr(defaults.parallel, name):
            raise ValueError(f"{name}={getattr(p, name)!r} is a lever of the transformer's axes; model kind {m.kind!r} "
                             "has no line to split")
    if spec.data.test_lines != defaults.data.test_lines:
        raise ValueError("test_lines is the transformer's test set; the digits' is fixed")
    for axis in ("context", "expert"):
        if sizes[axis] > 1:
            raise ValueError(f"{axis}={sizes[axis]}: model kind {m.kind!r} reads one digit, with no line to cut or "
                             "experts to spread (the transformer has both)")
    build_model(m.kind, m.width, depth=m.depth)          # its own checks of width and depth
    if sizes["tensor"] > 1:
        if m.kind != "mlp" or m.depth != 3:
            raise ValueError("tensor parallelism here splits the depth-3 MLP's block (lesson 07): use model mlp, "
                             "depth 3")
        check_tensor_parallel(m.width, sizes["tensor"])


def _check_tensor(cfg, sizes, p, backend, tokens) -> None:
    tp.check_heads(cfg.heads, cfg.mlp_ratio * cfg.d_model, sizes["tensor"])
    if not isinstance(p.sequence_parallel, bool) or not isinstance(p.use_torch, bool):
        raise ValueError("sequence_parallel and use_torch are True or False")
    if p.sequence_parallel:
        if sizes["tensor"] == 1:
            raise ValueError("sequence_parallel=True cuts the line across the tensor group: it needs tensor > 1")
        if sizes["context"] > 1:
            raise ValueError("sequence parallelism with context parallelism is not built here: use one of them "
                             "(context > 1, or sequence_parallel=True)")
        check_split(tokens, sizes["tensor"], "contiguous")
    if p.use_torch:
        if backend != "torchrun":
            raise ValueError("use_torch=True runs on launch(backend='torchrun') only: PyTorch's parallelize_module "
                             "speaks torch.distributed")
        if sizes["tensor"] == 1 or any(sizes[a] > 1 for a in ("data", "pipeline", "expert", "context")):
            raise ValueError("use_torch=True splits the blocks with PyTorch's parallelize_module across all the "
                             "ranks: give no other axis (tensor parallelism, with or without sequence_parallel)")


def _check_experts(m, sizes, p, backend) -> None:
    if p.all_to_all not in HOW:
        raise ValueError(f"unknown all-to-all {p.all_to_all!r}; use one of {', '.join(HOW)}")
    if sizes["expert"] > 1:
        if not m.experts:
            raise ValueError(f"expert={sizes['expert']} spreads experts over ranks, but the model has none: "
                             "give experts > 0")
        check_experts(m.experts, sizes["expert"])
        if p.all_to_all == "by_hand" and backend == "horovod":
            raise ValueError("the all-to-all by hand is made of send/recv, which Horovod does not have: "
                             "use backend='torchrun', or all_to_all='library' (hvd.alltoall)")


def _check_pipeline(spec, sizes, p, backend) -> None:
    if sizes["pipeline"] == 1:
        if p.schedule != "gpipe":
            raise ValueError(f"schedule={p.schedule!r} orders a pipeline's passes: give pipeline > 1")
        return
    if backend != "torchrun":
        raise ValueError("a pipeline passes activations point to point, which Horovod cannot do: "
                         "use backend='torchrun'")
    schedules.check_schedule(p.schedule, sizes["pipeline"], p.micro_batches, 1)
    m = spec.model
    if m.kind != "transformer":
        stages.check_stages(build_model(m.kind, m.width, depth=m.depth), sizes["pipeline"])
        return
    pieces = m.depth + 2                  # the embedding, every block, the read-out
    if sizes["pipeline"] > pieces:
        raise ValueError(f"{sizes['pipeline']} pipeline stages but the model has {pieces} pieces (the embedding, "
                         f"{m.depth} blocks, the read-out): use at most {pieces} stages, or more blocks (depth)")
