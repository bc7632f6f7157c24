"""Combining gradients by hand: four all-reduces written on point-to-point send and receive.

Introduced in lesson 03 (``notebooks/03_combining_gradients.ipynb``).

Lesson 01 averaged gradients with one call, ``dist.all_reduce``.  Here we open that box.
Every function below does what ``dist.all_reduce`` does (every rank ends with the sum, or
the average, of every rank's tensor), using nothing but ``send``/``recv`` between pairs of
ranks, and they differ only in *who sends what to whom*:

=====================  ===================================  =================================
algorithm              who sends what                       what it costs (N ranks, n bytes)
=====================  ===================================  =================================
``naive``              everyone -> rank 0, one at a time;    2(N-1) messages in a row, all
                       rank 0 adds and sends the sum back    through rank 0
``parameter_server``   everyone -> the server at once; the  rank 0 receives and sends (N-1)
                       server adds and sends to all at once  full tensors: grows with N
``ring``               chunks travel round a ring: first    every rank sends 2(N-1)/N * n:
                       reduce-scatter, then all-gather      about 2n, whatever N
``tree``               pairs add, pairs of pairs add, ...   2*ceil(log2 N) messages in a row
                       then the sum flows back down         (few latencies, full tensors)
=====================  ===================================  =================================

Each function works in place, like ``dist.all_reduce``, and returns ``(tensor, log)``.  The
*message log* is what the lesson's widgets and the cost model read: one dict per message,
written by the rank that *received* it (it knows what arrived and what it made of it)::

    {"phase": "reduce-scatter", "step": 0, "src": 3, "dst": 0, "chunk": 2, "bytes": 8}

``chunk`` is ``None`` when the whole tensor travels.  With ``trace_values=True`` (for small
demo tensors) a message also carries ``"values"`` (the numbers that arrived) and ``"after"``
(the receiver's chunk once it had added or stored them).  Every rank keeps its own log;
``cost_model.merge_logs`` puts the ranks' logs together in the parent.

Every wait is bounded: a receive that never completes raises after the process group's
timeout (``distlab.launch(..., timeout=...)``), as ``dist.all_reduce`` would.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..predict.alpha_beta import check_algorithm

OPS = ("sum", "avg")


# ---------------------------------------------------------------------------------------------
# small helpers shared by the four algorithms
# ---------------------------------------------------------------------------------------------
def _begin(tensor: torch.Tensor, op: str):
    """Check the call; return (rank, world size, the tensor as one flat view)."""
    if op not in OPS:
        raise ValueError(f"op must be 'sum' or 'avg', got {op!r}")
    if not dist.is_initialized():
        raise RuntimeError("no torch.distributed process group: call the collectives inside a worker "
                           "function started by distlab.launch(..., backend='torchrun')")
    if not tensor.is_contiguous():
        raise ValueError("the tensor must be contiguous (as for dist.all_reduce); pass tensor.contiguous()")
    return dist.get_rank(), dist.get_world_size(), tensor.view(-1)


def _finish(tensor: torch.Tensor, op: str, world: int, log: list):
    """Every rank now holds the same sum; an average is that sum divided on each rank."""
    if op == "avg":
        tensor.div_(world)
    return tensor, log


def _note(log, trace_values, phase, step, src, dst, chunk, arrived, after):
    """Record one message, on the rank that received it."""
    entry = {"phase": phase, "step": step, "src": src, "dst": dst, "chunk": chunk,
             "bytes": arrived.numel() * arrived.element_size()}
    if trace_values:
        entry["values"], entry["after"] = arrived.tolist(), after.tolist()
    log.append(entry)


_SCRATCH: dict = {}


def scratch(numel: int, dtype, slot: int = 0) -> torch.Tensor:
    """A receive buffer kept from one call to the next.

    Allocating a fresh 40 MB buffer at every all-reduce costs the operating system a page
    fault per 4 KB page on first touch, which takes about as long as the copy itself; a
    buffer that is reused (grown when a bigger tensor comes) costs nothing after the first.
    """
    buf = _SCRATCH.get((dtype, slot))
    if buf is None or buf.numel() < numel:
        buf = _SCRATCH[dtype, slot] = torch.empty(numel, dtype=dtype)
    return buf[:numel]


def _exchange(outgoing, dst, incoming, src) -> None:
    """Send to one rank while receiving from another.

    Both are started before either is waited for: if every rank of a ring first *sent* and
    only then received, each could wait for a neighbour that is itself waiting.
    """
    works = [dist.isend(outgoing, dst), dist.irecv(incoming, src)]
    for work in works:
        work.wait()          # bounded by the process group's timeout


# ---------------------------------------------------------------------------------------------
# 1. naive: reduce to one rank, then broadcast, one message at a time
# ---------------------------------------------------------------------------------------------
def naive_all_reduce(tensor, op: str = "sum", *, trace_values: bool = False):
    """Lesson 03: the first idea: everyone sends to rank 0, which adds and sends the sum back.

    Blocking ``send``/``recv``, one peer after the other: rank 0 receives rank 1's whole
    tensor and adds it, then rank 2's, ..., then sends the sum to rank 1, then rank 2, ...
    That is 2(N-1) full-tensor messages *in a row*, all through rank 0, while the other
    ranks wait.  Correct, short, and slow: the baseline the others improve on.
    """
    rank, world, flat = _begin(tensor, op)
    log = []
    others = range(1, world)
    if rank == 0:
        incoming = scratch(flat.numel(), flat.dtype)
        for step, src in enumerate(others):
            dist.recv(incoming, src)
            flat.add_(incoming)
            _note(log, trace_values, "reduce", step, src, 0, None, incoming, flat)
        for dst in others:
            dist.send(flat, dst)
    else:
        dist.send(flat, 0)
        dist.recv(flat, 0)
        _note(log, trace_values, "broadcast", rank - 1, 0, rank, None, flat, flat)
    return _finish(tensor, op, world, log)


# ---------------------------------------------------------------------------------------------
# 2. parameter server: fan in to a server, fan out from it, all messages at once
# ---------------------------------------------------------------------------------------------
def parameter_server_all_reduce(tensor, op: str = "sum", *, trace_values: bool = False):
    """Lesson 03: a parameter server: every worker pushes its gradient to the server at once;
    the server adds them and sends the sum back to everyone at once.

    The server is rank 0, and it is *also a worker* (its own gradient is in the sum).  A
    dedicated server process would cost one more process on our two cores and change
    nothing the lesson measures: the server's link carries every worker's full tensor in and
    the full sum out, (N-1) tensors each way here (N with a dedicated server).  That load
    grows with N, which is why big jobs shard the server or use all-reduce instead.

    Unlike ``naive_all_reduce`` the server posts all its receives together (``irecv``), so
    the pushes travel concurrently; it needs one receive buffer per worker for that.
    """
    rank, world, flat = _begin(tensor, op)
    log = []
    workers = range(1, world)
    if rank == 0:
        buffers = {src: scratch(flat.numel(), flat.dtype, slot=src) for src in workers}
        pushes = {src: dist.irecv(buffers[src], src) for src in workers}     # fan-in
        for src in workers:                      # add in rank order: the same sum every run
            pushes[src].wait()
            flat.add_(buffers[src])
            _note(log, trace_values, "push", 0, src, 0, None, buffers[src], flat)
        for work in [dist.isend(flat, dst) for dst in workers]:               # fan-out
            work.wait()
    else:
        dist.isend(flat, 0).wait()
        dist.irecv(flat, 0).wait()
        _note(log, trace_values, "pull", 0, 0, rank, None, flat, flat)
    return _finish(tensor, op, world, log)


# ---------------------------------------------------------------------------------------------
# 3. ring: reduce-scatter, then all-gather, over N chunks
# ---------------------------------------------------------------------------------------------
def ring_all_reduce(tensor, op: str = "sum", *, trace_values: bool = False):
    """Lesson 03: the ring all-reduce: each rank talks only to its neighbours, a chunk at a time.

    The tensor is cut into N chunks (``tensor_split`` also handles sizes that N does not
    divide).  Rank r always sends to r+1 and receives from r-1, both at once.

    1. *Reduce-scatter*, N-1 steps: at step s rank r sends chunk (r-s) and adds the chunk
       (r-s-1) it receives into its own.  Each chunk travels round the ring collecting one
       more rank's numbers per step; afterwards rank r holds the full sum of chunk (r+1).
    2. *All-gather*, N-1 steps: the finished chunks travel round once more and are stored.

    Every rank sends 2(N-1) chunks of n/N: 2(N-1)/N times the tensor, one tensor at N = 2 and
    never more than two, however many ranks there are.  That is why the ring scales where the
    parameter server's link saturates.
    """
    rank, world, flat = _begin(tensor, op)
    log = []
    chunks = flat.tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    receive_buffer = scratch(chunks[0].numel(), flat.dtype)     # the first chunk is the largest
    for step in range(world - 1):                                            # reduce-scatter
        send_c, recv_c = (rank - step) % world, (rank - step - 1) % world
        incoming = receive_buffer[:chunks[recv_c].numel()]
        _exchange(chunks[send_c], right, incoming, left)
        chunks[recv_c].add_(incoming)
        _note(log, trace_values, "reduce-scatter", step, left, rank, recv_c, incoming, chunks[recv_c])
    for step in range(world - 1):                                            # all-gather
        send_c, recv_c = (rank + 1 - step) % world, (rank - step) % world
        _exchange(chunks[send_c], right, chunks[recv_c], left)   # arrives straight in place
        _note(log, trace_values, "all-gather", step, left, rank, recv_c, chunks[recv_c], chunks[recv_c])
    return _finish(tensor, op, world, log)


# ---------------------------------------------------------------------------------------------
# 4. tree: a binomial tree up to rank 0, then the same tree down
# ---------------------------------------------------------------------------------------------
def tree_all_reduce(tensor, op: str = "sum", *, trace_values: bool = False):
    """Lesson 03: a binomial tree: pairs add, then pairs of pairs, ..., then the sum flows back.

    At level k (k = 0, 1, ...) a rank whose bit k is set sends its partial sum to rank
    r - 2**k and is done adding; that partner adds it.  After ceil(log2 N) levels rank 0
    holds the sum, and the same tree, walked backwards, broadcasts it.  Every message is
    the whole tensor, but only 2*ceil(log2 N) of them happen in a row (the ring needs
    2(N-1)): the tree wins when messages are small and each one's fixed latency dominates.
    """
    rank, world, flat = _begin(tensor, op)
    log = []
    levels = (world - 1).bit_length()          # ceil(log2 N)
    incoming = scratch(flat.numel(), flat.dtype)
    for level in range(levels):                                              # up the tree
        partner = rank ^ (1 << level)
        if rank & (1 << level):
            dist.send(flat, partner)
            break
        if partner < world:
            dist.recv(incoming, partner)
            flat.add_(incoming)
            _note(log, trace_values, "reduce", level, partner, rank, None, incoming, flat)
    for step, level in enumerate(reversed(range(levels))):                   # down the tree
        mask = 1 << level
        if rank % (2 * mask) == 0 and rank + mask < world:
            dist.send(flat, rank + mask)
        elif rank % (2 * mask) == mask:
            dist.recv(flat, rank - mask)
            _note(log, trace_values, "broadcast", step, rank - mask, rank, None, flat, flat)
    return _finish(tensor, op, world, log)


ALGORITHMS = {"naive": naive_all_reduce, "parameter_server": parameter_server_all_reduce,
              "ring": ring_all_reduce, "tree": tree_all_reduce}


def all_reduce(tensor, op: str = "sum", algorithm: str = "ring", *, trace_values: bool = False):
    """Lesson 03: all-reduce ``tensor`` in place with one of the hand-written ``ALGORITHMS``."""
    check_algorithm(algorithm)
    return ALGORITHMS[algorithm](tensor, op, trace_values=trace_values)


def check_torchrun(worker) -> None:
    """The hand-written collectives speak torch.distributed: they need a torchrun job."""
    if worker.backend != "torchrun":
        raise RuntimeError("the hand-written collectives use torch.distributed send/recv: "
                           "launch with backend='torchrun'")
