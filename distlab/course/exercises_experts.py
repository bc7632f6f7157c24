"""The exercises of lesson 13 (experts: a bigger model for the same compute), checked as ``exercises.py``
checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.  The expected
values come from the functions the lesson's ranks are checked against, never typed in.
"""
from __future__ import annotations

import math

import torch

from ..predict.traffic import Experts, capacity
from .checking import check


def capacity_slots(answer, *, tokens: int, experts: int, top_k: int, capacity_factor: float) -> bool | None:
    """Lesson 13: how many of a group's ``tokens`` requests one expert takes at most."""
    expected = capacity(tokens, Experts(experts, top_k, capacity_factor))
    return check("an expert's capacity", answer, expected, hints={
        math.ceil(capacity_factor * tokens / experts): "each token asks k experts: the requests are tokens x k.",
        math.ceil(tokens * top_k / experts): "that is the fair share; the capacity factor gives each expert room "
                                             "beyond it.",
        math.floor(capacity_factor * tokens * top_k / experts): "round up: a capacity of a fraction of a token "
                                                                "still needs a whole slot."},
        otherwise="factor x tokens x k / experts, rounded up.")


def crossing_tokens(answer, *, tokens: int, top_k: int, ranks: int) -> bool | None:
    """Lesson 13: the requests one rank sends to other ranks in one dispatch, if the router spreads its
    ``tokens`` evenly over experts spread evenly over ``ranks`` ranks (nothing dropped)."""
    expected = tokens * top_k * (ranks - 1) // ranks
    return check("tokens that cross ranks", answer, expected, hints={
        tokens * (ranks - 1) // ranks: "with k = 2 each token goes to two experts: two requests a token.",
        tokens * top_k: "the requests for this rank's own experts never leave it.",
        2 * tokens * top_k * (ranks - 1) // ranks: "that is there and back: count one dispatch only."},
        otherwise="tokens x k requests, of which the share for the other ranks' experts, (ranks - 1) / ranks, leave.")


def active_parameters(answer, *, d_model: int, hidden: int, experts: int, top_k: int) -> bool | None:
    """Lesson 13: the parameters of one MoE layer that one token's output goes through (router included)."""
    expert = 2 * d_model * hidden + hidden + d_model             # fc1 and fc2, weights and biases
    router = d_model * experts                                   # no bias
    expected = top_k * expert + router
    return check("parameters a token uses", answer, expected, hints={
        experts * expert + router: "that is the whole layer: a token goes through its k experts only.",
        top_k * expert: "every token goes through the router too.",
        top_k * 2 * d_model * hidden + router: "the experts' layers have biases as well as weights."},
        otherwise="k experts (two linear layers, weights and biases) and the router (d_model x experts, no bias).")


# -- build it: the all-to-all dispatch, on real ranks --------------------------------------------------
DISPATCH = dict(requests=24, experts=8, seed=0)      # per rank; the experts spread evenly over the ranks


def _requests(rank: int, requests: int, experts: int, seed: int):
    """A rank's kept requests in token order: rows (source rank, request number, expert) and the experts."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    expert = torch.randint(experts, (requests,), generator=g)
    rows = torch.stack([torch.full((requests,), rank), torch.arange(requests), expert], 1).double()
    return rows, expert


def dispatch_with_yours(worker, dispatch, requests: int, experts: int, seed: int) -> dict:
    """Lesson 13: on each rank, the learner's ``dispatch(expert, experts, ranks) -> (order, send)`` decides
    the order the requests leave in and how many go to each rank; the counts travel first, then the rows
    (``Worker.all_to_all_v``, the library's exchange).  Returns the rows that arrived, in order."""
    n, me = worker.world_size, worker.rank
    rows, expert = _requests(me, requests, experts, seed)
    order, send = dispatch(expert.clone(), experts, n)
    order, send = torch.as_tensor(order).long(), [int(c) for c in send]
    if len(send) != n or sum(send) != requests or sorted(order.tolist()) != list(range(requests)):
        return {"rank": me, "problem": f"rank {me}: order must list each of the {requests} requests once and "
                                       f"send give one count a rank ({n}) adding up to {requests}; got "
                                       f"{len(order)} indices and send = {send}"}
    recv = worker.all_to_all(torch.tensor(send)).tolist()
    return {"rank": me, "arrived": worker.all_to_all_v(rows[order], send, recv)}


def expected_arrivals(rank: int, ranks: int, requests: int, experts: int, seed: int) -> torch.Tensor:
    """Lesson 13: the rows rank ``rank`` must receive, from the library's plan (``plan_dispatch``): every
    source's requests for its experts, source by source, each expert's together in token order."""
    from ..experts.expert_parallel import plan_dispatch

    pieces = []
    for source in range(ranks):
        rows, expert = _requests(source, requests, experts, seed)
        slot = torch.zeros_like(expert)
        for e in range(experts):
            mine = (expert == e).nonzero().squeeze(1)
            slot[mine] = torch.arange(len(mine))
        order, counts = plan_dispatch(expert, slot, experts, ranks)
        pieces.append(rows[order].split(counts.sum(1).tolist())[rank])
    return torch.cat(pieces)


def all_to_all_dispatch(dispatch, *, ranks: int = 4) -> bool | None:
    """Lesson 13: run the learner's ``dispatch`` on ``ranks`` real ranks and compare what arrived at each
    with the library's plan (``distlab.compare``); name the rank and what went wrong."""
    from . import build
    from ..stepwise import compare

    name = "the all-to-all dispatch"
    records = build.attempt(name, dispatch, "distlab.course.exercises_experts:dispatch_with_yours",
                            world_size=ranks, **DISPATCH)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    per_rank = DISPATCH["experts"] // ranks
    for record in sorted(records, key=lambda r: r["rank"]):
        rank = record["rank"]
        if "problem" in record:
            print(f"{name}: not quite. {record['problem']}.")
            return False
        got, want = record["arrived"], expected_arrivals(rank, ranks, **DISPATCH)
        if compare({"arrived": got}, {"arrived": want}).same:
            continue
        stray = sorted({int(e) for e in got[:, 2]} - set(range(rank * per_rank, (rank + 1) * per_rank)))
        if stray:
            why = (f"rank {rank} received requests for expert(s) {stray}, which it does not hold (it holds "
                   f"{rank * per_rank} to {(rank + 1) * per_rank - 1}): sort the requests by expert before the "
                   "pieces are cut, and count send[d] as the requests for rank d's experts.")
        elif len(got) != len(want):
            why = f"rank {rank} received {len(got)} requests where {len(want)} are its experts'."
        else:
            why = (f"rank {rank} received the right requests in another order: each expert's together, in "
                   "token order within an expert (a stable sort by expert), so that it can cut them by expert.")
        print(f"{name}: not quite. {why}")
        return False
    print(f"{name}: correct. On {ranks} real ranks every request reached its expert's rank, in the library's order.")
    return True
