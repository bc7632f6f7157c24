"""The one gradient reducer: every gradient made whole, over the ranks that hold a part of it.

Introduced in lesson 01 (data parallelism: average every gradient over the ranks), generalised in
lesson 12 (a piece of the line per rank) and lesson 13 (experts spread over ranks).  After backward,
each rank's gradient of a parameter is a *part* of the gradient one process would compute for the
whole batch.  Which ranks hold the other parts depends on how the model was split:

* ranks along the **batch axes** (data replicas, and the expert group, whose ranks route lines of their
  own) trained different lines: each holds the gradient of its own lines' mean loss;
* a **context** rank computed the loss of the whole line from its piece of it: its gradient of every
  parameter its piece went through is that piece's share (the read-out heads, which see the gathered
  line, are the exception: every context rank holds the same, whole gradient);
* under **sequence parallelism** a tensor rank's LayerNorms, embeddings and biases saw only its tokens;
* an **expert**'s gradient already holds every token of its expert group (they travelled to it), so
  only its copies in the data replicas hold other parts.

So every parameter carries the axes its gradient is split over (``partial_over``): the batch axes,
unless a transform that split the model said otherwise (``mark``: context parallelism adds
"context", sequence parallelism "tensor", expert parallelism takes "expert" away from an expert's
parameters).  The reducer **sums** each gradient over its purpose group, ``mesh.group(*axes)``, and
divides by the number of shares the batch was cut into (every rank's loss is the mean over its share),
so one rule serves every layout; parameters with the same axes travel together.  Two ways, naive first:

* ``"by_hand"``: one all-reduce per parameter (as many messages as tensors);
* ``"fused"``: one all-reduce per purpose group, its gradients laid end to end in one flat buffer
  (one message's start-up instead of one per tensor: Horovod's tensor fusion, DDP's buckets).

Lesson 15 adds the ways that send *during* backward (``"hooks"``, ``"buckets"``, ``"reduce_scatter"``:
``train.overlap``), over the same purpose groups with the same rule.  The backend's own (DDP,
``hvd.DistributedOptimizer``) is the last way for plain data parallelism (``data_parallel.gradient_sync``).
"""
from __future__ import annotations

import torch

from .mesh import AXES, BATCH_AXES
from .overlap import DEFAULT_BUCKET_MB, OVERLAPPED, OverlappedReduction

METHODS = ("by_hand", "fused", *OVERLAPPED)
_MARK = "_partial_over"      # the attribute a parameter carries once a transform has marked it


def partial_over(param: torch.Tensor) -> tuple[str, ...]:
    """Lesson 12: the mesh axes along which ``param``'s gradient is split into parts (in ``AXES`` order)."""
    return getattr(param, _MARK, BATCH_AXES)


def mark(param: torch.Tensor, add=(), remove=()) -> None:
    """Lesson 12: a transform's word on ``param``: its gradient is also split along ``add``, no longer
    along ``remove`` (a context split adds "context"; expert parallelism removes "expert")."""
    axes = (set(partial_over(param)) | set(add)) - set(remove)
    setattr(param, _MARK, tuple(a for a in AXES if a in axes))


class GradientReducer:
    """Lesson 12: sums every gradient over its purpose group of ``mesh`` and divides it by the batch's
    shares.  ``params``: ``{name: parameter}`` this rank holds (a pipeline stage's own).  ``mesh=None``
    is every rank of the job, all of them data replicas (lesson 01).  ``collective``: by hand, a lesson 03
    all-reduce of ``comm.collectives`` ("ring", "tree", ...) instead of the backend's ("dist").
    ``bucket_mb`` (lesson 15): the cap of a bucket when ``method="buckets"`` or ``"reduce_scatter"``."""

    def __init__(self, worker, params: dict, mesh=None, method: str = "fused", collective: str = "dist",
                 bucket_mb: float = DEFAULT_BUCKET_MB):
        if method not in METHODS:
            raise ValueError(f"unknown gradient reduction {method!r}; use one of {', '.join(METHODS)}")
        if collective != "dist" and method in OVERLAPPED:
            raise ValueError(f"method={method!r} launches the backend's asynchronous collectives; the hand-written "
                             f"{collective!r} all-reduce (lesson 03) goes with method='by_hand'")
        self.worker, self.mesh, self.method, self.collective = worker, mesh, method, collective
        self.shares = mesh.share()[1] if mesh is not None else worker.world_size
        self.buckets: dict[tuple[str, ...], list[torch.Tensor]] = {}
        for p in params.values():
            axes = self.axes(p)
            if axes or self.shares > 1:   # whole already, and a rank's own (one share): nothing to do
                self.buckets.setdefault(axes, []).append(p)
        self.sent = 0                 # bytes handed to all-reduce so far
        # lesson 15: sent during backward, from hooks on the parameters
        self.overlap = OverlappedReduction(self, method, bucket_mb) if method in OVERLAPPED else None

    def axes(self, p: torch.Tensor) -> tuple[str, ...]:
        """The axes of ``p``'s parts that are longer than one rank."""
        if self.mesh is None:
            return ("data",) if self.worker.world_size > 1 else ()
        return tuple(a for a in partial_over(p) if self.mesh.size(a) > 1)

    def group(self, axes: tuple[str, ...]):
        return None if self.mesh is None else self.mesh.group(*axes)

    def reduce(self) -> None:
        """Lesson 12: every gradient made the whole batch's gradient, in place (lesson 15: the overlapped
        ways only wait here for what backward's hooks launched)."""
        if self.overlap is not None:
            self.overlap.finish()
        for axes, params in self.buckets.items():
            if axes and self.overlap is not None:
                continue
            grads = [p.grad for p in params]
            group = self.group(axes) if axes else None
            # a group that is exactly the batch's shares averages (as lesson 01's all-reduce does);
            # any other sums its parts (an expert's: none to sum, its tokens came to it), then divides
            whole = (len(self.worker.members(group)) if axes else 1) == self.shares
            op = "avg" if whole else "sum"
            if axes:
                self.sent += sum(g.numel() * g.element_size() for g in grads)
                if self.method == "fused":
                    all_reduce_flat(self.worker, grads, group, op)
                else:
                    for g in grads:
                        self.all_reduce(g, group, op)
            if not whole:
                for g in grads:
                    g.div_(self.shares)

    def all_reduce(self, tensor: torch.Tensor, group, op: str) -> None:
        if self.collective == "dist":
            self.worker.all_reduce(tensor, op=op, group=group)
        else:                         # lesson 03: the ring, tree or parameter server built on send/recv
            from ..comm.collectives import all_reduce

            all_reduce(tensor, op, self.collective)


def all_reduce_flat(worker, grads: list[torch.Tensor], group=None, op: str = "avg") -> None:
    """Lesson 01: combine ``grads`` over ``group`` (None: every rank) in one all-reduce of one flat buffer,
    then copy each result back in place: one message's start-up instead of one per tensor."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    worker.all_reduce(flat, op=op, group=group)
    for g, combined in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(combined.view_as(g))
