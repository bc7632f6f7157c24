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
               more_params=()) -> dict[str, int]:
    """Lesson 08: bytes of the parameters, gradients and optimizer state this rank holds now.

    Parameters are the model's; gradients are the ``.grad`` of the model's parameters and of
    the optimizer's; the optimizer state is every tensor in ``optimizer.state`` (moments,
    momentum buffers, step counters) and the optimizer's own parameters where they are not
    the model's: a copy of (a shard of) the parameters that the optimizer updates, as
    DeepSpeed's fp32 master copy (a shard that is a *view* of the model's parameters, as in
    ``zero/zero.py``, shares their storage and is not counted again).  ``more_params``:
    parameter storage the model does not show (DeepSpeed's stage-3 shards, ``ds_tensor``).
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
    add("grads", [p.grad for p in params + updated])
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
