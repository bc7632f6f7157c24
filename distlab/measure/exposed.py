"""How much of the gradients' communication backward hides: the ways of lesson 15, timed side by side.

Introduced in lesson 15 (where the time goes).  A step of data parallelism is compute (forward and
backward) and then whatever communication is still to wait for: the **exposed** communication.  Sent
after backward (lesson 01's ways), all of it is exposed; sent during backward (``train.overlap``), only
what backward could not cover.  ``sweep`` trains the same model every way in one launch, round after
round (each round every way once, so a busy moment of the machine falls on all of them alike), and keeps
each step's times; ``summarise`` turns them into one number per way and round (the median over the
steps after warm-up of the slowest rank's exposed communication, and of the step), which is what the
course's one verdict rule (``verdict``) compares.  DDP's communication cannot be timed apart from its
backward (its hooks live inside DDP), so it has a step time and no exposed time.
"""
from __future__ import annotations

import statistics

from ..checks import check_int
from ..data_parallel.data_parallel import train

# the model of lesson 15's sweep: ~1.3 M parameters (5 MiB of fp32 gradients) and a compute large enough
# to hide some of it, on the 8x8 digits
MODEL = dict(model="mlp", width=512, depth=6, batch_size=64, lr=0.01, seed=3)
AFTER = {"by_hand": dict(method="by_hand"), "fused": dict(method="fused")}


def ways(bucket_sizes=(0.25, 1.0, 4.0, 16.0), *, hooks: bool = True, reduce_scatter: float | None = 4.0,
         ddp=(25.0,)) -> dict[str, dict]:
    """Lesson 15: the ways to compare, by name: after backward (per tensor, fused), during it (a hook per
    tensor, buckets of each size in MiB, reduce-scatter with buckets of ``reduce_scatter`` MiB), and DDP with
    each ``bucket_cap_mb`` in ``ddp`` (its default is 25)."""
    out = dict(AFTER)
    if hooks:
        out["hooks"] = dict(method="hooks")
    out.update({f"buckets {mb:g} MiB": dict(method="buckets", bucket_mb=mb) for mb in bucket_sizes})
    if reduce_scatter:
        out[f"reduce-scatter {reduce_scatter:g} MiB"] = dict(method="reduce_scatter", bucket_mb=reduce_scatter)
    out.update({f"ddp {mb:g} MiB": dict(method="ddp", bucket_mb=mb) for mb in ddp})
    return out


def check_sweep(world_size: int, *, config: dict | None = None, ways: dict, rounds: int = 3, steps: int = 10,
                skip: int = 2, backend: str = "torchrun", device: str = "cpu") -> None:
    """Lesson 15: every way must be a valid training job, before any process starts."""
    from ..processes.arguments import bind_arguments

    check_int("rounds", rounds)
    check_int("skip", skip, minimum=0)
    check_int("steps", steps, minimum=skip + 1)
    if not ways:
        raise ValueError("ways is empty: name at least one way to send the gradients")
    for settings in ways.values():
        bind_arguments(train, world_size, dict(MODEL, **(config or {}), **settings, steps=steps),
                       backend=backend, device=device)


def sweep(worker, *, config: dict | None = None, ways: dict, rounds: int = 3, steps: int = 10,
          skip: int = 2) -> dict[str, list[dict]]:
    """Lesson 15 (a training function for ``distlab.launch``): ``{way: [one dict a round]}`` on this rank,
    each ``{"steps": [(t_start, t_compute_end, t_comm_start, t_comm_end, t_end), ...], "buckets": the last
    step's buckets (``RankRecord.buckets``), "skip": skip}``."""
    out: dict[str, list[dict]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, settings in ways.items():
            record = train(worker, **dict(MODEL, **(config or {}), **settings, steps=steps, record_grads_at=()))
            out[name].append({"steps": [(s.t_start, s.t_compute_end, s.t_comm_start, s.t_comm_end, s.t_end)
                                        for s in record.steps],
                              "buckets": record.buckets[-1] if record.buckets else [], "skip": skip})
    return out


sweep.validate_args = check_sweep
sweep.supports = frozenset({"torchrun", "horovod", "cpu", "cuda"})


def summarise(ranks: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Lesson 15: per way, one number per round: ``"step"``, the median over the steps after warm-up of the
    step's wall time (first rank's start to last rank's end), ``"exposed"``, the median of the slowest
    rank's wait for communication after backward (None for DDP, whose wait is inside backward), and
    ``"compute"``, the slowest rank's forward and backward (hooks' launches included)."""
    out = {}
    for name in ranks[0]:
        steps, exposed, compute = [], [], []
        for rounds in zip(*(r[name] for r in ranks)):
            skip = rounds[0]["skip"]
            per_step = list(zip(*(r["steps"] for r in rounds)))[skip:]
            steps.append(statistics.median(max(s[4] for s in ss) - min(s[0] for s in ss) for ss in per_step))
            compute.append(statistics.median(max(s[1] - s[0] for s in ss) for ss in per_step))
            if per_step[0][0][2] is not None:
                exposed.append(statistics.median(max(s[3] - s[2] for s in ss) for ss in per_step))
        out[name] = {"step": steps, "exposed": exposed or None, "compute": compute}
    return out


def bucket_timeline(ranks: list[dict], way: str, round_: int = -1) -> list[dict]:
    """Lesson 15: the last step of one round of ``way``, per rank, in milliseconds from the step's start:
    ``{"rank", "compute": (0, end of backward), "wait": (start, end) of the wait after backward, "buckets":
    [(bucket, launched, done, bytes)]}``: what lesson 15's timeline draws (from the ranks' own records)."""
    out = []
    for rank, result in enumerate(ranks):
        entry = result[way][round_]
        t0, t_compute, t_comm0, t_comm1, _ = entry["steps"][-1]
        ms = lambda t: (t - t0) * 1e3                                    # noqa: E731
        out.append({"rank": rank, "compute": (0.0, ms(t_compute)),
                    "wait": None if t_comm0 is None else (ms(t_comm0), ms(t_comm1)),
                    "buckets": [(b["bucket"], ms(b["launched"]), ms(b["done"]), b["bytes"]) for b in entry["buckets"]]})
    return out


def overlapped_share(timeline: list[dict]) -> float:
    """Lesson 15: of the time the buckets spent in flight (launch to the return of their wait), summed over
    buckets and ranks, the share that lay inside forward and backward: communication that travelled while
    the rank computed.  0 for buckets all launched after backward; near 1 when they finished before it ended."""
    inside = total = 0.0
    for r in timeline:
        end = r["compute"][1]
        for _, launched, done, _ in r["buckets"]:
            total += done - launched
            inside += max(0.0, min(done, end) - launched)
    return inside / total if total else 0.0
