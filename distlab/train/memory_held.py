"""What a rank really holds: counting the bytes of its tensors, by category (lesson 08).

``predict.memory`` and ``predict.activations`` predict; this module counts, so that the two can
be compared.  It does not ask the operating system (a process's resident memory includes
PyTorch's libraries, the data set and allocator caches, and on a GPU the allocator rounds every
block up): it walks the tensors the training keeps and adds up their *storages*, the buffers that
hold the numbers.  A storage shared by several tensors (a parameter that is a view of a
flat buffer, a gradient shard that is a slice of the full gradient) is counted once, in
the first category that reaches it.  Sharded tensors (FSDP2's ``DTensor``) count only their
local shard: the part this rank holds.
"""
from __future__ import annotations

import torch

CATEGORIES = ("params", "grads", "optimizer")


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: the local shard of a ``DTensor``, the tensor itself otherwise."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _storage(tensor: torch.Tensor) -> tuple[int, int]:
    s = local(tensor).untyped_storage()
    return s.data_ptr(), s.nbytes()


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
               more_params=(), more_grads=()) -> dict[str, int]:
    """Lesson 08: bytes of the parameters, gradients and optimizer state this rank holds now.

    Parameters are the model's; gradients are the ``.grad`` of the model's parameters and of
    the optimizer's; the optimizer state is every tensor in ``optimizer.state`` (moments,
    momentum buffers, step counters) and the optimizer's own parameters where they are not
    the model's: a copy of (a shard of) the parameters that the optimizer updates, as
    DeepSpeed's fp32 master copy (a shard that is a *view* of the model's parameters, as in
    ``zero/zero.py``, shares their storage and is not counted again).  ``more_params``:
    parameter storage the model does not show (DeepSpeed's stage-3 shards, ``ds_tensor``); ``more_grads``:
    gradients neither shows (lesson 14: ZeRO's 16-bit gradient shard, whose fp32 master the optimizer updates).
    """
    seen: set[int] = set()
    out = dict.fromkeys(CATEGORIES, 0)

    def add(category: str, tensors) -> None:
        for t in tensors:
            if t is None or not isinstance(t, torch.Tensor):
                continue
            ptr, nbytes = _storage(t)
            if nbytes and ptr not in seen:        # an emptied (freed) storage has 0 bytes
                seen.add(ptr)
                out[category] += nbytes

    params = list(model.parameters())
    updated = [p for group in optimizer.param_groups for p in group["params"]] if optimizer else []
    add("params", params + list(more_params))
    add("grads", [p.grad for p in params + updated] + list(more_grads))
    if optimizer is not None:
        add("optimizer", updated + [v for state in optimizer.state.values() for v in state.values()])
    return out


def activation_bytes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn=None) -> int:
    """Lesson 08: bytes autograd keeps for the backward pass of one mini-batch.

    Runs the forward pass and the loss while ``saved_tensors_hooks`` sees every tensor saved
    for backward; counts their storages once each, leaving out the parameters (saved too,
    but they are held anyway).  A storage counts whole: give ``x`` as a batch of its own
    (training's ``x[idx]`` is one), not a slice that keeps the whole data set alive.
    """
    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    params = {_storage(p)[0] for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        ptr, nbytes = _storage(t)
        if ptr not in params:
            saved[ptr] = nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(x), y)
    del loss
    return sum(saved.values())


def held_by_category(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Lesson 14: ``held_bytes`` with the master copy apart from the optimizer's own state: the tensors
    the optimizer updates that are not the model's parameters (an fp32 master copy, ``precision.mixed.
    MasterWeights``).  The four add up to ``held_bytes``'s three."""
    out = held_bytes(model, optimizer)
    params = {_storage(p)[0] for p in model.parameters()}
    masters = {ptr: n for ptr, n in (_storage(p) for group in optimizer.param_groups for p in group["params"])
               if ptr not in params and n}
    out["master"] = sum(masters.values())
    out["optimizer"] -= out["master"]
    return out


def _copy_of_parameter(t: torch.Tensor) -> bool:
    """Lesson 14: is ``t`` a cast of a parameter (autocast's 16-bit copy of a weight, or a view of one)?
    Its autograd history leads, through views and casts only, to a leaf that accumulates a gradient."""
    fn = t.grad_fn
    while fn is not None and type(fn).__name__ in ("TBackward0", "ToCopyBackward0", "ViewBackward0",
                                                   "TransposeBackward0", "PermuteBackward0"):
        nxt = fn.next_functions[0][0] if fn.next_functions else None
        if nxt is not None and type(nxt).__name__ == "AccumulateGrad":
            return True
        fn = nxt
    return False


def saved_bytes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, precision=None) -> dict[str, int]:
    """Lesson 14: what one mini-batch's forward keeps for backward, as ``activation_bytes`` counts it,
    in two parts: ``"activations"`` and ``"weight copies"``, the 16-bit casts of the weights that
    ``torch.autocast`` makes for each matrix product and keeps for its backward (2 bytes a weight
    whose product needs an input gradient: autocast saves no parameter memory, it adds to it).
    ``precision``: a ``train.step.Precision`` whose ``autocast()`` the forward runs in."""
    from contextlib import nullcontext

    params = {_storage(p)[0] for p in model.parameters()}
    saved: dict[str, dict[int, int]] = {"activations": {}, "weight copies": {}}

    def pack(t: torch.Tensor):
        ptr, nbytes = _storage(t)
        if ptr not in params:
            saved["weight copies" if _copy_of_parameter(t) else "activations"][ptr] = nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with precision.autocast() if precision is not None else nullcontext():
            out = model(x)
            loss = model.loss(out, y)[0] if hasattr(model, "loss") else torch.nn.functional.cross_entropy(out, y)
    del loss
    return {k: sum(v.values()) for k, v in saved.items()}


def training_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                   precision=None) -> dict[str, int]:
    """Lesson 14: a rank's bytes by category: what it holds between steps (``held_by_category``) and
    what one more forward of the mini-batch ``(x, y)`` keeps for backward (``saved_bytes``)."""
    return {**held_by_category(model, optimizer), **saved_bytes(model, x, y, precision)}

