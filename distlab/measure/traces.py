"""Where the time goes: one training step traced with PyTorch's profiler on every rank.

Introduced in lesson 15 (Where the time goes).  A ``StepRecord`` holds five clock readings that the
loop chose to take; a *trace* holds everything the profiler saw: every operator on the rank's main
thread, every collective on the backend's own threads, with their start and duration in microseconds.
``train`` is ``data_parallel.train`` (or ``fsdp.train``: ``TRAINERS``) with one step, ``trace_step``,
profiled on every rank (``torch.profiler.profile``, CPU activity, and CUDA's on a GPU rank) and written
as a Chrome trace,
``trace_rank{r}.json`` in ``trace_dir``: open it in https://ui.perfetto.dev (or ``chrome://tracing``),
or read it back with ``read_trace``.  The loop itself does not change: it runs every step inside
``around_step(step)`` (``train.loop.train_steps``), and ``profile_step`` makes the one that profiles
(``measure`` sits above ``train`` and ``data_parallel`` in the package layers: it is handed to them).

What torch 2.13's profiler writes for a gloo all-reduce (found by tracing one, on CPU ranks):

* on the thread that called it, a ``cpu_op`` named ``c10d::allreduce_``: the collective being
  *launched* (tens of microseconds: the rank's wait for the result is not an event of its own);
* on one of gloo's two worker threads (named ``pt_gloo_runloop``), a ``user_annotation`` named
  ``gloo:all_reduce``, from when gloo started the collective to when it ended: the bytes travelling,
  and the waiting for the other rank (likewise ``gloo:broadcast``, ``gloo:all_gather``, ...);
* FSDP2 (``trainer="fsdp"``) gathers a layer's parameters with ``c10d::_allgather_base_`` launched and
  ``gloo:all_gather`` on gloo's thread, and reduce-scatters its gradients with ``c10d::_reduce_scatter_base_``
  and ``gloo:all_reduce`` (gloo reduce-scatters by all-reducing); its main thread *waits* for them inside
  FSDP2's annotations ``FSDP::all_gather`` (and ``..._copy_out``, where an asynchronous one is waited for),
  ``FSDP::post_backward_reduce`` and ``..._rs_wait``, counted as communication, and in backward these sit
  inside autograd's ``evaluate_function`` (compute): ``exposed_communication`` takes those waits out of it;
* no ``record_param_comms`` event on gloo (NCCL ranks have it, and ``nccl:all_reduce`` on the
  calling thread, and ``ncclDevKernel_...`` kernels on the GPU).

``read_trace`` sorts the events of the traced step into **communication** (those names) and
**compute** (every other operator of the main thread: ``aten::...``, autograd's
``...Backward0``; on a GPU rank the GPU's kernels), keeping the outermost ones (``aten::linear``, not
the ``aten::addmm`` inside it); an operator inside a collective belongs to the collective, a
collective launched from inside an operator (a gradient hook in backward) is kept as communication.
``exposed_communication`` is the time some communication was in flight while nothing was computed:
for a blocking all-reduce after backward, the all-reduce's whole wall time; hidden behind backward,
less.  It should agree with what the rank's ``StepRecord`` says of ``communicate`` (the tests check
it); ``timeline`` lays the ranks' intervals side by side (the ranks of one machine share the
profiler's clock) for ``widgets.traces`` to draw.
"""
from __future__ import annotations

import inspect
import json
import os
from contextlib import contextmanager, nullcontext
from typing import NamedTuple

from torch.profiler import ProfilerActivity, profile, record_function

from ..checks import check_int
from ..data_parallel import data_parallel
from ..records import RankRecord
from ..zero import fsdp

MARK = "distlab step"        # the record_function around the traced step: where the step starts and ends
COMMUNICATION = ("gloo:", "nccl:", "c10d::", "record_param_comms", "ncclDevKernel", "ncclKernel",
                 "FSDP::all_gather", "FSDP::post_backward_reduce", "FSDP::post_backward_rs_wait")   # (FSDP2's own)
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")     # the categories of what a GPU itself did


def trace_path(folder: str, rank: int) -> str:
    """Lesson 15: where rank ``rank`` writes its trace."""
    return os.path.join(folder, f"trace_rank{rank}.json")


# ---------------------------------------------------------------------------------------------
# writing: one step profiled on every rank
# ---------------------------------------------------------------------------------------------
def check_trace(trace_step, trace_dir, steps: int) -> None:
    """Lesson 15: ``trace_step`` must be one of the run's steps, ``trace_dir`` a folder the ranks can write."""
    check_int("trace_step", trace_step, minimum=0)
    if trace_step >= steps:
        raise ValueError(f"trace_step={trace_step} is outside the run: steps are 0..{steps - 1}; "
                         f"trace one of them, or train for more steps")
    if not isinstance(trace_dir, (str, os.PathLike)) or not str(trace_dir):
        raise ValueError(f"trace_dir must be the path of a folder, got {trace_dir!r}")
    path = os.path.abspath(trace_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"trace_dir={str(trace_dir)!r} is a file, not a folder: give a folder for the traces")
    existing = path
    while not os.path.exists(existing):             # the folder is made when the trace is written
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"trace_dir={str(trace_dir)!r} cannot be written ({existing} is "
                         f"{'not a folder' if not os.path.isdir(existing) else 'read-only'}): choose another folder")


def profile_step(step: int, folder: str, worker):
    """Lesson 15: ``around_step`` for the loop: step ``step`` runs under the profiler, every other as it is."""
    return lambda s: _profiled(s, folder, worker) if s == step else nullcontext()


@contextmanager
def _profiled(step: int, folder: str, worker):
    """The step inside ``torch.profiler.profile`` and a ``record_function`` that marks it; the trace written
    when it ends (not when it fails)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if worker.device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=False) as prof:
        with record_function(f"{MARK} {step}"):
            yield
            worker.synchronize()                    # a GPU's queued work belongs to the step
    os.makedirs(folder, exist_ok=True)
    prof.export_chrome_trace(trace_path(folder, worker.rank))


TRAINERS = {"data_parallel": data_parallel.train,     # lesson 06: one all-reduce (or a bucket's) per step
            "fsdp": fsdp.train}                       # lesson 08: ZeRO-3, all-gathers and reduce-scatters per layer


def train(worker, *, trace_step: int, trace_dir: str, trainer: str = "data_parallel", **settings) -> RankRecord:
    """Lesson 15: ``TRAINERS[trainer](worker, **settings)`` with step ``trace_step`` traced on every rank,
    written to ``trace_path(trace_dir, rank)``; the record's config names the trace."""
    run = TRAINERS[trainer]
    record = run(worker, around_step=profile_step(trace_step, trace_dir, worker), **settings)
    record.config.update(trace_step=trace_step, trace_dir=str(trace_dir), trainer=trainer)
    return record


def _validate(world_size: int, *, trace_step, trace_dir, trainer="data_parallel", backend: str = "torchrun",
              device: str = "cpu", **settings) -> None:
    """Before any process starts: the trainer's own checks, then the trace's."""
    from ..processes.arguments import bind_arguments

    if trainer not in TRAINERS:
        raise ValueError(f"traces.train traces trainer {', '.join(map(repr, TRAINERS))}, got {trainer!r}")
    if "around_step" in settings:
        raise ValueError("traces.train sets around_step itself (it profiles trace_step): leave it out")
    bind_arguments(TRAINERS[trainer], world_size, settings, backend=backend, device=device)
    steps = settings.get("steps", inspect.signature(TRAINERS[trainer]).parameters["steps"].default)
    check_trace(trace_step, trace_dir, steps)


train.validate_args = _validate
train.supports = frozenset({"torchrun", "cpu", "cuda"})   # Horovod's collectives are not the profiler's to see


# ---------------------------------------------------------------------------------------------
# reading: the trace as intervals of compute and communication
# ---------------------------------------------------------------------------------------------
class Trace(NamedTuple):
    """Lesson 15: one rank's traced step.  ``intervals``: ``{"rank", "kind", "name", "thread", "start",
    "end"}`` with ``kind`` "compute" or "communication", ``thread`` "main", "gpu D stream S" or the
    thread's name, times in seconds since the step started; ``start_us``: when it started, on the
    profiler's clock (shared by the ranks of one machine)."""

    rank: int
    step: int
    host: str
    start_us: float
    seconds: float
    intervals: list[dict]


def kind_of(event: dict) -> str | None:
    """Lesson 15: "communication", "compute" or None (neither: a marker, a flow arrow, metadata)."""
    name, cat = str(event.get("name", "")), event.get("cat")
    if event.get("ph") != "X" or name.startswith(MARK) or cat not in ("cpu_op", "user_annotation", *GPU_WORK):
        return None
    if name.startswith(COMMUNICATION):
        return "communication"
    return "compute" if cat != "user_annotation" else None


def read_trace(path: str) -> Trace:
    """Lesson 15: the step a rank traced (``train``) as intervals of compute and communication."""
    with open(path) as f:
        trace = json.load(f)
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    marks = [e for e in events or () if e.get("ph") == "X" and str(e.get("name", "")).startswith(MARK)]
    if not marks:
        raise ValueError(f"{path} is no trace of a distlab step (no {MARK!r} event): write one with traces.train")
    mark = marks[0]
    start, end, main = mark["ts"], mark["ts"] + mark["dur"], (mark["pid"], mark["tid"])
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and "python" not in e["args"]["name"]:
            names[(e["pid"], e["tid"])] = e["args"]["name"].split("(")[-1].rstrip(")")
    threads: dict = {}
    for e in events:
        if kind_of(e) is not None and e["ts"] < end and e["ts"] + e.get("dur", 0) > start:
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
    rank = trace.get("distributedInfo", {}).get("rank", 0)
    intervals = []
    for key, found in threads.items():
        gpu = found[0].get("cat") in GPU_WORK
        if not gpu and key != main and all(kind_of(e) == "compute" for e in found):
            continue                               # another thread's operators (a data loader): not the step's
        label = "main" if key == main else f"gpu {key[0]} stream {key[1]}" if gpu else \
            f"{names.get(key, 'thread')} {key[1]}"
        outer_end, outer_kind = float("-inf"), None
        for e in sorted(found, key=lambda e: (e["ts"], -e["dur"])):
            kind, e_end = kind_of(e), e["ts"] + e["dur"]
            if e["ts"] >= outer_end:               # outermost: a new interval
                outer_end, outer_kind = e_end, kind
            elif not (kind == "communication" and outer_kind == "compute"):
                continue                           # inside another: already counted (or part of a collective)
            intervals.append({"rank": rank, "kind": kind, "name": e["name"], "thread": label,
                              "start": (max(e["ts"], start) - start) / 1e6, "end": (min(e_end, end) - start) / 1e6})
    intervals.sort(key=lambda i: (i["start"], i["end"]))
    step = int(mark["name"][len(MARK):])
    return Trace(rank, step, trace.get("host_name", ""), start, (end - start) / 1e6, intervals)


def _union(spans) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlap(xs, ys) -> float:
    """The total length where two unions of intervals overlap."""
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        total += max(0.0, min(xs[i][1], ys[j][1]) - max(xs[i][0], ys[j][0]))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def exposed_communication(intervals: list[dict]) -> float:
    """Lesson 15: seconds during which one rank had communication in flight and computed nothing.

    On a CPU rank the computing is its main thread's; on a GPU rank, its GPU's (the CPU only queues
    work there), and the communication the NCCL kernels'."""
    if len({i["rank"] for i in intervals}) > 1:
        raise ValueError("exposed_communication reads one rank's intervals: pass read_trace(path).intervals")
    on_gpu = [i for i in intervals if i["thread"].startswith("gpu ")]
    where = on_gpu or [i for i in intervals if i["kind"] == "communication" or i["thread"] == "main"]
    comm = _union((i["start"], i["end"]) for i in where if i["kind"] == "communication")
    compute = _union((i["start"], i["end"]) for i in where if i["kind"] == "compute")
    if not on_gpu:                 # a main thread waiting in FSDP2's collectives (in backward) is not computing
        held = _union((i["start"], i["end"]) for i in where if i["name"].startswith("FSDP::") and i["thread"] == "main")
        compute = _minus(compute, held)
    return sum(b - a for a, b in comm) - _overlap(comm, compute)


def _minus(xs, ys) -> list[tuple[float, float]]:
    """A union of intervals with another's taken out."""
    out = []
    for a, b in xs:
        for c, d in ys:
            if c < b and d > a:
                if c > a:
                    out.append((a, c))
                a = max(a, d)
        if a < b:
            out.append((a, b))
    return out


def timeline(traces: list[Trace]) -> list[dict]:
    """Lesson 15: every rank's intervals, in seconds since the first rank started the step (the ranks of
    one host share the profiler's clock; traces from several hosts each start at their own 0): plain data
    for ``widgets.traces.trace_figure``."""
    origin = min(t.start_us for t in traces) if len({t.host for t in traces}) == 1 else None
    out = []
    for t in sorted(traces, key=lambda t: t.rank):
        shift = 0.0 if origin is None else (t.start_us - origin) / 1e6
        out += [dict(i, start=i["start"] + shift, end=i["end"] + shift) for i in t.intervals]
    return out


def exposed_by_rank(traces: list[Trace]) -> dict[int, float]:
    """Lesson 15: each rank's exposed communication in its traced step (seconds)."""
    return {t.rank: exposed_communication(t.intervals) for t in traces}
