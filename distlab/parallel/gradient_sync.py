"""Making the ranks' gradients agree: the same job done four ways, naive first.

Introduced in lesson 01; lesson 02 adds Horovod's way, lesson 03 the hand-written
collectives.  Each class is a ``Strategy`` of the training loop (``loop.py``): after
``backward`` every rank holds the gradient of its own mini-batch, and before the update
every rank must hold their *average*.

==============================  ====================  ==============================================
class                           ``method=``           how
==============================  ====================  ==============================================
``AllReduceEachParameter``      ``"by_hand"``         after backward, one all-reduce per parameter
                                                      tensor (naive: as many messages as tensors)
``HandWrittenAllReduce``        ``"by_hand"`` with    the same, with lesson 03's parameter server,
                                ``collective=...``    ring or tree all-reduce built on send/recv
``AllReduceFused``              ``"fused"``           after backward, every gradient packed into one
                                                      buffer and all-reduced at once: one message's
                                                      latency instead of one per tensor
``BackendDataParallel``         ``"ddp"``             the backend's own: DistributedDataParallel
                                                      (torchrun) or ``hvd.DistributedOptimizer``
                                                      (Horovod), which start all-reducing *during*
                                                      backward, as soon as each gradient is ready
==============================  ====================  ==============================================

The fused one is what Horovod's *tensor fusion* and DDP's *buckets* do with small tensors;
the backend's own adds the overlap with backward, which is why its communication cannot be
timed apart from the computation (its ``StepRecord``s have no communication times).
All four give the same parameters, up to rounding (the tests check it).
"""
from __future__ import annotations

import time

import torch

from .loop import Run, Strategy

METHODS = ("by_hand", "fused", "ddp")


class AllReduceEachParameter(Strategy):
    """Lesson 01: average each gradient tensor with one all-reduce, after backward."""

    def __init__(self, worker):
        self.worker = worker

    def all_reduce(self, tensor: torch.Tensor) -> None:
        """Average ``tensor`` over the ranks, in place."""
        self.worker.all_reduce(tensor, op="avg")

    def prepare(self, run: Run) -> None:
        """Start from the same parameters everywhere: rank 0's (DDP does the same)."""
        with torch.no_grad():
            for p in run.model.parameters():
                self.worker.broadcast(p.data, src=0)

    def communicate(self, run: Run, step: int) -> tuple[float, float]:
        start = time.time()
        for p in run.model.parameters():
            self.all_reduce(p.grad)
        return start, time.time()


class HandWrittenAllReduce(AllReduceEachParameter):
    """Lesson 03: the same, with one of the hand-written all-reduces of ``comm/collectives.py``."""

    def __init__(self, worker, algorithm: str):
        from ..predict.alpha_beta import check_algorithm

        check_algorithm(algorithm)
        super().__init__(worker)
        self.algorithm = algorithm

    def all_reduce(self, tensor: torch.Tensor) -> None:
        from ..comm.collectives import all_reduce

        all_reduce(tensor, "avg", self.algorithm)


class AllReduceFused(AllReduceEachParameter):
    """Lesson 01: every gradient in one flat buffer, one all-reduce, then copied back.

    A model of many small tensors pays a message's fixed latency once instead of once per
    tensor; the price is copying every gradient into the buffer and out again.
    """

    def communicate(self, run: Run, step: int) -> tuple[float, float]:
        start = time.time()
        all_reduce_flat(self.worker, [p.grad for p in run.model.parameters()])
        return start, time.time()


def all_reduce_flat(worker, grads: list[torch.Tensor], group=None) -> None:
    """Lesson 01: average ``grads`` over ``group`` (None: every rank) in one all-reduce of one flat
    buffer, then copy each average back in place (lesson 13's experts use it for two such buckets)."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    worker.all_reduce(flat, op="avg", group=group)
    for g, averaged in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(averaged.view_as(g))


class BackendDataParallel(Strategy):
    """Lessons 01 and 02: the backend's own data parallelism (``Worker.data_parallel``)."""

    in_backward = True

    def __init__(self, worker):
        self.worker = worker

    def prepare(self, run: Run) -> None:
        run.net, run.optimizer = self.worker.data_parallel(run.model, run.optimizer)

    def update(self, run: Run, step: int) -> None:
        self.worker.wait(run.optimizer)      # Horovod: its all-reduces, with the job's timeout
        run.optimizer.step()


def make_sync(method: str, worker, collective: str = "dist") -> Strategy:
    """The strategy for ``method`` (and, by hand, the all-reduce ``collective``)."""
    if method == "ddp":
        return BackendDataParallel(worker)
    if method == "fused":
        return AllReduceFused(worker)
    if collective != "dist":
        return HandWrittenAllReduce(worker, collective)
    return AllReduceEachParameter(worker)
