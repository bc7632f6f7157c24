"""The arithmetic exercises of lesson 14 (fitting more: precision, recomputation and offload), checked as
``exercises.py`` checks the others (``checking.check``: a placeholder is "not answered yet", a wrong answer
is told why).  The expected values come from ``predict``, the functions the lesson's counted bytes are
checked against, never typed in.  Lesson 14's build-it exercise (a loss scaler) is ``exercises_precision``.
"""
from __future__ import annotations

from ..predict import activations as A
from ..predict import memory as M
from ..sequence.transformer import TransformerConfig
from .checking import check

PARAMS = 7e9


def zero1_mixed_bytes(answer, *, ranks: int) -> bool | None:
    """Lesson 14: bytes per parameter on one rank, Adam and bf16 master weights, ZeRO-1 over ``ranks``."""
    expected = M.per_rank(PARAMS, ranks, stage=1, optimizer="adam", precision="mixed").total / PARAMS
    return check("bytes per parameter with ZeRO-1", answer, expected, hints={
        16: "that is one whole copy: ZeRO-1 shards the master copy and Adam's moments over the ranks.",
        16 / ranks: "ZeRO-1 shards only the optimizer's part: the bf16 parameters and gradients stay whole.",
        2 + 2 + 4 + 8 / ranks: "the fp32 master copy belongs to the optimizer's state too, and is sharded with it.",
        2 + 2 + 8 / ranks: "count the fp32 master copy too: it is what the optimizer updates.",
        4 + 4 + (4 + 8) / ranks: "with bf16 master weights the parameters and gradients are 2 bytes each."},
        otherwise="2 (bf16 parameters) + 2 (bf16 gradients) + (4 master + 8 Adam) / ranks.")


def selective_saving(answer, *, batch: int, tokens: int, heads: int, width: int = 64) -> bool | None:
    """Lesson 14: the bytes one block of the line reader no longer keeps with selective recomputation."""
    cfg = TransformerConfig(d_model=width, heads=heads, layers=1, max_digits=tokens // 16)
    kept = {mode: A.transformer_activation_bytes(cfg, batch, tokens, recompute=mode)["total"]
            for mode in ("none", "selective")}
    expected = kept["none"] - kept["selective"]
    probabilities = heads * batch * tokens * tokens
    return check("bytes selective recomputation saves", answer, expected, hints={
        probabilities: "count bytes, not numbers: each fp32 number takes 4.",
        2 * probabilities: "fp32 numbers take 4 bytes each, not 2.",
        batch * tokens * tokens: "one probability per query, key and head: times the heads too."},
        otherwise="heads x lines x tokens x tokens probabilities, 4 bytes each.")
