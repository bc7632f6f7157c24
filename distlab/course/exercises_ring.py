"""Lesson 03's build-it exercise: the learner's ring all-reduce, on real ranks, against ``dist.all_reduce``.

Introduced in lesson 03.  The learner writes ``ring(tensor, worker)`` (reduce-scatter, then
all-gather, over N chunks, with ``worker.exchange``); ``ring_task`` runs it on every rank of a real
job on lesson 03's demonstration numbers (rank r holds (i+1)*10**r, so a digit of a sum says whose
numbers it holds) and on random numbers, next to ``dist.all_reduce`` on the same inputs.  The
checker compares each rank's chunks through ``distlab.compare`` and names the first wrong rank and
chunk, and which ranks' numbers that chunk holds, is missing or holds twice.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..comm.collective_runs import demo_values
from ..stepwise import compare
from . import build

NUMEL = 10           # 3 ranks: chunks of 4, 3 and 3 numbers (tensor_split), so chunk arithmetic shows


def ring_task(worker, fn, numel: int = NUMEL):
    """Lesson 03 (on each rank): the learner's ring and ``dist.all_reduce`` on the same two inputs."""
    out = {}
    g = torch.Generator().manual_seed(worker.rank)
    for kind, start in (("demo", demo_values(worker.rank, numel)),
                        ("random", torch.randn(numel, generator=g, dtype=torch.float64))):
        yours, theirs = start.clone(), start.clone()
        fn(yours, worker)
        dist.all_reduce(theirs)
        out[kind] = (yours, theirs)
    return out


def whose(value: float, position: int, world_size: int) -> str:
    """Lesson 03: read a demo sum's digits: which ranks' numbers it holds (digit r: rank r's, that many times)."""
    digits = round(value / (position + 1))
    counts = [(digits // 10 ** r) % 10 for r in range(world_size)]
    missing = [r for r, c in enumerate(counts) if c == 0]
    twice = [r for r, c in enumerate(counts) if c > 1]
    said = []
    if missing:
        said.append(f"missing rank(s) {missing}")
    if twice:
        said.append(f"rank(s) {twice} added more than once")
    return ", ".join(said) or "every rank's number once"


def ring(fn, *, world_size: int = 3, numel: int = NUMEL) -> bool | None:
    """Lesson 03: check the learner's ``fn(tensor, worker)``, an in-place ring all-reduce (sum)."""
    exercise = "Build it: the ring all-reduce"
    records = build.attempt(exercise, fn, "distlab.course.exercises_ring:ring_task", world_size=world_size,
                            numel=numel)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    for kind in ("demo", "random"):
        for rank, out in enumerate(records):
            yours, theirs = out[kind]
            split = lambda t: {f"chunk {c}": part for c, part in enumerate(t.tensor_split(world_size))}  # noqa: E731
            report = compare(split(yours), split(theirs), names=(f"rank {rank}'s result", "dist.all_reduce's"),
                             tolerance=1e-9 * max(1.0, theirs.abs().max().item()))
            if report.same:
                continue
            print(f"{exercise}: not quite ({kind} numbers). {report}.")
            if kind == "demo":
                chunk = int(report.name.split()[1])
                first = sum(p.numel() for p in theirs.tensor_split(world_size)[:chunk])
                i = first + report.index[0]
                print(f"Number {i} on rank {rank} is {yours[i].item():.0f} where the sum is {theirs[i].item():.0f}: "
                      f"{whose(yours[i].item(), i, world_size)}. Follow chunk {chunk} round the ring: "
                      "which step should have added it, or carried it to this rank?")
            return False
    print(f"{exercise}: correct. On {world_size} real ranks your ring gives what dist.all_reduce gives, "
          "chunk by chunk on every rank, for the demonstration numbers and for random ones.")
    return True
