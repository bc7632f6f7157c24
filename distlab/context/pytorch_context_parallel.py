"""PyTorch's own context parallelism (``torch.distributed.tensor.experimental.context_parallel``), tried
on these ranks.

Introduced in lesson 12 (long lines: splitting the heads and the sequence), after the ring written
by hand.  PyTorch's version shards the buffers it is given along the sequence (in place, and with a
head-tail load balancer: zig-zag by another name) and, inside the ``with`` block, replaces
``F.scaled_dot_product_attention`` by an attention over DTensors that merges the pieces block by
block.  By default (``set_rotate_method("allgather")``) every rank first gathers all the K and V
pieces at once; ``set_rotate_method("alltoall")`` passes them hop by hop, as a ring.  It is
written for the fused attention kernels of GPUs (flash, memory-efficient, cuDNN); on a CPU, attention runs
``aten._scaled_dot_product_flash_attention_for_cpu``, for which the experimental module registers
no rule, so the call stops with ``NotImplementedError`` (PyTorch 2.13).  ``attempt`` runs it for real
and returns what happened, the result against the plain kernel on the whole line, or the exact error.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F


def attempt(worker, *, causal: bool = True, batch: int = 2, heads: int = 4, tokens: int = 64,
            head_size: int = 16, seed: int = 0) -> dict:
    """Lesson 12: one attention forward and backward through PyTorch's ``context_parallel`` on this
    job's ranks (torchrun), against ``scaled_dot_product_attention`` on the whole line."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard

    from ..train.mesh import Mesh

    mesh = Mesh(worker, context=worker.world_size).device_mesh["context"]
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, tokens, head_size, generator=g) for _ in range(3))
    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    reference = F.scaled_dot_product_attention(*whole, is_causal=causal)
    reference.sum().backward()
    out = {"rank": worker.rank, "torch": torch.__version__, "device": str(worker.device), "causal": causal}
    t0 = time.perf_counter()
    try:
        # the buffers are cut in place, so they must not need gradients: new leaves on the pieces inside
        buffers = [t.clone() for t in (q, k, v)]
        with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2]):
            pieces = [t.detach().requires_grad_() for t in buffers]
            y = F.scaled_dot_product_attention(*pieces, is_causal=causal)
            y.sum().backward()
            gathered = context_parallel_unshard(mesh, [y.detach(), *(p.grad for p in pieces)], [2, 2, 2, 2])
        out.update(ran=True, seconds=time.perf_counter() - t0,
                   max_diff=max((a - b).abs().max().item()
                                for a, b in zip(gathered, [reference.detach(), *(t.grad for t in whole)])))
    except Exception as err:       # what PyTorch says, exactly, for the lesson to show
        out.update(ran=False, seconds=time.perf_counter() - t0,
                   error=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    return out


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", causal: bool = True,
                  batch: int = 2, heads: int = 4, tokens: int = 64, head_size: int = 16, seed: int = 0) -> None:
    """Lesson 12: PyTorch's context parallelism speaks torch.distributed: torchrun, and a line that
    cuts into two chunks a rank (its load balancer's head and tail)."""
    if backend != "torchrun":
        raise ValueError("PyTorch's context_parallel runs on torch.distributed's DeviceMesh: use backend='torchrun'")
    if tokens % (2 * world_size):
        raise ValueError(f"a line of {tokens} tokens does not cut into 2 x {world_size} equal chunks")


attempt.validate_args = validate_args
attempt.supports = frozenset({"torchrun", "cpu", "cuda"})
