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
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved")      # the ones pipeline.schedules writes out


def bubble_fraction(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """Lesson 06: the idle share of an ideal pipeline, ``(p - 1) / (v m + p - 1)``: GPipe and 1F1B
    (``v = 1``) and interleaved 1F1B with ``v = chunks`` chunks per rank (Narayanan et al. 2021,
    sections 2.2.1 and 2.2.2, as a share of all the time rather than of the ideal time)."""
    p, m, v = stages, micro_batches, chunks
    return (p - 1) / (v * m + p - 1)


def held_micro_batches(schedule: str, stages: int, micro_batches: int, stage: int, chunks: int = 1) -> int:
    """Lesson 06: the most (micro-batch, chunk) activations stage ``stage`` keeps at once.

    GPipe: all ``m``.  1F1B: its ``p - 1 - s`` warm-up forwards and one more, ``min(p - s, m)``.
    Interleaved: the same count over its longer warm-up, ``2 (p - 1 - s) + (v - 1) p`` forwards
    (Megatron-LM's order), each one chunk's activations, ``1/v`` of a stage's share of a
    micro-batch.  ``pipeline.schedules.held_activations`` counts the same from the op lists."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    p, m, v, s = stages, micro_batches, chunks, stage
    if schedule == "gpipe":
        return m
    warmup = p - 1 - s if schedule == "1f1b" else 2 * (p - 1 - s) + (v - 1) * p
    return min(warmup + 1, m * v)
