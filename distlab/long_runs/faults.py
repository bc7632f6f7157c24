"""Failing on purpose: make one rank die, raise or hang at a chosen step, to see what the job does.

Introduced in lesson 10 (failure is normal at scale).  Large jobs test their recovery the way
they will need it: by breaking something on purpose (chaos testing).  ``fault`` is a dict
``{"kind": ..., "rank": r, "step": s}``, given to ``distlab.launch(..., fault=...)`` or in a run
config's ``fault`` section; rank ``r`` then, in step ``s`` (the one training loop, ``loop.train_steps``,
calls ``maybe_fail`` once its mini-batch is taken, just before the strategy's step, whatever the
strategy), while the others wait for it in the step's first message (an all-reduce, a pipeline
receive):

=========  ===========================================================================
``kill``   is killed by SIGKILL, as the out-of-memory killer or a lost machine would
``raise``  raises an exception, as a bug or a bad batch would
``hang``   stops answering (sleeps), as a deadlock or a stuck file system would: only
           the others' collective timeout can end the job
``exit``   exits with code 3 at once, as a process that calls ``sys.exit`` in a library
=========  ===========================================================================

Only in the job's first life: after an elastic restart (``metrics.restart_count() > 0``) the
same step runs again and must succeed, or the job would fail forever.
"""
from __future__ import annotations

import os
import signal
import time

from .metrics import restart_count

KINDS = ("kill", "raise", "hang", "exit")


class InjectedFault(RuntimeError):
    """The exception a ``raise`` fault raises (so that a test can tell it from a real bug)."""


def check_fault(fault, world_size: int) -> None:
    """Lesson 10: ``fault`` is None or ``{"kind", "rank", "step"}``, checked before any process starts."""
    if fault is None:
        return
    if not isinstance(fault, dict) or set(fault) != {"kind", "rank", "step"}:
        raise ValueError(f"fault must be a dict with kind, rank and step, e.g. "
                         f"{{'kind': 'kill', 'rank': 1, 'step': 5}}, got {fault!r}")
    if fault["kind"] not in KINDS:
        raise ValueError(f"fault kind must be one of {', '.join(KINDS)}, got {fault['kind']!r}")
    if not isinstance(fault["rank"], int) or not 0 <= fault["rank"] < world_size:
        raise ValueError(f"fault rank {fault['rank']!r} is not a rank of this job (0 to {world_size - 1})")
    if not isinstance(fault["step"], int) or fault["step"] < 0:
        raise ValueError(f"fault step must be a step number (0 or more), got {fault['step']!r}")


def maybe_fail(worker, step: int) -> None:
    """Lesson 10: called by the one training loop at every step, before the strategy's step; fails if told to."""
    fault = getattr(worker, "fault", None)
    if not fault or worker.rank != fault["rank"] or step != fault["step"] or restart_count() > 0:
        return
    kind = fault["kind"]
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "raise":
        raise InjectedFault(f"a fault injected on purpose in rank {worker.rank} at step {step}")
    elif kind == "exit":
        os._exit(3)
    elif kind == "hang":
        while True:              # the launcher's SIGTERM (default action) ends it
            time.sleep(1)
