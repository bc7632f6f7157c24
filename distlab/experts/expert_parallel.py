"""Expert parallelism: each rank holds some of the experts, and tokens travel to their experts and back.

Introduced in lesson 13 (experts: a bigger model for the same compute).  With E experts on the n
ranks of an expert group, rank r keeps experts ``r x E/n`` to ``(r + 1) x E/n - 1``; the router stays
whole on every rank (it is small, and every rank routes its own tokens).  One MoE layer's step:

1. **route** this rank's tokens (``moe.route``: top-k, the capacity of this rank's group);
2. **count**: how many tokens this rank sends to each expert of each rank.  The counts change every
   step, and a rank cannot receive what it cannot size, so they travel first (n x E/n numbers);
3. **dispatch**: the tokens, sorted by expert and slot, go to their experts' ranks (an all-to-all
   with pieces of different sizes);
4. each rank runs **its experts** on what arrived, source by source;
5. **combine**: the results go back the way they came (the same all-to-all, sizes swapped), and each
   token adds up its experts' results weighted by its gates.

The backward pass runs the same exchanges the other way: a token's gradient goes to its expert's
rank, the expert's input gradient comes home (``_Exchange``).  Two ways to exchange, chosen by ``how``:

* ``"by_hand"``: n - 1 rounds of point-to-point; in round k a rank sends to the rank k after it and
  receives from the rank k before it, so every pair meets exactly once and nobody waits in a cycle
  (torchrun only: Horovod has no send/recv);
* ``"library"``: one ``Worker.all_to_all_v`` (``dist.all_to_all_single`` with split sizes on
  torchrun, ``hvd.alltoall`` with ``splits`` on Horovod).
"""
from __future__ import annotations

import time

import torch
from torch import nn

from ..tensor.tensor_parallel import Traffic
from ..train.reduce import mark
from .moe import MoE, aux_loss, route, z_loss

HOW = ("by_hand", "library")
PHASES = ("route", "counts", "dispatch", "experts", "combine")     # a forward's parts, in order


def check_experts(experts: int, size: int) -> None:
    """Lesson 13: the experts must spread evenly over the expert group, at least one a rank."""
    if experts < size:
        raise ValueError(f"{experts} experts cannot be spread over {size} expert-parallel ranks: "
                         f"each rank needs at least one expert")
    if experts % size:
        raise ValueError(f"{experts} experts do not spread evenly over {size} expert-parallel ranks: "
                         f"use a multiple of {size} experts")


def _by_hand(worker, group):
    """The all-to-all from point-to-point messages: in round k, send to (me + k), receive from (me - k).
    Every round's messages are posted before any is waited for: a rank that waited for round 1 before
    starting round 2 would add one message's latency per round (gloo's send/recv each cost about as
    much as a whole all-to-all of these sizes)."""
    def swap(x: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        n, me = len(group), group.index(worker.rank)
        outgoing = list(x.split(send))
        arrived: list[torch.Tensor] = [x.new_empty((recv[src], *x.shape[1:])) for src in range(n)]
        arrived[me] = outgoing[me].clone()
        rounds = range(1, n)
        worker.exchange([outgoing[(me + k) % n] for k in rounds], [group.ranks[(me + k) % n] for k in rounds],
                        [arrived[(me - k) % n] for k in rounds], [group.ranks[(me - k) % n] for k in rounds])
        return torch.cat(arrived)
    return swap


def _library(worker, group):
    def swap(x: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        return worker.all_to_all_v(x, send, recv, group)
    return swap


def _crossed(rows: torch.Tensor, recv: list[int], me: int) -> int:
    """The bytes of ``rows`` that came from other ranks (this rank's own share never leaves it)."""
    return (sum(recv) - recv[me]) * rows[:1].numel() * rows.element_size()


def plan_dispatch(expert: torch.Tensor, slot: torch.Tensor, experts: int, ranks: int):
    """Lesson 13: which request leaves first, and how many go to each rank.  ``expert[i]`` and ``slot[i]``:
    request i's expert and its place in that expert's queue.  Sorted by expert, then slot, the requests
    for rank d's experts (``d x E/n`` onwards) lie side by side, each expert's in the order it serves them,
    so one cut per rank makes the pieces.  Returns the order and ``counts[d][j]``, the requests for rank
    d's j-th expert (the receiving rank needs them to cut what arrives by expert)."""
    order = torch.argsort(expert * (int(slot.max()) + 1 if slot.numel() else 1) + slot)
    counts = torch.bincount(expert, minlength=experts).view(ranks, experts // ranks)
    return order, counts


class _Exchange(torch.autograd.Function):
    """An all-to-all whose backward is the all-to-all the other way: the gradients go home.
    ``traffic`` counts the bytes that arrive from other ranks, in each direction; ``seconds`` (lesson 15)
    the wall time spent in the exchange, in each direction (it blocks: the rank does nothing else)."""

    @staticmethod
    def forward(ctx, x, send, recv, swap, traffic, me, seconds):
        ctx.send, ctx.recv, ctx.swap, ctx.traffic, ctx.me, ctx.seconds = send, recv, swap, traffic, me, seconds
        began = time.perf_counter()
        out = swap(x, send, recv)
        seconds["forward"] += time.perf_counter() - began
        traffic.bytes["forward"] += _crossed(out, recv, me)
        return out

    @staticmethod
    def backward(ctx, grad):
        began = time.perf_counter()
        back = ctx.swap(grad.contiguous(), ctx.recv, ctx.send)
        ctx.seconds["backward"] += time.perf_counter() - began
        ctx.traffic.bytes["backward"] += _crossed(back, ctx.send, ctx.me)
        return back, None, None, None, None, None, None


class ExpertParallelMoE(nn.Module):
    """Lesson 13: ``moe``'s experts spread over ``group`` (this rank keeps its share), its router whole.

    ``last`` has what ``MoE.last`` has (for this rank's tokens), ``matrix``: how many tokens this rank
    sent to each rank in the latest forward (its row of the step's all-to-all matrix), ``times``: when
    each part of that forward began and ended (wall clock, comparable across the ranks of a machine),
    ``expert_cpu``: the CPU seconds its experts took (the work, whoever else shares the cores), and
    ``exchange`` (lesson 15): the seconds in the dispatch and combine all-to-alls, forward and backward."""

    def __init__(self, moe: MoE, worker, group, how: str = "library", traffic: Traffic | None = None):
        super().__init__()
        if how not in HOW:
            raise ValueError(f"unknown all-to-all {how!r}; use one of {', '.join(HOW)}")
        cfg, n = moe.cfg, len(group)
        check_experts(cfg.experts, n)
        self.cfg, self.per_rank, self.me = cfg, cfg.experts // n, group.index(worker.rank)
        self.router, self.pieces_per_line = moe.router, moe.pieces_per_line
        self.first = first = self.me * self.per_rank          # this rank's first expert, by its global number
        self.experts = nn.ModuleList(moe.experts[first:first + self.per_rank])
        self.worker, self.group = worker, group
        self.swap = _by_hand(worker, group) if how == "by_hand" else _library(worker, group)
        self.traffic = traffic if traffic is not None else Traffic()
        self.last: dict = {}
        self.extra_loss = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg, n, per, me = self.cfg, len(self.group), self.per_rank, self.me
        clock = [time.time()]
        tokens = x.reshape(-1, x.shape[-1])
        logits = self.router(tokens)
        routing = route(logits, cfg)
        self.extra_loss = (cfg.aux_weight * aux_loss(routing, cfg.experts)
                           + cfg.z_weight * z_loss(logits)) / self.pieces_per_line
        # 1. the kept requests, sorted by expert, then by slot; 2. the counts: [to rank d][its j-th expert]
        token, choice = torch.nonzero(routing.kept, as_tuple=True)
        expert, slot = routing.expert[token, choice], routing.slot[token, choice]
        order, counts = plan_dispatch(expert, slot, cfg.experts, n)
        token, choice, expert = token[order], choice[order], expert[order]
        clock.append(time.time())
        counts_in = self.worker.all_to_all(counts.clone(), self.group) if n > 1 else counts.clone()
        send, recv = counts.sum(dim=1).tolist(), counts_in.sum(dim=1).tolist()
        clock.append(time.time())
        # 3. dispatch, 4. my experts on what arrived (source by source, expert by expert), 5. combine
        exchange = {"forward": 0.0, "backward": 0.0}     # lesson 15: the all-to-alls' seconds (backward's: later)
        arrived = _Exchange.apply(tokens[token], send, recv, self.swap, self.traffic, me, exchange)
        clock.append(time.time())
        cpu = time.thread_time()
        pieces = arrived.split(counts_in.reshape(-1).tolist())
        done = torch.cat([self.experts[i % per](piece) for i, piece in enumerate(pieces)])
        cpu = time.thread_time() - cpu
        clock.append(time.time())
        back = _Exchange.apply(done, recv, send, self.swap, self.traffic, me, exchange)
        # (.to: under lesson 14's autocast the experts answer in 16 bits, the stream they add into is fp32)
        out = torch.zeros_like(tokens).index_add(0, token, (routing.gate[token, choice, None] * back).to(tokens.dtype))
        clock.append(time.time())
        asked = torch.bincount(routing.expert.reshape(-1), minlength=cfg.experts)
        kept = torch.bincount(expert, minlength=cfg.experts)
        self.last = {"asked": asked.tolist(), "kept": kept.tolist(), "dropped": int((asked - kept).sum()),
                     "matrix": send, "expert_cpu": cpu, "exchange": exchange, "choice": routing.expert[:, 0],
                     "times": dict(zip(PHASES, zip(clock, clock[1:])))}
        return out.view_as(x)


def parallelize(model, layout) -> None:
    """Lesson 13: the expert axis's transform of the one model (``parallelize.transforms``).  Every block's
    mixture of experts learns how many pieces of each line a rank holds (context or sequence parallelism:
    its balancing losses then count that share), and, across an expert group longer than one rank, spreads
    its experts over the group: an expert's gradient then holds every token of the group, so it is no
    longer split along the expert axis (``train.reduce.mark``)."""
    experts = [block.mlp for block in getattr(model, "blocks", ()) if isinstance(block.mlp, MoE)]
    piece = layout.line_piece
    for moe in experts:
        moe.pieces_per_line = piece.size if piece is not None else 1
    mesh = layout.mesh
    if not experts or mesh.size("expert") == 1:
        return
    for block in model.blocks:
        block.mlp = ExpertParallelMoE(block.mlp, layout.worker, mesh.group("expert"), layout.spec.parallel.all_to_all,
                                      layout.traffic)
        for p in block.mlp.experts.parameters():
            mark(p, remove=("expert",))


def one_process_name(name: str, module) -> str:
    """Lesson 13: a parameter's name in one process holding every expert, from its name on a rank
    (``blocks.0.mlp.experts.1.fc1.weight`` on the rank whose first expert is 2 is expert 3's)."""
    head, sep, tail = name.partition(".mlp.experts.")
    if not sep:
        return name
    block = module.get_submodule(head + ".mlp")
    index, rest = tail.split(".", 1)
    return f"{head}.mlp.experts.{getattr(block, 'first', 0) + int(index)}.{rest}"
