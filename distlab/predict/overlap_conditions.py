"""When communication can hide behind computation: the overlap conditions of data parallelism, ZeRO-3 and
tensor parallelism, evaluated from sizes, a link and a FLOP rate.

Introduced in lesson 15 (Where the time goes): the lesson measures how much of the gradients' all-reduce
backward hides on this machine (``measure.exposed``); this module says how much *could* hide, here and on
GPUs, before anything runs.  Communication sent while the accelerator computes costs nothing as long as it
ends first: a piece of communication is **hidden** when the computation it overlaps takes at least as long,
``compute >= communication``.  Every condition below is that inequality for one collective and the work it
can overlap; ``ratio = communication / compute``, hidden when ``ratio <= 1``.  (The closed forms quoted
below leave alpha out and give each rank its own link; the functions price the whole model.)

Both sides are priced as the course prices them.  Communication is lesson 03's alpha-beta model of a ring
collective (``alpha_beta.schedule`` and ``step_time``: ``alpha`` per message in turn, ``beta`` per byte),
so the latency term is in every condition.  Computation is FLOPs over an achieved (or datasheet) FLOP/s,
with the matmul rule: forward ``2 x parameters x tokens``, backward twice that (Kaplan et al. 2020,
section 2.1; ``flops`` counts it exactly).  A *token* is one vector through every weight: a sample of the
course's MLP, a token of a transformer.

Sources (the formulas are derived here, in bytes rather than elements and with alpha, following them):

* **Data parallelism**: Tazi et al. 2025, "The Ultra-Scale Playbook: Training LLMs on GPU Clusters",
  appendix A3 "Math for Compute/Communication Overlap", subsection "Data parallelism communication
  analysis": the gradients' ring all-reduce against the backward pass.  With ``b`` bytes per element and
  ``1/beta`` the bandwidth, ``ratio = (N-1)/N x b x FLOP/s x beta / (2 x tokens)``, the parameters
  cancelling (the Playbook's printed ratio still carries a factor ``num_params``, and counts elements).
  Austin et al. 2025, "How to Scale Your Model", part 5 "How to Parallelize a Transformer for Training",
  section "Data Parallelism" ("When do we become bottlenecked by communication?"), states the same
  condition as ``B / X > C / W``: compute-bound when the tokens per chip exceed the chip's FLOP/s over its
  (bidirectional) bandwidth, 2,550 tokens for a TPU v5p; ``min_tokens_data_parallel`` solves for it.
* **ZeRO-3 / FSDP**: the Playbook's A3, "ZeRO-3 (FSDP) communication analysis": the all-gather of the next
  layer's parameters against the current layer's forward: ``ratio = (N-1)/N x b x FLOP/s x beta /
  (2 x tokens)``, the layer size cancelling.  Backward gathers again and reduce-scatters (twice the bytes)
  against twice the FLOPs: the same ratio.  Austin et al., section "Fully-Sharded Data Parallelism":
  "the same as data parallelism".
* **Tensor parallelism** (with sequence parallelism): the Playbook's A3, "TP communication analysis": the
  all-gather of a region's input (``tokens x d_model``) against the next linear's matmul, its weights split
  ``TP`` ways: ``ratio = (TP-1) x b x FLOP/s x beta / (2 x d_out)``, whatever the tokens (``d_out = d_model``
  for the Playbook's ``h x h`` linear).  Hiding it needs the matmul cut into chunks that start as their
  rows arrive (Wang et al. 2023, "Overlap communication with dependent computation via decomposition").
* **Latency amortised**: a message of ``n`` bytes spends half its time on ``alpha`` when ``n = alpha /
  beta``, Hockney's ``n_1/2`` (Hockney 1994, "The communication challenge for MPP"); ``amortizing_bytes``
  gives the bucket or layer that keeps latency below a chosen share of a collective.
"""
from __future__ import annotations

import math
from dataclasses import replace

from .alpha_beta import COLLECTIVES, Link, schedule, step_time

# Per-message latencies of a GPU ring, for the links a datasheet gives no latency for: NCCL's own cost model
# (src/graph/tuning.cc, ``hwLat``, ring with the Simple protocol, in the version of 2020 stored at commit
# 01afd20) charges 3.4 us a ring step over NVLink and 9.6 us over the network.
NVLINK_ALPHA = 3.4e-6
NETWORK_ALPHA = 9.6e-6
PLACES = ("this machine", "an {gpu} node", "across {gpu} nodes")


def _positive(name: str, value: float) -> None:
    """Lesson 15: refuse a size, rate or count that is not a positive finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _world(name: str, value: int) -> None:
    """Lesson 15: refuse a degree of parallelism that is not a whole number of ranks."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer (ranks), got {value!r}")


def _check_link(link: Link) -> None:
    """Lesson 15: a link the conditions can price with: alpha zero or more, a positive finite beta."""
    if not (isinstance(link.alpha, (int, float)) and 0 <= link.alpha < math.inf):
        raise ValueError(f"the link's alpha must be zero or more seconds, got {link.alpha!r}")
    if not (isinstance(link.beta, (int, float)) and 0 < link.beta < math.inf):
        raise ValueError(f"the link's beta must be positive seconds per byte (a bandwidth above zero), "
                         f"got {link.beta!r}")


def datasheet_link(bandwidth: float, alpha: float = 0.0) -> Link:
    """Lesson 15: lesson 03's ``Link`` for a datasheet's figure: ``bandwidth`` bytes/s *each way* per GPU (half
    NVLink's quoted total, which counts both directions; a NIC's rate), ``alpha`` seconds a message, one link
    per rank, no adding cost (a GPU adds far faster than it sends)."""
    _positive("bandwidth", bandwidth)
    if not (isinstance(alpha, (int, float)) and 0 <= alpha < math.inf):
        raise ValueError(f"alpha must be zero or more seconds, got {alpha!r}")
    return Link(alpha=alpha, beta=1.0 / bandwidth, gamma=0.0, lanes=None)


def collective_seconds(link: Link, nbytes: float, world_size: int, collective: str = "all_reduce",
                       messages: int = 1) -> float:
    """Lesson 15: seconds of a ring ``collective`` of ``nbytes`` over ``world_size`` ranks on ``link``, sent as
    ``messages`` equal collectives (buckets): the steps of lesson 03's ring schedule (an all-reduce is a
    reduce-scatter then an all-gather), each priced by ``alpha_beta.step_time``; nothing written again."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    _world("world_size", world_size)
    _world("messages", messages)
    _check_link(link)
    if nbytes < 0:
        raise ValueError(f"nbytes must be zero or more, got {nbytes!r}")
    steps = schedule("ring", world_size, nbytes / messages, 1, whole=False)
    return messages * sum(step_time(s, link, world_size) for s in steps if s["phase"] in COLLECTIVES[collective])


def _verdict(compute_s: float, comm_s: float) -> dict:
    """Lesson 15: the record of one condition: both times, their ratio, and whether compute covers the other."""
    return {"compute_s": compute_s, "comm_s": comm_s, "ratio": comm_s / compute_s, "hidden": compute_s >= comm_s}


def data_parallel_overlap(params: float, tokens: float, world_size: int, link: Link, flops: float,
                          itemsize: int = 4, bucket_bytes: float | None = None) -> dict:
    """Lesson 15: can data parallelism's gradient all-reduce hide behind backward?

    Compute: backward on this rank's ``tokens``, ``4 x params x tokens`` FLOPs at ``flops`` FLOP/s.
    Communication: a ring all-reduce of ``params x itemsize`` bytes over ``world_size`` ranks, in buckets of
    ``bucket_bytes`` (``None``: one message; PyTorch's DDP sends 25 MB).  Without alpha the ratio is
    ``(N-1)/N x itemsize x flops x beta / (2 x tokens)`` (the Playbook's appendix A3, "Data parallelism
    communication analysis", derived here in bytes).  Even when hidden, the last bucket, filled as backward
    ends, still shows."""
    for name, value in (("params", params), ("tokens", tokens), ("itemsize", itemsize), ("flops", flops)):
        _positive(name, value)
    nbytes = params * itemsize
    buckets = 1
    if bucket_bytes is not None:
        _positive("bucket_bytes", bucket_bytes)
        buckets = max(1, math.ceil(nbytes / bucket_bytes))
    comm = collective_seconds(link, nbytes, world_size, "all_reduce", buckets)
    return _verdict(4 * params * tokens / flops, comm)


def zero3_overlap(layer_params: float, tokens: float, world_size: int, link: Link, flops: float,
                  itemsize: int = 2) -> dict:
    """Lesson 15: can ZeRO-3 (FSDP) gather the next layer's parameters while the current layer computes?

    Compute: one layer's forward on this rank's ``tokens``, ``2 x layer_params x tokens`` FLOPs.
    Communication: a ring all-gather of the layer's ``layer_params x itemsize`` bytes over ``world_size``
    ranks (each holds 1/N).  Without alpha, ``(N-1)/N x itemsize x flops x beta / (2 x tokens)``, the same
    as data parallelism's (the Playbook's appendix A3, "ZeRO-3 (FSDP) communication analysis"); backward
    (a gather and a reduce-scatter against twice the FLOPs) gives the same ratio, its alphas twice as many
    against twice the work."""
    for name, value in (("layer_params", layer_params), ("tokens", tokens), ("itemsize", itemsize),
                        ("flops", flops)):
        _positive(name, value)
    comm = collective_seconds(link, layer_params * itemsize, world_size, "all_gather")
    return _verdict(2 * layer_params * tokens / flops, comm)


def tensor_parallel_overlap(tokens: float, d_model: int, tensor: int, link: Link, flops: float,
                            itemsize: int = 2, d_out: int | None = None) -> dict:
    """Lesson 15: can tensor parallelism's all-gather (sequence parallelism's, before a split region) hide
    behind the linear that needs it?

    Compute: the linear's matmul, ``tokens x d_model x d_out`` multiply-adds split ``tensor`` ways,
    ``2 x tokens x d_model x d_out / tensor`` FLOPs (``d_out`` defaults to ``d_model``: the Playbook's
    ``h x h`` linear, the smallest of a block).  Communication: a ring all-gather of the ``tokens x d_model``
    activation over ``tensor`` ranks.  Without alpha, ``(TP-1) x itemsize x flops x beta / (2 x d_out)``,
    independent of the tokens (the Playbook's appendix A3, "TP communication analysis"); the reduce-scatter
    after the region is the mirror image.  Only the latency term makes few tokens worse."""
    d_out = d_model if d_out is None else d_out
    for name, value in (("tokens", tokens), ("d_model", d_model), ("d_out", d_out), ("itemsize", itemsize),
                        ("flops", flops)):
        _positive(name, value)
    _world("tensor", tensor)
    comm = collective_seconds(link, tokens * d_model * itemsize, tensor, "all_gather")
    return _verdict(2 * tokens * d_model * d_out / tensor / flops, comm)


def min_tokens_data_parallel(params: float, world_size: int, link: Link, flops: float, itemsize: int = 2,
                             bucket_bytes: float | None = None) -> float:
    """Lesson 15: the fewest tokens per rank for which backward (``4 x params x tokens`` FLOPs) lasts as long
    as the gradients' all-reduce: more, and data parallelism hides its communication.

    Without alpha and for many ranks, ``itemsize x flops x beta / 2``: in bf16, the FLOP/s over the
    bandwidth, the ``B / X > C / W`` of Austin et al. 2025 ("How to Scale Your Model", "How to Parallelize
    a Transformer for Training", section "Data Parallelism"), where ``W``, bidirectional, is the rate a
    TPU's ring moves its bytes in both directions at once."""
    verdict = data_parallel_overlap(params, 1, world_size, link, flops, itemsize, bucket_bytes)
    return verdict["comm_s"] / verdict["compute_s"]      # compute grows with the tokens, comm does not


def amortizing_bytes(link: Link, world_size: int = 2, collective: str = "all_reduce",
                     latency_share: float = 0.5) -> float:
    """Lesson 15: the smallest bucket (or layer) in bytes whose ring ``collective`` over ``world_size`` ranks
    spends at most ``latency_share`` of its time on alpha.

    The ring's latency (its steps' alphas) does not grow with the bytes, its bandwidth term does, so the
    bytes that give ``latency = share x (latency + bandwidth term)`` are ``latency x (1 - share) / (share x
    seconds per byte)``.  For one message at ``share = 1/2`` that is ``alpha / beta``, Hockney's ``n_1/2``;
    a ring of N ranks cuts a bucket into N chunks, so a bucket needs about N times as much."""
    _check_link(link)
    if not (isinstance(latency_share, (int, float)) and 0 < latency_share < 1):
        raise ValueError(f"latency_share must lie strictly between 0 and 1, got {latency_share!r}")
    _world("world_size", world_size)
    if world_size == 1:
        return 0.0                                        # one rank sends nothing: no latency to amortise
    latency = collective_seconds(link, 0, world_size, collective)
    plain = replace(link, alpha=0.0, gamma=0.0, large=None, large_add=None)   # the small-message slope only
    per_byte = collective_seconds(plain, 1, world_size, collective)
    return latency * (1 - latency_share) / (latency_share * per_byte)


def where_it_hides(link: Link, flops: float, *, params: float, layer_params: float, d_model: int,
                   tokens: float, degree: int, gpu, itemsize: int = 4, bucket_bytes: float | None = None,
                   nvlink_alpha: float = NVLINK_ALPHA, network_alpha: float = NETWORK_ALPHA) -> list[dict]:
    """Lesson 15: the table the lesson prints: for data parallelism, ZeRO-3 and tensor parallelism at
    ``degree`` ranks, the same model and tokens per rank, whether the communication can hide on this
    machine (the learner's ``link`` and ``flops``), on one node of ``gpu`` (NVLink) and across nodes
    (one NIC per GPU).

    ``gpu`` is anything with ``name``, ``bf16_flops``, ``link_bandwidth`` (NVLink, both directions) and
    ``network_bandwidth`` (each way), such as ``measure.roofline.HARDWARE["H100 SXM"]``; its datasheet peak
    is the hardest case for hiding (a real run at 40% of it hides 2.5 times as easily).  ``params``: the
    whole model (DP); ``layer_params``: one repeated layer (ZeRO-3); ``d_model``: the width a
    tensor-parallel region gathers.  Each row: ``{"parallelism", "hidden behind", <place>: hidden?, ...,
    "ratio": {<place>: communication / compute}}``."""
    _check_link(link)
    short = gpu.name.split()[0]
    machines = dict(zip((p.format(gpu=short) for p in PLACES),
                        ((link, flops), (datasheet_link(gpu.link_bandwidth / 2, nvlink_alpha), gpu.bf16_flops),
                         (datasheet_link(gpu.network_bandwidth, network_alpha), gpu.bf16_flops))))
    conditions = (
        ("data parallel", "backward",
         lambda lk, f: data_parallel_overlap(params, tokens, degree, lk, f, itemsize, bucket_bytes)),
        ("ZeRO-3", "the previous layer's compute",
         lambda lk, f: zero3_overlap(layer_params, tokens, degree, lk, f, itemsize)),
        ("tensor parallel", "the next linear's matmul",
         lambda lk, f: tensor_parallel_overlap(tokens, d_model, degree, lk, f, itemsize)),
    )
    rows = []
    for name, behind, condition in conditions:
        verdicts = {place: condition(lk, f) for place, (lk, f) in machines.items()}
        rows.append({"parallelism": name, "hidden behind": behind,
                     **{place: v["hidden"] for place, v in verdicts.items()},
                     "ratio": {place: v["ratio"] for place, v in verdicts.items()}})
    return rows
