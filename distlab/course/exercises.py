"""Exercises that ask: the lesson's cell holds ``...``, a checker here says what is right or wrong.

Introduced in lesson 00.  An exercise cell in a lesson starts with a placeholder
(``my_answer = ...``) and ends with one of the checkers below.  A checker

* given the placeholder, prints "not answered yet" and returns ``None``, so the lesson still
  runs from top to bottom (and under nbval) before anyone has answered;
* given a wrong answer, says what is wrong and what to look at, and returns ``False``;
* given a right one, confirms it and returns ``True``.

The expected values are computed from the same records and functions the lesson uses, never
typed in, so a checker stays right when a lesson changes its settings.  The answers, filled in,
live in ``course/solutions/`` (run by nbval like the lessons); ``tests/test_exercises.py``
checks that every checker accepts its solution and explains a typical wrong answer.
"""
from __future__ import annotations

import math

import torch

from .. import data
from ..comm import collectives
from ..models import build_model
from ..parallelize import mesh_3d as mesh
from ..pipeline import schedules
from ..predict import alpha_beta, bubbles, memory, traffic
from .checking import check, check_each


# --- lesson 00 --------------------------------------------------------------------------------
def digits_per_rank(answer, digits, world_size: int = 2, used: int | None = None) -> bool | None:
    """Lesson 00: how many training digits are in the shard of each of ``world_size`` ranks.

    ``used``: the digits a short run's steps drew on one rank (steps x per-rank batch), a common
    wrong answer: the shard is what a rank may draw from in an epoch, not what a few steps used."""
    n_all = digits.n_train + len(digits.y_test)
    held_back = "the test digits are held back: split only the training digits (digits.n_train)."
    hints = {digits.n_train: f"that is the whole training set; the {world_size} ranks share it.",
             n_all // world_size: held_back, math.ceil(n_all / world_size): held_back}
    if used is not None:
        hints.setdefault(used, "that is what the short run's steps used (steps x the batch on a rank); "
                               "the shard is all a rank may draw from in one epoch.")
    return check("digits per rank", answer, math.ceil(digits.n_train / world_size), hints=hints,
                 otherwise="divide digits.n_train between the ranks.")


# --- lesson 01 --------------------------------------------------------------------------------
def averaged_gradient(answer, local_gradients: list[torch.Tensor], expected: torch.Tensor) -> bool | None:
    """Lesson 01: the gradient every rank applied, from the ranks' local gradients."""
    n = len(local_gradients)
    if isinstance(answer, torch.Tensor) and answer.shape != expected.shape:
        print(f"averaged gradient: not quite. Shape {tuple(answer.shape)}, but out.weight's gradient has "
              f"shape {tuple(expected.shape)}: average over the ranks, not over the weights.")
        return False
    return check("averaged gradient", answer, expected, hints=[
        (n * expected, f"that is the sum of the {n} local gradients, {n} times too big: average them."),
        (local_gradients[0], "that is rank 0's own gradient: every rank applies the average of all of them.")],
        otherwise="stack the ranks' local gradients and take their mean over the ranks.", tolerance=1e-5)


def shards_of_three(answers, n: int, global_batch_size: int = 96, world_size: int = 3) -> bool | None:
    """Lesson 01: shard size, samples used twice, and steps per epoch for 3 ranks."""
    per_rank = math.ceil(n / world_size)
    expected = dict(samples_per_rank=per_rank, used_twice=per_rank * world_size - n,
                    steps_per_epoch=data.steps_per_epoch(n, world_size, global_batch_size // world_size))
    return check_each("three shards", answers, expected, hints=dict(
        samples_per_rank=f"every rank gets the same number: {n} / {world_size} rounded up.",
        used_twice="the shards together hold more than n samples: how many more?",
        steps_per_epoch=f"each rank's batch is the global batch / {world_size}, taken from its own shard."))


# --- lesson 02 --------------------------------------------------------------------------------
def fusion_in_numbers(answers, model_name: str, width: int) -> bool | None:
    """Lesson 02: all-reduces per step by hand, gradient bytes, bytes a ring rank sends at N = 4."""
    params = list(build_model(model_name, width).parameters())
    grad_bytes = 4 * sum(p.numel() for p in params)
    expected = dict(all_reduces_per_step=len(params), gradient_bytes=grad_bytes,
                    ring_bytes_sent_at_4=alpha_beta.bytes_per_rank("ring", 4, grad_bytes // 4)[0])
    return check_each("tensor fusion", answers, expected, hints=dict(
        all_reduces_per_step="by hand, one all-reduce per parameter tensor (weights and biases).",
        gradient_bytes="one float32 (4 bytes) per parameter.",
        ring_bytes_sent_at_4="a ring rank sends 2(N-1) chunks of 1/N of the gradient: 2(N-1)/N of it, "
                             "the whole gradient only at N = 2."))


def horovodrun_start(answer, expected_words: list[str]) -> bool | None:
    """Lesson 02: a horovodrun command for as many ranks as the library's own line (``expected_words``, which
    holds ``-np N``) on this machine with Gloo, in any correct spelling (``commands.horovodrun``)."""
    from .commands import horovodrun, read_horovodrun

    return horovodrun(answer, world_size=int(read_horovodrun(" ".join(expected_words))["np"]))


# --- lesson 03 --------------------------------------------------------------------------------
def ring_bytes(answer, world_size: int, numel: int) -> bool | None:
    """Lesson 03: bytes each rank of a ring sends to all-reduce ``numel`` float32 numbers."""
    whole = 4 * numel
    return check("ring bytes", answer, alpha_beta.bytes_per_rank("ring", world_size, numel)[0], hints={
        whole: "that is one whole tensor: count the reduce-scatter and the all-gather.",
        (world_size - 1) * whole: "that is what the parameter server sends: the ring sends chunks.",
        numel: "bytes, not numbers: a float32 is 4 bytes."},
        otherwise="2(N-1) steps, each sends one chunk of n/N numbers of 4 bytes.")


def fastest_on_cluster(answers, world_size: int, link: alpha_beta.Link) -> bool | None:
    """Lesson 03: the algorithm the model says is fastest, for a tiny and a huge gradient."""
    def fastest(numel):
        times = {a: alpha_beta.predict_time(a, world_size, numel, link) for a in collectives.ALGORITHMS}
        return min(times, key=times.get)

    expected = dict(fastest_small=fastest(100), fastest_big=fastest(100_000_000))
    return check_each("fastest on the cluster", answers, expected, hints=dict(
        fastest_small="for 100 floats, latency (alpha) is all that counts: which needs the fewest rounds?",
        fastest_big="for 100 million floats, bandwidth counts: which sends the fewest bytes per rank?"))


def identical_at_two(answer, link: alpha_beta.Link, numel: int = 1_000) -> bool | None:
    """Lesson 03: which algorithms the model prices identically on 2 ranks (a set of names).

    Computed from the model: the algorithms whose predicted time equals the naive one's."""
    times = {a: alpha_beta.predict_time(a, 2, numel, link) for a in collectives.ALGORITHMS}
    expected = {a for a, t in times.items() if math.isclose(t, times["naive"], rel_tol=1e-9)}
    return check("identical on 2 ranks", set(answer) if isinstance(answer, (list, tuple)) else answer,
                 expected, hints=[
                     (set(collectives.ALGORITHMS), "the ring cuts the tensor into N chunks: on 2 ranks it sends "
                      "four half-tensor messages and adds only half a tensor, so the model prices it "
                      "differently on any link."),
                     ({"naive", "parameter_server"}, "draw the tree for 2 ranks: how many levels has it?")],
                 otherwise="on 2 ranks, who sends what to whom? Look at the schedules for N = 2.")


# --- lesson 04 --------------------------------------------------------------------------------
def local_sgd_rounds(answer, measured: int, steps: int, k: int) -> bool | None:
    """Lesson 04: how often local SGD all-reduced its parameters in ``steps`` steps."""
    return check("local SGD rounds", answer, measured, hints={
        steps: "that is one per step: local SGD averages every k steps.",
        steps * k: "local SGD averages less often than every step, not more."},
        otherwise=f"count the steps with an all-reduce in the record: one every {k}.")


# --- lesson 05 --------------------------------------------------------------------------------
def allreduce_on_eight(answer, nbytes: int, messages: int, alpha: float, beta: float) -> bool | None:
    """Lesson 05: the alpha-beta time of one step's ring all-reduces on 8 ranks."""
    expected = alpha_beta.all_reduce_seconds(nbytes, 8, alpha, beta, messages=messages)
    return check("all-reduce on 8 ranks", answer, expected, hints={
        alpha_beta.all_reduce_seconds(nbytes, 8, alpha, beta, messages=1):
            f"each of the {messages} tensors pays the latency of its own 2(N-1) rounds.",
        2 * 7 * messages * alpha + nbytes * beta:
            "a ring rank sends 2(N-1)/N of the bytes, not all of them once."},
        otherwise="2(N-1) k alpha for the latency, plus 2(N-1)/N n beta for the bytes.", tolerance=1e-6)


# --- lesson 06 --------------------------------------------------------------------------------
def bubble_of(answer, stages: int, micro_batches: int) -> bool | None:
    """Lesson 06: the idle fraction of a GPipe or 1F1B pipeline of ``stages`` stages and
    ``micro_batches`` micro-batches (a fraction, e.g. 0.25, not 25)."""
    p, m = stages, micro_batches
    expected = bubbles.bubble_fraction(p, m)
    return check("pipeline bubble", answer, expected, tolerance=1e-3, hints={
        (p - 1) / m: "that is bubble time over *working* time; the fraction of all the time is (p-1)/(m+p-1).",
        (p - 1) / (m + p - 1) * 100: "as a fraction between 0 and 1, please, not a percentage.",
        1 / p: "that is the naive split's share of working time per stage, without micro-batches."},
        otherwise="each stage waits p - 1 passes' worth while the pipe fills and drains, and works m.")


def held_on_first_stage(answer, stages: int, micro_batches: int) -> bool | None:
    """Lesson 06: the most micro-batches whose activations 1F1B's first stage holds at once."""
    expected = schedules.held_activations(schedules.one_f_one_b(stages, micro_batches, 0))
    return check("1F1B activations on stage 0", answer, expected, hints={
        micro_batches: "that is GPipe (all forwards before any backward); 1F1B starts backwards sooner.",
        stages - 1: "count the warm-up forwards, p - 1, plus the one of the first steady-state pair."},
        otherwise="stage 0 runs p - 1 forwards ahead, then one more before its first backward.")


def activation_bytes(answer, batch: int, width: int, micro_batches: int, itemsize: int = 4) -> bool | None:
    """Lesson 06: bytes stage 0 of a 2-stage split of the MLP sends per step (its activations)."""
    expected = traffic.pipeline_bytes(batch, [width, 10], 0, itemsize=itemsize)
    return check("bytes stage 0 sends", answer, expected, hints={
        batch * width * itemsize // micro_batches: "that is one micro-batch; a step sends all m of them.",
        batch * width: "in bytes: each float32 number is 4 bytes.",
        2 * batch * width * itemsize: "stage 0 sends activations forward only; the gradients come back to it."},
        otherwise="each of the batch's samples leaves stage 0 as width numbers of 4 bytes.")


# --- lesson 07 --------------------------------------------------------------------------------
def tensor_parallel_bytes(answer, batch: int, width: int, itemsize: int = 4) -> bool | None:
    """Lesson 07: bytes one rank passes to all-reduce per step in the split block."""
    expected = sum(traffic.tensor_parallel_bytes(batch, width, itemsize=itemsize).values())
    return check("tensor-parallel bytes per step", answer, expected, hints={
        batch * width * itemsize: "that is the forward all-reduce only; backward all-reduces the input's gradient.",
        2 * batch * width: "in bytes: each float32 number is 4 bytes."},
        otherwise="one all-reduce of batch x width numbers forward, one backward.")


def rank_in_grid(answer, data: int, pipeline: int, tensor: int, where: dict) -> bool | None:
    """Lesson 07: the rank at ``where = {"data", "pipeline", "tensor"}`` in a reshaped grid."""
    ranks = mesh.grid(data, pipeline, tensor)
    expected = int(ranks[where["data"], where["pipeline"], where["tensor"]])
    d, p, t = where["data"], where["pipeline"], where["tensor"]
    data_fastest = d + data * (p + pipeline * t)          # the grid read the other way round
    return check("rank in the grid", answer, expected, hints={
        data_fastest: "the last axis (tensor) varies fastest: neighbours in a tensor group are consecutive ranks."},
        otherwise="rank = (d x pipeline + p) x tensor + t.")


def equal_traffic_batch(answer, width: int) -> bool | None:
    """Lesson 07: the batch at which the split block's all-reduces move as many bytes per step
    as data parallelism's all-reduce of every gradient (depth-3 MLP, float32)."""
    gradient = traffic.gradient_bytes("mlp", width, depth=3)
    expected = gradient / sum(traffic.tensor_parallel_bytes(1, width).values())
    return check("equal-traffic batch", answer, expected, tolerance=0.02, hints={
        gradient / (width * 4):
            "tensor parallelism all-reduces twice per step (forward and backward)."},
        otherwise="set 2 x batch x width x 4 equal to 4 x (the model's number of parameters) and solve.")


# --- lesson 08 --------------------------------------------------------------------------------
def bytes_per_rank(answer, params: int, world_size: int, stage: int, optimizer: str = "adam",
                   precision: str = "fp32") -> bool | None:
    """Lesson 08: the bytes of parameters, gradients and optimizer state one rank holds."""
    expected = memory.per_rank(params, world_size, stage=stage, optimizer=optimizer, precision=precision).total
    plain = memory.per_rank(params, world_size, stage=0, optimizer=optimizer, precision=precision).total
    return check("bytes per rank", answer, expected, tolerance=0.01, hints={
        plain: "that is plain data parallelism: every rank a full copy of everything.",
        plain / world_size: "that is everything sharded (stage 3); which parts does this stage shard?"},
        otherwise="per parameter: 4 bytes of weights, 4 of gradient, 8 of Adam's moments; divide by N what is sharded.")


def smallest_stage_that_fits(answer, params: float, world_size: int, budget_gb: float,
                             optimizer: str = "adam", precision: str = "mixed") -> bool | None:
    """Lesson 08: the lowest ZeRO stage (0 to 3) whose per-rank bytes fit ``budget_gb``; None if none does."""
    fits = [s for s in memory.STAGES if memory.per_rank(
        params, world_size, stage=s, optimizer=optimizer, precision=precision).total <= budget_gb * 1e9]
    expected = fits[0] if fits else None
    return check("smallest stage that fits", answer, expected, hints={
        3: "stage 3 fits, but does a lower one, with less communication, fit too?"} if expected != 3 else {},
        otherwise="compute the four totals and take the first under the budget (None if none is).")


def zero3_traffic_ratio(answer) -> bool | None:
    """Lesson 08: ZeRO-3's bytes sent per step over plain data parallelism's (any size, any N)."""
    expected = memory.zero_volume(1e9, 8, stage=3)["elements"] / memory.zero_volume(1e9, 8, stage=0)["elements"]
    return check("ZeRO-3 traffic", answer, expected, tolerance=1e-6, hints={
        1.0: "that is stages 1 and 2; stage 3 gathers the parameters a second time, for backward.",
        2.0: "the gradients are only reduce-scattered (half an all-reduce), not all-reduced."},
        otherwise="an all-reduce is a reduce-scatter plus an all-gather; stage 3 adds one more all-gather.")
