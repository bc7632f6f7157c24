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

The first three are the one gradient reducer's methods (``train.reduce.GradientReducer``, which
lessons 12 and 13 use for meshes of several axes too).  The fused one is what Horovod's *tensor
fusion* and DDP's *buckets* do with small tensors;
the backend's own adds the overlap with backward, which is why its communication cannot be
timed apart from the computation (its ``StepRecord``s have no communication times).
All four give the same parameters, up to rounding (the tests check it).

Lesson 15 adds three that send *during* backward, from hooks on the parameters (``Overlapped``:
``method="hooks"``, ``"buckets"`` or ``"reduce_scatter"``, ``train.overlap``): their communication is
timed as what is left to wait for once backward has ended (the *exposed* part), and each bucket's launch
goes into the record (``RankRecord.buckets``).  ``bucket_mb`` sets the buckets' cap, and DDP's too.
"""
from __future__ import annotations


import torch

from ..train.reduce import GradientReducer
from ..train.loop import Run, Strategy
from ..train.overlap import DEFAULT_BUCKET_MB, OVERLAPPED

METHODS = ("by_hand", "fused", *OVERLAPPED, "ddp")


class AllReduceEachParameter(Strategy):
    """Lesson 01: average each gradient tensor with one all-reduce, after backward (the one gradient
    reducer, ``train.reduce``, by hand)."""

    method = "by_hand"
    bucket_mb = DEFAULT_BUCKET_MB       # lesson 15: the buckets' cap, for the ways that send during backward

    def __init__(self, worker, collective: str = "dist"):
        self.worker, self.collective = worker, collective

    def prepare(self, run: Run) -> None:
        """Start from the same parameters everywhere: rank 0's (DDP does the same)."""
        with torch.no_grad():
            for p in run.model.parameters():
                self.worker.broadcast(p.data, src=0)
        self.reducer = GradientReducer(self.worker, dict(run.model.named_parameters()), method=self.method,
                                       collective=self.collective, bucket_mb=self.bucket_mb)

    def communicate(self, run: Run, step: int) -> tuple[float, float]:
        start = run.clock()
        self.reducer.reduce()
        return start, run.clock()


class HandWrittenAllReduce(AllReduceEachParameter):
    """Lesson 03: the same, with one of the hand-written all-reduces of ``comm/collectives.py``."""

    def __init__(self, worker, algorithm: str):
        from ..predict.alpha_beta import check_algorithm

        check_algorithm(algorithm)
        super().__init__(worker, collective=algorithm)


class AllReduceFused(AllReduceEachParameter):
    """Lesson 01: every gradient in one flat buffer, one all-reduce, then copied back.

    A model of many small tensors pays a message's fixed latency once instead of once per
    tensor; the price is copying every gradient into the buffer and out again.
    """

    method = "fused"


class Overlapped(AllReduceEachParameter):
    """Lesson 15: the gradients sent during backward (``train.overlap``); ``communicate`` only waits, so the
    time it returns is the communication backward did not hide."""

    def __init__(self, worker, method: str, bucket_mb: float = DEFAULT_BUCKET_MB):
        super().__init__(worker)
        self.method, self.bucket_mb = method, bucket_mb

    def prepare(self, run: Run) -> None:
        super().prepare(run)
        run.record.buckets = self.reducer.overlap.timeline


class BackendDataParallel(Strategy):
    """Lessons 01 and 02: the backend's own data parallelism (``Worker.data_parallel``; lesson 15:
    ``bucket_mb``, DDP's ``bucket_cap_mb``)."""

    in_backward = True

    def __init__(self, worker, bucket_mb: float = DEFAULT_BUCKET_MB):
        self.worker, self.bucket_mb = worker, bucket_mb

    def prepare(self, run: Run) -> None:
        run.net, run.optimizer = self.worker.data_parallel(run.model, run.optimizer, bucket_mb=self.bucket_mb)

    def update(self, run: Run, step: int) -> None:
        self.worker.wait(run.optimizer)      # Horovod: its all-reduces, with the job's timeout
        run.precision.step(run.optimizer)


def make_sync(method: str, worker, collective: str = "dist", bucket_mb: float = DEFAULT_BUCKET_MB) -> Strategy:
    """Lesson 01: the strategy for ``method`` (and, by hand, the all-reduce ``collective``; lesson 15: the
    buckets' cap)."""
    if method == "ddp":
        return BackendDataParallel(worker, bucket_mb)
    if method in OVERLAPPED:
        return Overlapped(worker, method, bucket_mb)
    if method == "fused":
        return AllReduceFused(worker)
    if collective != "dist":
        return HandWrittenAllReduce(worker, collective)
    return AllReduceEachParameter(worker)
