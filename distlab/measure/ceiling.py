"""How much faster can N ranks compute at all on this machine?  Ranks that never talk.

Introduced in lesson 05b (the time to a target accuracy on 1 and 2 ranks, against it), and used by
``bench/model_parallel.py`` and ``bench/more_data.py``.  A speedup below N has two
kinds of causes: what distributing adds (messages, waiting, a pipeline's bubble) and what the
machine cannot give.  Two virtual CPUs are not always two cores' worth of arithmetic: on many
cloud machines they are the two hyperthreads of *one* physical core, which share its
floating-point units, so two processes multiplying matrices at once each go at about half
speed.  Nothing a distributed algorithm does can beat that ceiling, so measure it first.

``compute_alone`` (a worker function) multiplies matrices of a given size, with no
communication at all, and returns how long it took; ``ceiling`` launches it on 1 rank, then on
N ranks at once (each bound to a core of its own, like every distlab job), and returns the
ratio of work done per second: N if the cores are independent, about 1 if they share one
core's arithmetic.
"""
from __future__ import annotations

import time

import torch


def compute_alone(worker, *, rows: int = 64, width: int = 1024, repeats: int = 200) -> float:
    """Lesson 05b (worker): seconds for ``repeats`` products of (rows x width) by (width x width)."""
    g = torch.Generator().manual_seed(worker.rank)
    a, b = torch.randn(rows, width, generator=g), torch.randn(width, width, generator=g)
    a @ b                                          # first call: allocation, library set-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return time.perf_counter() - t0


def ceiling(world_size: int = 2, *, rows: int = 64, width: int = 1024, repeats: int = 200,
            warm: bool = True) -> float:
    """Lesson 05b: work per second of ``world_size`` ranks computing at once over one rank alone."""
    from ..processes.launcher import launch

    settings = dict(rows=rows, width=width, repeats=repeats, progress="none", warm=warm)
    alone = launch(compute_alone, world_size=1, **settings)[0]
    together = max(launch(compute_alone, world_size=world_size, **settings))
    return world_size * alone / together
