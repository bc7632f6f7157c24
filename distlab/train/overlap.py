"""The gradient all-reduce started *during* backward: hooks, buckets, reduce-scatter.

Introduced in lesson 15 (where the time goes).  The one gradient reducer (``train.reduce``) of lessons
01-14 waits for backward to end and only then sends.  But backward makes the *last* layer's gradients
first: they could be travelling while autograd is still working on the earlier layers.  Three ways,
each a small change on the last (the order of Stanford CS336's second assignment):

* ``"hooks"``: a hook on every parameter (``register_post_accumulate_grad_hook``) launches an
  asynchronous all-reduce of its gradient as soon as autograd has written it; after backward the
  reducer only waits.  As many messages as tensors, each paying a message's start-up (lesson 03's alpha).
* ``"buckets"``: the gradients grouped into buckets of at most ``bucket_mb`` MiB, in the order backward
  makes them (the model's order reversed); a bucket is launched once its last gradient is written.
  Fewer, larger messages, still overlapped: DistributedDataParallel's design (Li et al. 2020, "PyTorch
  Distributed: Experiences on Accelerating Data Parallel Training", VLDB, section 3.2).
* ``"reduce_scatter"``: each bucket *reduce-scattered* during backward (each rank receives the sum of
  one slice of it), and the slices *all-gathered* after backward: the two halves of a ring all-reduce,
  split in time.  ZeRO-2 (lesson 08) puts each rank's update of its own slice between the two halves.

Why both ends of the bucket size lose: tiny buckets pay a start-up per message and keep many small
messages in flight; one bucket as large as the model cannot start before the whole backward has
ended, so nothing overlaps (it is ``"fused"`` again).  The best size lies between, and is measured.

Two rules keep it correct.  Every rank must launch its collectives in the same order (gloo and NCCL
match them by order, not by name), so bucket ``i`` of a purpose group is launched only once buckets
``0..i-1`` are, whatever order the hooks fire in (DDP's rule).  And with ``m`` accumulated micro-batches
the hooks are armed only for the last one (DDP's ``no_sync``): the earlier backwards add into ``.grad``
and send nothing, which saves ``m - 1`` all-reduces of every gradient.
"""
from __future__ import annotations

import math
import time

import torch

OVERLAPPED = ("hooks", "buckets", "reduce_scatter")
DEFAULT_BUCKET_MB = 25.0        # DistributedDataParallel's default bucket_cap_mb
MIB = 2 ** 20


def check_bucket_mb(bucket_mb) -> None:
    """Lesson 15: a bucket's cap must be a positive, finite number of MiB (DDP's ``bucket_cap_mb``)."""
    if isinstance(bucket_mb, bool) or not isinstance(bucket_mb, (int, float)) or not (
            math.isfinite(bucket_mb) and bucket_mb > 0):
        raise ValueError(f"bucket_mb must be a positive number of MiB (DDP's bucket_cap_mb), got {bucket_mb!r}: "
                         "a bucket of 0 bytes could hold no gradient")


def plan_buckets(params: list[torch.Tensor], cap_bytes: float) -> list[list[torch.Tensor]]:
    """Lesson 15: ``params`` (in the model's order) cut into buckets in the order backward writes their
    gradients (reversed), each of at most ``cap_bytes`` unless one tensor alone is larger (it gets a bucket
    of its own).  ``cap_bytes=0``: one bucket a tensor (the per-parameter hooks)."""
    buckets: list[list[torch.Tensor]] = [[]]
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if buckets[-1] and size + nbytes > cap_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += nbytes
    return buckets


class Bucket:
    """Lesson 15: gradients that travel in one message, and when that message was launched and done."""

    def __init__(self, params: list[torch.Tensor], axes: tuple[str, ...], index: int):
        self.params, self.axes, self.index = params, axes, index
        self.nbytes = sum(p.numel() * p.element_size() for p in params)
        self.numel = sum(p.numel() for p in params)
        self.reset()

    def reset(self) -> None:
        self.ready, self.pending, self.launched, self.flat = 0, None, None, None


class OverlappedReduction:
    """Lesson 15: the reducer's gradients sent during backward (``how``: one of ``OVERLAPPED``).

    ``reducer`` is the one ``GradientReducer``: its purpose groups (which ranks hold the other parts of
    each gradient) and its rule (average, or sum and divide by the batch's shares) are kept; only *when*
    and *in how many messages* the gradients travel changes.  ``timeline`` gets one list per step of every
    bucket's ``{"bucket", "axes", "tensors", "bytes", "launched", "done"}`` (``time.time()`` seconds:
    ``done`` is when this rank's wait for it returned, so a bucket whose ``done`` is at the end of backward
    travelled hidden behind it)."""

    def __init__(self, reducer, how: str, bucket_mb: float = DEFAULT_BUCKET_MB):
        if how not in OVERLAPPED:
            raise ValueError(f"unknown overlapped reduction {how!r}; use one of {', '.join(OVERLAPPED)}")
        check_bucket_mb(bucket_mb)
        self.reducer, self.how = reducer, how
        cap = 0 if how == "hooks" else bucket_mb * MIB
        self.groups: dict[tuple[str, ...], list[Bucket]] = {}
        self.of: dict[int, Bucket] = {}
        for axes, params in reducer.buckets.items():
            if not axes:                                  # nothing to send: a rank's own whole gradient
                continue
            self.groups[axes] = [Bucket(ps, axes, i) for i, ps in enumerate(plan_buckets(params, cap))]
            for bucket in self.groups[axes]:
                for p in bucket.params:
                    self.of[id(p)] = bucket
                    p.register_post_accumulate_grad_hook(self._written)
        self.armed = True           # lesson 15: False while accumulating micro-batches that send nothing
        self.timeline: list[list[dict]] = []

    @property
    def buckets(self) -> list[Bucket]:
        return [b for group in self.groups.values() for b in group]

    def _written(self, p: torch.Tensor) -> None:
        """The hook: autograd has just written ``p``'s gradient; launch every bucket that is now full."""
        if not self.armed:
            return
        bucket = self.of[id(p)]
        bucket.ready += 1
        self._launch_in_order(self.groups[bucket.axes])

    def _launch_in_order(self, group: list[Bucket], force: bool = False) -> None:
        """Launch the next buckets of ``group`` that are full (``force``: all of them), in order."""
        for bucket in group:
            if bucket.launched is not None:
                continue
            if not force and bucket.ready < len(bucket.params):
                return                                    # bucket i waits for i-1, on every rank alike
            self._launch(bucket)

    def _launch(self, bucket: Bucket) -> None:
        r = self.reducer
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        group = r.group(bucket.axes)
        n = len(r.worker.members(group))
        bucket.whole = n == r.shares                      # the reducer's rule: average, or sum then divide
        op = "avg" if bucket.whole else "sum"
        r.sent += bucket.nbytes
        if self.how == "reduce_scatter":
            flat = torch.cat([flat, flat.new_zeros(-flat.numel() % n)])     # equal slices, one a rank
            bucket.pending = r.worker.reduce_scatter(flat, op=op, group=group, async_op=True)
        else:
            bucket.pending = r.worker.all_reduce(flat, op=op, group=group, async_op=True)
        bucket.flat, bucket.launched = flat, time.time()     # (the buffer kept until its collective is waited for)

    def finish(self) -> None:
        """After backward: launch whatever the hooks did not (a parameter no loss reached), wait for every
        bucket in order (reduce-scatter's: all-gather the slices), copy the results into ``.grad``."""
        for group in self.groups.values():
            self._launch_in_order(group, force=True)
        step = []
        gathers = []
        for bucket in self.buckets:
            result = bucket.pending.wait()
            if self.how == "reduce_scatter":
                gathers.append((bucket, self.reducer.worker.all_gather(result, group=self.reducer.group(bucket.axes),
                                                                       async_op=True)))
            else:
                self._copy_back(bucket, result)
            step.append(self._entry(bucket))
        for (bucket, pending), entry in zip(gathers, step):
            self._copy_back(bucket, torch.cat(pending.wait())[:bucket.numel])
            entry["done"] = time.time()
        self.timeline.append(step)
        for bucket in self.buckets:
            bucket.reset()

    def _entry(self, bucket: Bucket) -> dict:
        return {"bucket": bucket.index, "axes": bucket.axes, "tensors": len(bucket.params),
                "bytes": bucket.nbytes, "launched": bucket.launched, "done": time.time()}

    def _copy_back(self, bucket: Bucket, flat: torch.Tensor) -> None:
        for p, part in zip(bucket.params, flat.split([p.numel() for p in bucket.params])):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(part.view_as(p))
            if not bucket.whole:
                p.grad.div_(self.reducer.shares)
