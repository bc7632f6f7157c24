"""The arithmetic exercises of lesson 15 (where the time goes), checked as ``exercises.py`` checks the others
(``checking.check``: a placeholder is "not answered yet", a wrong answer is told why).  The expected values
come from ``predict``, the formulas the lesson's measurements are compared with, never typed in.  Lesson
15's build-it exercise (buckets sent during backward) is ``exercises_overlap``.
"""
from __future__ import annotations

from ..predict import bubbles
from ..predict import overlap_conditions as oc
from .checking import check


def zb_h1_bubble(answer, *, stages: int, micro_batches: int) -> bool | None:
    """Lesson 15: ZB-H1's bubble fraction at ``stages`` and ``micro_batches``, with equal F, B and W."""
    p, m = stages, micro_batches
    expected = bubbles.zb_h1_bubble_fraction(p, m)
    return check("ZB-H1's bubble", answer, expected, hints={
        bubbles.bubble_fraction(p, m): "that is 1F1B's bubble: ZB-H1 fills two thirds of its idle slots with W passes.",
        (p - 1) / (3 * m): "that is the idle time over the busy time; the bubble is idle / (busy + idle).",
        bubbles.bubble_fraction(p, m) / 3: "a third of the idle *time*, not of the share: the share is idle / (busy "
                                           "+ idle), with 3m busy pass-times a stage.",
        (p - 1) / m: "that is 1F1B's idle time over its busy time, without W passes moved into the cool-down."},
        otherwise="idle (p - 1) pass-times against 3m busy ones (F, B and W each one pass): "
                  "(p - 1) / (3m + p - 1).")


def tokens_to_hide(answer, *, params: float, ranks: int, bandwidth: float, flops: float) -> bool | None:
    """Lesson 15: the fewest tokens per GPU for data parallelism's bf16 all-reduce (a ring, no latency) to last
    no longer than backward, at ``bandwidth`` bytes/s each way and ``flops`` FLOP/s."""
    expected = oc.min_tokens_data_parallel(params, ranks, oc.datasheet_link(bandwidth), flops, itemsize=2)
    ring = 2 * (ranks - 1) / ranks
    return check("tokens per GPU for the all-reduce to hide", answer, expected, tolerance=0.02, hints={
        flops / bandwidth / 2: "that is the FLOP/s over both directions' bandwidth (the scaling-book's W, for a ring "
                               "that sends both ways); this ring sends one way, each byte about twice: 2 (N - 1) / N "
                               "of the gradient.",
        ring * 2 * flops / bandwidth / 6: "backward is 4 FLOPs a parameter and token (twice the forward), not 6.",
        ring * 4 * flops / bandwidth / 4: "the gradients are bf16: 2 bytes a parameter, not 4."},
        otherwise="the all-reduce moves 2 (N - 1) / N x 2 bytes a parameter; backward computes 4 FLOPs a "
                  "parameter and token: tokens = 2 (N - 1) / N x 2 x flops / (4 x bandwidth).")
