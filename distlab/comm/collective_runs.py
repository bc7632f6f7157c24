"""Running the hand-written all-reduces on real ranks: checked and traced (lesson 03).

``collectives.py`` holds the four algorithms; this module holds the worker functions that
lesson 03 and the tests launch with them:

* ``compare_with_dist`` runs every algorithm and ``dist.all_reduce`` on the same random
  inputs, so a test can check that they agree for every size, dtype and operation;
* ``trace`` runs each algorithm once on ``demo_values`` (numbers whose digits say which
  ranks are in a sum) and records every message with its values, for the widgets;
  ``merge_traces`` puts the ranks' records together.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..models import DTYPES
from .collectives import ALGORITHMS, OPS, all_reduce, check_torchrun
from ..predict.alpha_beta import check_algorithm
from .cost_model import merge_logs


def compare_with_dist(worker, shapes=((12,), (13,), (3, 7)), dtypes=("float32", "float64"),
                      ops=OPS, algorithms=tuple(ALGORITHMS), seed: int = 0) -> list[dict]:
    """Lesson 03 (worker): every algorithm against ``dist.all_reduce`` on the same random inputs.

    For each case returns this rank's result, the result of ``dist.all_reduce`` (sum, then
    divided by N for ``"avg"``, as gloo has no average), and the message log.
    """
    check_torchrun(worker)
    out = []
    for algorithm in algorithms:
        for dtype in dtypes:
            for shape in shapes:
                for op in ops:
                    g = torch.Generator().manual_seed(seed + 7919 * worker.rank + len(out))
                    x = torch.randn(shape, generator=g, dtype=torch.float64).to(DTYPES[dtype])
                    expected = x.clone()
                    dist.all_reduce(expected)
                    if op == "avg":
                        expected.div_(worker.world_size)
                    mine, log = all_reduce(x.clone(), op, algorithm)
                    out.append({"algorithm": algorithm, "dtype": dtype, "shape": tuple(shape),
                                "op": op, "result": mine, "expected": expected, "log": log})
    return out


def compare_with_dist_args(world_size: int, *, algorithms=tuple(ALGORITHMS), ops=OPS,
                           dtypes=("float32", "float64"), backend: str = "torchrun", device: str = "cpu", **_) -> None:
    _torchrun_only(backend)
    for a in algorithms:
        check_algorithm(a)
    for op in ops:
        if op not in OPS:
            raise ValueError(f"op must be 'sum' or 'avg', got {op!r}")
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {d!r}")


compare_with_dist.validate_args = compare_with_dist_args
compare_with_dist.supports = frozenset({"torchrun", "cpu", "cuda"})


def _torchrun_only(backend: str) -> None:
    if backend != "torchrun":
        raise ValueError("the hand-written collectives run on launch(backend='torchrun') only: they use "
                         "torch.distributed send/recv, which Horovod does not have")


def demo_values(rank: int, numel: int) -> torch.Tensor:
    """Numbers that show who contributed: rank r holds (i+1) * 10**r.

    In a sum, digit r of a number is non-zero exactly when rank r's value is in it: with
    4 ranks, 1111 means "everyone", 110 means "ranks 1 and 2".
    """
    return torch.arange(1, numel + 1, dtype=torch.float64) * 10.0 ** rank


def trace(worker, algorithms=tuple(ALGORITHMS), numel: int = 8) -> dict:
    """Lesson 03 (worker): run each algorithm once on ``demo_values``, recording every message
    with its values; returns ``{algorithm: {"input", "result", "dist", "log"}}`` for this rank,
    where ``"dist"`` is what ``dist.all_reduce`` made of the same input."""
    check_torchrun(worker)
    out = {}
    for algorithm in algorithms:
        x = demo_values(worker.rank, numel)
        expected = x.clone()
        dist.all_reduce(expected)
        result, log = all_reduce(x.clone(), "sum", algorithm, trace_values=True)
        out[algorithm] = {"input": x.tolist(), "result": result.tolist(), "dist": expected.tolist(),
                          "log": log}
    return out


def trace_args(world_size: int, *, algorithms=tuple(ALGORITHMS), numel: int = 8, backend: str = "torchrun",
               device: str = "cpu", **_) -> None:
    _torchrun_only(backend)
    for a in algorithms:
        check_algorithm(a)
    if not isinstance(numel, int) or not 1 <= numel <= 9:
        raise ValueError(f"numel must be 1..9 (so that every digit of a sum stays one digit), got {numel!r}")
    if world_size > 6:
        raise ValueError("trace shows sums digit by digit: use at most 6 ranks")


trace.validate_args = trace_args
trace.supports = frozenset({"torchrun", "cpu", "cuda"})


def merge_traces(records: list[dict]) -> dict:
    """The ranks' ``trace`` records as one trace per algorithm, for the widgets."""
    world = len(records)
    return {a: {"algorithm": a, "world_size": world,
                "inputs": [r[a]["input"] for r in records],
                "results": [r[a]["result"] for r in records],
                "dist_results": [r[a]["dist"] for r in records],
                "messages": merge_logs([r[a]["log"] for r in records])}
            for a in records[0]}
