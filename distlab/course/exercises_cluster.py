"""The exercises of lesson 09 (from laptop to cluster), checked as ``exercises.py`` checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.
"""
from __future__ import annotations

from .checking import check


def global_rank(answer, node: int, local_rank: int, processes_per_node: int) -> bool | None:
    """Lesson 09: torchrun's global rank for local rank ``local_rank`` of node ``node`` (node by node)."""
    return check("global rank", answer, node * processes_per_node + local_rank, hints={
        local_rank: "that is its local rank; which ranks do the nodes before it hold?",
        local_rank * processes_per_node + node: "node by node: all of node 0's ranks come first.",
        node + local_rank: "node 0 holds processes_per_node ranks, not one."},
        otherwise="node n's ranks start after the n x processes_per_node ranks of the nodes before it.")


BROKEN_CONFIG = {"model": {"kind": "mlp", "width": 64}, "training": {"steps": 100, "global_batch_size": 100},
                 "launch": {"nodes": 2, "processes_per_node": 4}}

def fix_the_config(answer) -> bool | None:
    """Lesson 09: ``--set`` overrides that make ``BROKEN_CONFIG`` valid, on its 8 ranks, batch within 10% of 100."""
    from ..cluster.config import ConfigError, RunConfig

    if answer is ...:
        return check("fix the config", ..., None)
    try:
        fixed = RunConfig.parse(BROKEN_CONFIG, list(answer))
    except ConfigError as err:
        return print(f"fix the config: still refused:\n{err}") or False
    batch, ranks = fixed.training.global_batch_size, fixed.launch.world_size
    why = ("keep the 2 nodes x 4 processes; change the batch instead" if ranks != 8 else
           f"a batch of {batch} changes the training; stay within 10% of 100" if abs(batch - 100) > 10 else "")
    print(f"fix the config: not quite: {why}." if why else f"fix the config: correct ({batch // 8} samples per rank).")
    return not why
