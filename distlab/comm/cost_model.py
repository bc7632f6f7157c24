"""Fitting the alpha-beta model to this machine, and reading the message logs of real runs.

Introduced in lesson 03 (``notebooks/03_combining_gradients.ipynb``).  The model itself, what a
message, a step and a whole all-reduce cost, is ``predict.alpha_beta``; this module gives it its
numbers and checks it against what the ranks did.

We measure all three prices on this machine: a *ping-pong* (rank 0 sends, rank 1 sends it
straight back: half the round trip is one message) gives alpha and beta, a timed ``add_`` gives
gamma.  On one machine the price of a byte is not one number: data that fits in the CPU's caches
is copied and added faster than data that does not, so ``fit_link`` fits a second line to
measurements of ``LARGE`` (4 MB) and more (``Link.large``, ``Link.large_add``).

``lanes``, how many messages the hardware moves at full speed at once: on a cluster every rank
has its own link (``lanes=None``).  On one machine the "network" is the CPU cores copying bytes,
and one message already keeps two cores busy (one copies out, the other copies in).  We measure
``lanes`` by timing two messages sent at once (ranks 0 and 1 to each other) side by side with
the same two messages one after the other (a round trip): 1 on our 2-core machine, so there a
ring's N simultaneous messages take turns.
"""
from __future__ import annotations

import torch

from ..predict.alpha_beta import LARGE, Link

BASELINE = "gloo"        # dist.all_reduce: what the hand-written algorithms are timed against
PHASE_ORDER = ("reduce", "push", "reduce-scatter", "all-gather", "pull", "broadcast")


def fit_line(x, y, *, relative: bool = True) -> tuple[float, float]:
    """Intercept and slope of ``y = a + b x``, fitted for *relative* error.

    Plain least squares would let the largest messages decide everything; weighting each
    point by 1/y makes a 10 us message count as much as a 10 ms one, so alpha comes from
    the small messages and beta from the big ones.  A time cannot start below zero, so the
    intercept is clamped at 0.

    ``relative=False`` is for the large-data lines: plain least squares, so the biggest
    messages (the ones whose milliseconds matter) decide, and no clamp: such a line only
    holds to the right of its knee and may start below zero.
    """
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if len(x) < 2 or len(x) != len(y) or (y <= 0).any():
        raise ValueError("need at least two (size, positive time) pairs")
    weight = 1 / y if relative else torch.ones_like(y)
    design = torch.stack([torch.ones_like(x), x], 1) * weight[:, None]
    coef = torch.linalg.lstsq(design, (y * weight)[:, None]).solution.flatten()
    return (max(coef[0].item(), 0.0) if relative else coef[0].item()), coef[1].item()


def fit_link(ping_pong: dict, add: dict | None = None) -> Link:
    """Lesson 03: ``Link`` from a ping-pong and an add measurement (see ``measure``).

    ``lanes`` compares two messages sent at once (``exchange_seconds``) with the same two sent one
    after the other (``round_trip_seconds``), timed side by side: the model prices the pair at
    ``round trip / lanes``, so if the pair takes as long as one message, two lanes; as long as
    two, one lane (a whole number, at least one: the median over sizes, rounded).  Compared with
    the model's one-message price instead (lines fitted to ping-pongs timed at another moment, so
    beta's noise entered it), the estimate spread twice as wide (0.8-2.4 against 0.95-1.9 in 20
    launches, both centred on 1.2) and tipped to 2 twice as often, halving the ring's predicted
    time, while the ring of 1e6 floats on 2 ranks ran only 1.1-1.2 times faster than the same
    ring taking turns (issue 39).

    With two or more measurements of ``LARGE`` bytes or more (and two smaller ones), the large
    ones fit a line of their own (``large``, ``large_add``): one straight line through 8 bytes
    and 40 MB fits neither end (on our machine it predicted 10 ms for a 40 MB message that
    took 17 ms, and adding 40 MB took twice what the small adds foretold).
    """
    alpha, beta, large = _two_lines(ping_pong["bytes"], ping_pong["seconds"])
    gamma, large_add = 0.0, None
    if add:
        _, gamma, large_add = _two_lines(add["bytes"], add["seconds"])
    link = Link(alpha, beta, gamma, 1, large, large_add)
    pairs = [trip / together for together, trip in
             zip(ping_pong.get("exchange_seconds", []), ping_pong.get("round_trip_seconds", []))]
    link.lanes = max(1, round(sorted(pairs)[len(pairs) // 2])) if pairs else 1
    return link


def _two_lines(sizes, seconds):
    """(intercept, slope) of the small sizes, and the large sizes' (intercept, slope) or None."""
    large = [(b, t) for b, t in zip(sizes, seconds) if b >= LARGE]
    small = [(b, t) for b, t in zip(sizes, seconds) if b < LARGE]
    if len(large) < 2 or len(small) < 2:
        return (*fit_line(sizes, seconds), None)
    return (*fit_line(*zip(*small)), fit_line(*zip(*large), relative=False))


# ---------------------------------------------------------------------------------------------
# reading what the real runs recorded (message logs, timings)
# ---------------------------------------------------------------------------------------------
def merge_logs(logs: list[list[dict]]) -> list[dict]:
    """Lesson 03: all ranks' message logs as one list, in the order the messages happened."""
    messages = [m for log in logs for m in log]
    return sorted(messages, key=lambda m: (PHASE_ORDER.index(m["phase"]), m["step"], m["dst"]))


def bytes_sent(messages: list[dict], world_size: int) -> list[int]:
    """Lesson 03: how many bytes each rank sent, from a merged message log."""
    sent = [0] * world_size
    for m in messages:
        sent[m["src"]] += m["bytes"]
    return sent


def best(times: list[float]) -> float:
    """The fastest repetition: on a shared machine, the one least disturbed by others."""
    return min(times)
