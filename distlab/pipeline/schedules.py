"""Pipeline schedules: in what order each stage runs the forward and backward of each micro-batch.

Introduced in lesson 06 ("Splitting the model").  When a model is cut into ``p`` stages on
``p`` ranks, a batch is cut into ``m`` micro-batches so that the stages can work at the same
time on different micro-batches.  A *schedule* is just a list per stage: which pass of which
micro-batch to run next.  It is plain data, so it can be printed, drawn, checked and
simulated without starting a single process; ``pipeline.py`` then runs it on real ranks.

=============  ============================================================================
schedule       the order on every stage
=============  ============================================================================
``gpipe``      all ``m`` forwards, then all ``m`` backwards (GPipe, Huang et al. 2019).
               Simple; every stage holds the activations of all ``m`` micro-batches.
``1f1b``       a few forwards to fill the pipe (warm-up), then one forward, one backward,
               ... (steady state), then the last backwards (cool-down).  Same bubble as
               GPipe, but stage ``s`` never holds more than ``p - s`` micro-batches.
``interleaved`` 1F1B where every rank holds ``v`` smaller chunks of the model (rank ``s`` has
               chunks ``s, s + p, s + 2p, ...``), as in Megatron-LM (Narayanan et al. 2021):
               more, shorter passes, so the pipe fills sooner and the bubble shrinks ``v``-fold,
               at the price of ``v`` times more messages.
``zb_h1``      lesson 15: 1F1B with the backward split in two (Qi et al. 2023, "Zero Bubble
               Pipeline Parallelism", ZB-H1): B, the gradient of the stage's *input*, is
               sent back at once; W, its *parameters'* gradient, waits and fills the drain.
=============  ============================================================================

A naive split of the model (no pipelining at all) is GPipe with one micro-batch: the batch
goes forward through every stage and back again while all but one stage wait.

``simulate`` predicts when every pass starts and ends from their costs and from what each
pass waits for; the *bubble* is the fraction of the stages' time spent waiting.  For GPipe
and 1F1B with equal stages it is ``(p - 1) / (m + p - 1)`` (``predict.bubbles.bubble_fraction``);
the lesson compares both with the bubble measured on real ranks.  Lesson 15 ("Where the time goes")
adds the W pass, ZB-H1 and the costs a real run adds: a message's time, each receive's (a rendezvous)
and the overhead between passes, fixed or drawn from a run's own (``zero_bubble`` measures them).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Op:
    """One pass of one micro-batch on one stage: ``kind`` "F" (forward), "B" (backward) or, lesson 15,
    "W" (the parameters' half of a split backward; then "B" is only the input's half).

    ``chunk`` is which of the rank's model chunks runs it (always 0 unless interleaved).
    """

    kind: str
    micro: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.micro}" + (f".{self.chunk}" if self.chunk else "")


def check_schedule(name: str, stages: int, micro_batches: int, chunks: int = 1) -> None:
    """Lesson 06: the settings a schedule needs, checked before any process starts."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    for what, value in (("stages", stages), ("micro_batches", micro_batches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{what} must be a positive integer, got {value!r}")
    if name == "interleaved":
        if chunks < 2:
            raise ValueError("the interleaved schedule needs chunks >= 2 model chunks per rank "
                             "(with one chunk it is plain 1f1b)")
        if micro_batches % stages:
            raise ValueError(f"the interleaved schedule sends micro-batches round in groups of {stages} "
                             f"(one per stage): micro_batches={micro_batches} must be a multiple of {stages}")
    elif chunks != 1:
        raise ValueError(f"chunks={chunks} needs schedule='interleaved'; {name} gives each rank one chunk")
    if name == "zb_h1" and micro_batches < stages:
        raise ValueError(f"zb_h1 needs micro_batches >= stages (got {micro_batches} for {stages} stages): stage s "
                         f"holds back s W passes to fill the drain, and ZB-H1's bubble (p-1)(T_F+T_B-T_W) holds "
                         f"only from m = p on; give micro_batches >= {stages}, or use 1f1b")


def gpipe(stages: int, micro_batches: int, stage: int) -> list[Op]:
    """Lesson 06: every forward, then every backward."""
    return [Op("F", i) for i in range(micro_batches)] + [Op("B", i) for i in range(micro_batches)]


def one_f_one_b(stages: int, micro_batches: int, stage: int) -> list[Op]:
    """Lesson 06: 1F1B.  Stage ``s`` runs ``p - 1 - s`` forwards ahead, then alternates."""
    m = micro_batches
    warmup = min(stages - 1 - stage, m)
    ops = [Op("F", i) for i in range(warmup)]                   # warm-up: fill the pipe
    for i in range(m - warmup):                                 # steady state: one in, one out
        ops += [Op("F", warmup + i), Op("B", i)]
    ops += [Op("B", i) for i in range(m - warmup, m)]           # cool-down: drain it
    return ops


def zb_h1(stages: int, micro_batches: int, stage: int) -> list[Op]:
    """Lesson 15: ZB-H1 (Qi et al. 2023, section 2.1): 1F1B's warm-up and steady state with the
    backward split into B (the input's gradient, sent back at once) and W (the parameters', later).

    Stage ``s`` holds back its first ``s`` W passes: every stage then keeps at most ``p`` micro-batches
    (stage 0's peak under 1F1B), and the held-back W's run in the drain, where 1F1B idles.  The same
    order as PyTorch's ``ScheduleInterleavedZeroBubble`` with one stage a rank (the paper's ZB1P).
    """
    p, m, s = stages, micro_batches, stage
    warmup = min(p - 1 - s, m)
    weights = iter(range(m))                                    # the W passes, in micro-batch order

    def w(i: int) -> list[Op]:                                  # round i's W, from round s on
        return [Op("W", next(weights))] if i >= s else []

    ops = [Op("F", i) for i in range(warmup)]                   # warm-up: fill the pipe, as 1F1B
    for i in range(m - warmup):                                 # steady state: one in, one B out, a W
        ops += [Op("F", warmup + i), Op("B", i)] + w(i)
    for i in range(m - warmup, m):                              # cool-down: the last B's, each with a W
        ops += [Op("B", i)] + w(i)
    ops += [Op("W", j) for j in weights]                        # drain: the held-back W's fill the bubble
    return ops


def interleaved(stages: int, micro_batches: int, stage: int, chunks: int) -> list[Op]:
    """Lesson 06: interleaved 1F1B with ``chunks`` model chunks per rank (Megatron-LM's order).

    Micro-batches go round in groups of ``p``: forward pass number ``k`` of this rank is
    micro-batch ``(k // (p v)) p + k mod p`` on chunk ``(k // p) mod v``; backwards visit
    the chunks in the opposite order.  The warm-up is longer than plain 1F1B's, because a
    micro-batch now passes every rank ``v`` times before its first backward can start.
    """
    p, v, total = stages, chunks, micro_batches * chunks

    def op(kind: str, k: int) -> Op:
        chunk = (k // p) % v
        return Op(kind, (k // (p * v)) * p + k % p, chunk if kind == "F" else v - 1 - chunk)

    warmup = min((p - 1 - stage) * 2 + (v - 1) * p, total)
    ops = [op("F", k) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [op("F", warmup + k), op("B", k)]
    ops += [op("B", k) for k in range(total - warmup, total)]
    return ops


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b, "interleaved": interleaved, "zb_h1": zb_h1}


def schedule(name: str, stages: int, micro_batches: int, chunks: int = 1) -> list[list[Op]]:
    """Lesson 06: the ops of every stage, ``[stage 0's list, stage 1's list, ...]``."""
    check_schedule(name, stages, micro_batches, chunks)
    if name == "interleaved":
        return [interleaved(stages, micro_batches, s, chunks) for s in range(stages)]
    return [SCHEDULES[name](stages, micro_batches, s) for s in range(stages)]


def as_ops(order) -> list[list[Op]]:
    """Lesson 06: a schedule written by hand, ``[[("F", 0), ("B", 0), ...], ...]`` (one list per stage;
    ``Op``s or ``(kind, micro)`` pairs), as the ``Op`` lists ``schedule`` returns."""
    return [[op if isinstance(op, Op) else Op(*op) for op in stage] for stage in order]


def check_order(order, stages: int, micro_batches: int) -> list[list[Op]]:
    """Lesson 06: a hand-written order, checked before any process runs it (a wrong one would hang
    the ranks, each waiting for a message the other never sends): one list per stage, every pass
    of every micro-batch exactly once, and no deadlock (``simulate``).  Returns it as ``Op`` lists.
    Lesson 15: an order with W passes splits every backward: then each W is due once too."""
    if not isinstance(order, (list, tuple)) or len(order) != stages:
        raise ValueError(f"an order is one list of passes per stage: {stages} lists, got {order!r:.80}")
    try:
        ops = as_ops(order)
    except TypeError as err:
        raise ValueError(f"each pass is a pair such as ('F', 0) or ('B', 3): {err}") from err
    kinds = "FBW" if any(op.kind == "W" for stage_ops in ops for op in stage_ops) else "FB"
    want = sorted(Op(k, i) for k in kinds for i in range(micro_batches))
    for s, stage_ops in enumerate(ops):
        if sorted(stage_ops) != want:
            missing = sorted(set(want) - set(stage_ops))
            extra = sorted(op for op in set(stage_ops) if stage_ops.count(op) > 1 or op not in want)
            each = " and ".join(f"{k}0..{k}{micro_batches - 1}" for k in kinds)
            raise ValueError(f"stage {s} must run each of {each} exactly once: missing "
                             f"{', '.join(map(str, missing)) or 'none'}, twice or unknown "
                             f"{', '.join(map(str, extra)) or 'none'}")
    simulate(ops)           # raises ValueError, naming each stage's next pass, if some stage waits for ever
    return ops


def held_activations(ops: list[Op]) -> int:
    """Lesson 06: the most micro-batches whose activations a stage keeps at once, per the
    schedule (a forward stores them, the backward of the same micro-batch and chunk frees
    them; lesson 15: when the backward is split, its W frees them, since W still needs them).
    ``pipeline.py`` counts the same thing on the real ranks, and ``predict.bubbles.held_micro_batches``
    is its closed form."""
    held, peak = set(), 0
    frees = "W" if any(op.kind == "W" for op in ops) else "B"
    for op in ops:
        if op.kind == "F":
            held.add((op.micro, op.chunk))
        elif op.kind == frees:
            held.discard((op.micro, op.chunk))
        peak = max(peak, len(held))
    return peak


def simulate(ops_per_stage: list[list[Op]], forward=1.0, backward=2.0, weight=0.0,
             message=0.0, *, receive=0.0, overhead=0.0, draw=None) -> list[list[dict]]:
    """Lesson 06: when would every pass start and end, if a forward of one chunk took
    ``forward`` and a backward ``backward`` seconds and messages were free?

    ``forward`` and ``backward`` are one number for every chunk (the textbook's equal chunks) or
    one per virtual stage (``chunk * p + stage``, the model's order): real cuts are seldom equal,
    and interleaving's promise holds only for equal chunks.  Lesson 15: ``weight`` is what a W pass
    costs (then ``backward`` is B's, the input's half); a schedule without W passes runs both halves in
    its B, which costs ``backward + weight``.  ``message``: the seconds a message takes between
    stages (an activation forward, a gradient back), added to every wait for another stage's pass.
    Two costs measured on real ranks (``zero_bubble``): ``receive``, the seconds a receive takes once
    *both* sides are ready (gloo moves a message only after its receive is posted, a rendezvous), so
    paid on every receive from the later of the send and the stage being free, even when the message
    was sent long before (``message`` is then hidden); ``overhead``, the seconds a stage spends after
    each pass before it can start the next (posting the send, the Python between passes): idle time.
    ``draw``: a function ``draw(what, virtual)`` giving seconds, asked afresh for every pass (``what``
    its kind; a schedule without W passes asks for its whole B), every receive ("receive") and every
    overhead ("overhead") instead of the fixed costs: ``zero_bubble.expected`` draws real ones.

    A pass waits for the stage to be free and for its input: the forward of the previous
    chunk in the model (on the stage before) or the backward of the next one (on the stage
    after); a W waits for its own B.  Returns, per stage, ``{"op", "start", "end"}`` in the
    stage's order.  A schedule in which some stage would wait for ever raises ``ValueError`` (a deadlock).
    """
    p = len(ops_per_stage)
    v = 1 + max(op.chunk for ops in ops_per_stage for op in ops)
    fused = not any(op.kind == "W" for ops in ops_per_stage for op in ops)

    def cost(what: str, virtual: int) -> float:
        if draw is not None:
            return draw(what, virtual)
        at = [c if isinstance(c, (int, float)) else c[virtual] for c in (forward, backward, weight)]
        return {"F": at[0], "B": at[1] + at[2] if fused else at[1], "W": at[2], "receive": receive,
                "overhead": overhead}[what]

    done: dict[tuple[str, int, int], float] = {}    # (kind, micro, virtual stage) -> end time
    free, nxt = [0.0] * p, [0] * p
    timeline: list[list[dict]] = [[] for _ in range(p)]
    last = p * v - 1
    while any(nxt[s] < len(ops_per_stage[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while nxt[s] < len(ops_per_stage[s]):
                op = ops_per_stage[s][nxt[s]]
                virtual = op.chunk * p + s
                if op.kind == "F":
                    need = ("F", op.micro, virtual - 1) if virtual > 0 else None
                elif op.kind == "B":
                    need = ("B", op.micro, virtual + 1) if virtual < last else ("F", op.micro, virtual)
                else:
                    need = ("B", op.micro, virtual)
                if need is not None and need not in done:
                    break
                cross = need is not None and need[2] != virtual          # from another stage: a message
                ready = 0.0 if need is None else done[need] + (message if cross else 0.0)
                start = max(free[s], ready) + (cost("receive", virtual) if cross else 0.0)
                end = start + cost(op.kind, virtual)
                done[(op.kind, op.micro, virtual)] = end
                free[s] = end + cost("overhead", virtual)
                timeline[s].append({"op": op, "start": start, "end": end})
                nxt[s] += 1
                progressed = True
        if not progressed:
            stuck = {s: str(ops_per_stage[s][nxt[s]]) for s in range(p) if nxt[s] < len(ops_per_stage[s])}
            raise ValueError(f"deadlock: every stage waits for another, next ops {stuck}")
    return timeline


def bubble(timeline: list[list[dict]]) -> float:
    """Lesson 06: the idle fraction of a (simulated or measured) timeline: 1 - busy / (p * span)."""
    start = min(t["start"] for row in timeline for t in row)
    end = max(t["end"] for row in timeline for t in row)
    busy = sum(t["end"] - t["start"] for row in timeline for t in row)
    return 1 - busy / (len(timeline) * (end - start))


def timeline(records, step: int) -> list[list[dict]]:
    """Lesson 06: the passes each stage really ran at ``step``, as ``simulate`` gives
    them (``{"op", "start", "end"}`` per pass, stage by stage), so that the measured bubble
    (``bubble``) and picture use the same code as the predicted ones."""
    order = sorted(records, key=lambda r: r.config.get("stage", r.rank))
    return [[{"op": Op(e["kind"], e["micro"], e["chunk"]), "start": e["start"], "end": e["end"]}
             for e in r.events if e["step"] == step and e["kind"] in ("F", "B", "W")] for r in order]
