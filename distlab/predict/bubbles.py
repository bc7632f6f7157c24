"""A pipeline's idle share, and the activations each stage holds, for every schedule of the course.

Introduced in lesson 06 ("Splitting the model"); ``pipeline.schedules`` writes the schedules out
as data and simulates them, and the lesson measures them on real ranks; these are their closed
forms, which the simulation and the measurement are compared with.

With ``p`` stages, ``m`` micro-batches and equal passes, a stage works ``m`` passes' worth and
waits ``p - 1`` while the pipe fills and drains.  Narayanan et al. 2021 ("Efficient large-scale
language model training on GPU clusters using Megatron-LM", section 2.2.1) give the bubble as
``(p - 1) / m`` of the ideal time, for GPipe (Huang et al. 2019) and 1F1B alike; the course
prints it as a share of *all* the time, ``(p - 1) / (m + p - 1)``.  The interleaved schedule
(their section 2.2.2) gives each rank ``v`` chunks of the model, so each pass is ``v`` times
shorter while filling the pipe still takes ``p - 1`` of them: ``(p - 1) / (v m + p - 1)``.

What the schedules differ in is memory: GPipe runs every forward before any backward, so every
stage holds all ``m`` micro-batches' activations; 1F1B starts backwards as soon as it can, so
stage ``s`` holds at most ``p - s`` (Narayanan et al., section 2.2.1).

Lesson 15 ("Where the time goes") splits the backward into B (the gradient of a stage's input) and W
(its parameters'), with pass times ``T_F``, ``T_B``, ``T_W``.  Qi et al. 2023 ("Zero Bubble Pipeline
Parallelism", arXiv 2401.10241, section 2.1 and its comparison of 1F1B with the handcrafted
schedules) give the bubble *time* of 1F1B as ``(p - 1)(T_F + T_B + T_W)`` (its backward is B and W
together) and of ZB-H1 as ``(p - 1)(T_F + T_B - T_W)``: a third of 1F1B's when the three are equal,
which the paper's authors tabulate as a bubble rate of ``(p - 1) / 3m`` against 1F1B's ``(p - 1) / m``
(of the ideal time, ``m (T_F + T_B + T_W)``).  As a share of all the time, as the course prints it:
``zb_h1_bubble_fraction``.  Messages between stages cost time too: ``gpipe_bubble_with_messages``
is the closed form for GPipe; ``pipeline.zero_bubble`` predicts every schedule with them by simulation.
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb_h1")      # the ones pipeline.schedules writes out


def bubble_fraction(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """Lesson 06: the idle share of an ideal pipeline, ``(p - 1) / (v m + p - 1)``: GPipe and 1F1B
    (``v = 1``) and interleaved 1F1B with ``v = chunks`` chunks per rank (Narayanan et al. 2021,
    sections 2.2.1 and 2.2.2, as a share of all the time rather than of the ideal time)."""
    p, m, v = stages, micro_batches, chunks
    return (p - 1) / (v * m + p - 1)


def zb_h1_bubble_fraction(stages: int, micro_batches: int, forward: float = 1.0, backward: float = 1.0,
                          weight: float = 1.0) -> float:
    """Lesson 15: ZB-H1's idle share, ``(p - 1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W))``
    (Qi et al. 2023, section 2.1: the bubble time ``(p - 1)(T_F + T_B - T_W)``, here as a share of all the time).

    It holds for ``m >= p`` and ``T_W <= min(T_F, T_B)`` (checked against ``pipeline.schedules.simulate``):
    a longer W no longer fits the gaps it is meant to fill.  With equal passes: ``(p - 1) / (3m + p - 1)``,
    against 1F1B's ``(p - 1) / (m + p - 1)`` (``bubble_fraction``)."""
    p, m = stages, micro_batches
    if m < p or weight > min(forward, backward):
        raise ValueError(f"ZB-H1's formula holds for m >= p and T_W <= min(T_F, T_B); got p={p}, m={m}, "
                         f"T_F={forward}, T_B={backward}, T_W={weight}: simulate the schedule instead")
    idle = (p - 1) * (forward + backward - weight)
    return idle / (m * (forward + backward + weight) + idle)


def gpipe_bubble_with_messages(stages: int, micro_batches: int, forward: float, backward: float,
                               message: float) -> float:
    """Lesson 15: GPipe's idle share when every message between stages takes ``message`` seconds.

    The first micro-batch reaches the last stage after ``(p - 1)(T_F + c)``, and the last gradient
    gets back to stage 0 after ``(p - 1)(T_B + c)``: each stage works ``m (T_F + T_B)`` in a step of
    ``m (T_F + T_B) + (p - 1)(T_F + T_B + 2c)``.  With ``c = 0`` it is ``bubble_fraction``.  1F1B and
    ZB-H1 also wait for messages in their steady state (a stage there runs one pass ahead, not
    ``c`` ahead), so their message cost is simulated (``pipeline.zero_bubble.predicted``)."""
    p, m, c = stages, micro_batches, message
    idle = (p - 1) * (forward + backward + 2 * c)
    return idle / (m * (forward + backward) + idle)


def held_micro_batches(schedule: str, stages: int, micro_batches: int, stage: int, chunks: int = 1) -> int:
    """Lesson 06: the most (micro-batch, chunk) activations stage ``stage`` keeps at once.

    GPipe: all ``m``.  1F1B: its ``p - 1 - s`` warm-up forwards and one more, ``min(p - s, m)``.
    Interleaved: the same count over its longer warm-up, ``2 (p - 1 - s) + (v - 1) p`` forwards
    (Megatron-LM's order), each one chunk's activations, ``1/v`` of a stage's share of a
    micro-batch.  ZB-H1 (lesson 15): stage ``s`` holds back ``s`` W passes, each keeping its micro-batch,
    so every stage holds ``min(p, m)``: stage 0's 1F1B peak.  ``pipeline.schedules.held_activations``
    counts the same from the op lists."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    p, m, v, s = stages, micro_batches, chunks, stage
    if schedule == "gpipe":
        return m
    if schedule == "zb_h1":
        return min(p, m)
    warmup = p - 1 - s if schedule == "1f1b" else 2 * (p - 1 - s) + (v - 1) * p
    return min(warmup + 1, m * v)
