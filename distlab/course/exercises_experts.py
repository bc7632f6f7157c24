"""The exercises of lesson 13 (experts: a bigger model for the same compute), checked as ``exercises.py``
checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.  The expected
values come from the functions the lesson's ranks are checked against, never typed in.
"""
from __future__ import annotations

import math

from ..predict.traffic import Experts, capacity
from .checking import check


def capacity_slots(answer, *, tokens: int, experts: int, top_k: int, capacity_factor: float) -> bool | None:
    """Lesson 13: how many of a group's ``tokens`` requests one expert takes at most."""
    expected = capacity(tokens, Experts(experts, top_k, capacity_factor))
    return check("an expert's capacity", answer, expected, hints={
        math.ceil(capacity_factor * tokens / experts): "each token asks k experts: the requests are tokens x k.",
        math.ceil(tokens * top_k / experts): "that is the fair share; the capacity factor gives each expert room "
                                             "beyond it.",
        math.floor(capacity_factor * tokens * top_k / experts): "round up: a capacity of a fraction of a token "
                                                                "still needs a whole slot."},
        otherwise="factor x tokens x k / experts, rounded up.")


def crossing_tokens(answer, *, tokens: int, top_k: int, ranks: int) -> bool | None:
    """Lesson 13: the requests one rank sends to other ranks in one dispatch, if the router spreads its
    ``tokens`` evenly over experts spread evenly over ``ranks`` ranks (nothing dropped)."""
    expected = tokens * top_k * (ranks - 1) // ranks
    return check("tokens that cross ranks", answer, expected, hints={
        tokens * (ranks - 1) // ranks: "with k = 2 each token goes to two experts: two requests a token.",
        tokens * top_k: "the requests for this rank's own experts never leave it.",
        2 * tokens * top_k * (ranks - 1) // ranks: "that is there and back: count one dispatch only."},
        otherwise="tokens x k requests, of which the share for the other ranks' experts, (ranks - 1) / ranks, leave.")


def active_parameters(answer, *, d_model: int, hidden: int, experts: int, top_k: int) -> bool | None:
    """Lesson 13: the parameters of one MoE layer that one token's output goes through (router included)."""
    expert = 2 * d_model * hidden + hidden + d_model             # fc1 and fc2, weights and biases
    router = d_model * experts                                   # no bias
    expected = top_k * expert + router
    return check("parameters a token uses", answer, expected, hints={
        experts * expert + router: "that is the whole layer: a token goes through its k experts only.",
        top_k * expert: "every token goes through the router too.",
        top_k * 2 * d_model * hidden + router: "the experts' layers have biases as well as weights."},
        otherwise="k experts (two linear layers, weights and biases) and the router (d_model x experts, no bias).")
