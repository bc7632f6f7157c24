"""Watching a long job from outside: what each rank's metrics file says, read while it grows.

Introduced in lesson 10 (failure is normal at scale).  The ranks append one JSON line per event
to ``metrics_<rank>.jsonl`` (``distlab.long_runs.metrics``); ``RunMonitor`` reads those files from another
process (``distlab monitor RUN_DIR``, the monitor widget) and never talks to the job, so watching
cannot slow it down or break it.  ``poll()`` reads only the complete lines appended since the
last call; ``status()`` makes a ``JobStatus`` of them: per rank its step, loss, throughput,
seconds since its last line, restarts and checkpoints; for the job its state (``starting``,
``running``, ``finished``, ``failed``: a rank left ``error_<rank>.json``, ``restarting``: the same
while torchrun has restarts left, ``stalled``: a rank silent for ``stall_seconds``) and who holds
it up.  The rank that reports an error is not always the one that broke (a rank killed outright
writes nothing, its peers then fail), so a failed job also names the ranks that left no error file.
A slow rank in a synchronous job is never more than a step behind (every all-reduce waits for it),
but its compute time gives it away: ``JobStatus.slowest``.  After a restart (``--max-restarts``) a
rank's new life writes a ``start`` line and steps again from its checkpoint: the loss history
drops the lost steps and notes the restart, so the curve shows the job going back and carrying on.
"""
from __future__ import annotations

import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field

from . import diagnosis
from .metrics import JsonLines

STALL_SECONDS = 30.0      # no line for this long from a rank that is running: call it stalled
WINDOW = 5                # throughput over the last WINDOW steps
SLOWER = 2.0, 0.01        # a straggler computes 2x as long as the others' median, and 10 ms more
_METRICS = re.compile(r"^metrics_(\d+)\.jsonl$")


@dataclass
class RankStatus:
    """Lesson 10: one rank, as its metrics file shows it."""
    rank: int
    state: str = "starting"                 # starting, running, finished (wrote ``end``), stalled, stopped
    step: int = 0                           # steps done
    total: int | None = None
    loss: float | None = None               # None on ranks that do not compute it (pipeline stages)
    samples_per_second: float | None = None  # over the last few steps
    compute_seconds: float | None = None    # a step's time outside communication (None: not timed apart)
    age: float | None = None                # seconds since its last line
    restarts: int = 0                       # how many times the job was restarted before this life
    pid: int | None = None                  # this life's process id (on the rank's own machine)
    resumed_from: int | None = None         # the checkpoint step this life started from
    checkpoint: int | None = None           # the last checkpoint step it wrote
    losses: list[tuple[int, float]] = field(default_factory=list)   # (step, loss), this trajectory
    restart_points: list[tuple[int, int]] = field(default_factory=list)  # (restart, step resumed from)
    lost_steps: int = 0                     # steps done and then lost to restarts (redone since)


@dataclass
class JobStatus:
    """Lesson 10: the whole job at one moment (``RunMonitor.status``)."""
    run_dir: str
    state: str                              # starting, running, finished, failed, restarting, stalled
    ranks: list[RankStatus]
    world_size: int | None = None           # from the lines (None: nothing read yet)
    behind: int | None = None               # the rank with the fewest steps, when they differ
    lag: int = 0                            # how many steps it is behind the furthest rank
    slowest: int | None = None              # a straggler: the rank that computes much longer a step
    slowdown: float = 1.0                   # ... how many times as long as the others' median
    error: dict | None = None               # the failed rank's error_<rank>.json
    stalled: list[int] = field(default_factory=list)   # running ranks silent for stall_seconds
    silent: list[int] = field(default_factory=list)    # failed: unfinished ranks that left no error file

    min_step = property(lambda self: min((r.step for r in self.ranks), default=0))
    max_step = property(lambda self: max((r.step for r in self.ranks), default=0))
    over = property(lambda self: self.state in ("finished", "failed"))

    @property
    def missing(self) -> list[int]:
        """Ranks of the job with no file here (not started yet, or on another node's disk)."""
        present = {r.rank for r in self.ranks}
        return [r for r in range(self.world_size or 0) if r not in present]


class _Rank:
    """What has been read of one rank's file so far."""

    def __init__(self):
        self.last, self.start, self.checkpoint, self.ended, self.lost = None, None, None, False, 0
        self.history: dict[int, float | None] = {}
        self.window, self.restart_points = [], []   # the last steps of this life; (restart, resumed from)

    def read(self, line: dict) -> None:
        event = line.get("event")
        self.last = line
        if event == "start":
            resumed = line.get("resumed_from") or 0
            if self.start is not None:           # a new life: what was done after the checkpoint is lost
                self.lost += max([s for s in self.history if s > resumed], default=resumed) - resumed
                self.restart_points.append((line.get("restart", 0), resumed))
            self.history = {s: v for s, v in self.history.items() if s <= resumed}
            self.start, self.window, self.ended = line, [], False
        elif event == "step":
            self.history[line["step"]] = line.get("loss")
            self.window = (self.window + [line])[-WINDOW:]
        elif event == "checkpoint":
            self.checkpoint = line["step"]
        elif event == "end":
            self.ended = True


class RunMonitor:
    """Lesson 10: follow the metrics files of the run in ``run_dir`` (which may not exist yet)."""

    def __init__(self, run_dir: str, stall_seconds: float = STALL_SECONDS):
        self.run_dir, self.stall_seconds = os.fspath(run_dir), float(stall_seconds)
        self._ranks: dict[int, _Rank] = {}
        self._files: dict[int, JsonLines] = {}
        self._lock = threading.Lock()         # the widget's thread and a waiting cell may both poll

    def poll(self) -> bool:
        """Read every rank's new complete lines (ranks found from the files present); True if any."""
        with self._lock:
            moved = False
            names = os.listdir(self.run_dir) if os.path.isdir(self.run_dir) else []
            for name in names:
                if (m := _METRICS.match(name)):
                    moved |= self._read(int(m.group(1)), os.path.join(self.run_dir, name))
            return moved

    def _read(self, rank: int, path: str) -> bool:
        file = self._files.setdefault(rank, JsonLines(path))
        lines = file.read()
        if file.started_again:                        # a new run in the same folder
            self._ranks.pop(rank, None)
        state = self._ranks.setdefault(rank, _Rank())
        for line in lines:
            state.read(line)
        return bool(lines)

    def status(self, now: float | None = None) -> JobStatus:
        """Lesson 10: the job as the lines read so far show it (``now``: the clock to age them by)."""
        now = time.time() if now is None else now
        with self._lock:
            read = {r: s for r, s in sorted(self._ranks.items()) if s.last is not None}
            ranks = [_rank_status(r, s, now, self.stall_seconds) for r, s in read.items()]
            sizes = [s.last.get("world_size") or 0 for s in read.values()]
            errors = self._errors({r: s.start["time"] for r, s in read.items() if s.start is not None})
        job = JobStatus(self.run_dir, "starting", ranks, world_size=max(sizes, default=None))
        job.stalled = [r.rank for r in ranks if r.state == "stalled"]
        if errors:                 # the first error; a rank killed outright writes none (nor its end)
            lives = [s.start for s in read.values() if s.start]     # torchrun may restart it: not over yet
            again = any(life.get("restart", 0) < life.get("max_restarts", 0) for life in lives)
            job.state, job.error, job.stalled = "restarting" if again else "failed", errors[0], []
            told = {e.get("rank") for e in errors}
            job.silent = [r.rank for r in ranks if r.state != "finished" and r.rank not in told]
            for r in ranks:
                r.state = r.state if r.state == "finished" else "stopped"
        elif ranks and all(r.state == "finished" for r in ranks):
            job.state = "finished"
        elif job.stalled:
            job.state = "stalled"
        elif any(r.step > 0 or r.state == "finished" for r in ranks):
            job.state = "running"
        if ranks and job.max_step - job.min_step >= 1:
            slowest = min(ranks, key=lambda r: (r.step, -(r.age or 0)))   # ties: the longest silent
            job.behind, job.lag = slowest.rank, job.max_step - slowest.step
        _find_straggler(job)
        return job

    def _errors(self, starts: dict[int, float]) -> list[dict]:
        """The error files of this life of the job, earliest first.  An error older than its rank's latest
        ``start`` line belongs to a life that was restarted since.  In a notebook launch's job
        folder (``job_<n>``) the ranks write their errors one folder up, marked with the job."""
        errors = diagnosis.read_errors(self.run_dir)
        parent, name = os.path.split(os.path.normpath(self.run_dir))
        if name.startswith("job_") and name[4:].isdigit():
            errors += diagnosis.read_errors(parent, job=int(name[4:]))
        latest = max(starts.values(), default=0)
        return sorted((e for e in errors if starts.get(e.get("rank"), latest) <= e.get("time", 0)),
                      key=lambda e: e.get("time", 0))

    def wait_until(self, condition, timeout: float = 60.0, interval: float = 0.2) -> JobStatus:
        """Lesson 10: poll until ``condition(status)`` holds (e.g. ``lambda s: s.min_step >= 300``); return
        that status.  ``TimeoutError`` after ``timeout`` s; ``RuntimeError`` if the job ends first."""
        deadline = time.time() + timeout
        while True:
            self.poll()
            status = self.status()
            if condition(status):
                return status
            if status.over:
                raise RuntimeError(f"the job is {status.state} and the condition never held:\n{describe(status)}")
            if time.time() > deadline:
                raise TimeoutError(f"the condition did not hold within {timeout} s:\n{describe(status)}")
            time.sleep(interval)


def _rank_status(rank: int, s: _Rank, now: float, stall_seconds: float) -> RankStatus:
    start, steps = s.start or {}, s.window
    out = RankStatus(rank, total=start.get("total"), restarts=start.get("restart", 0), pid=start.get("pid"),
                     resumed_from=start.get("resumed_from"), checkpoint=s.checkpoint, lost_steps=s.lost,
                     restart_points=list(s.restart_points), age=now - s.last["time"],
                     losses=[(k, v) for k, v in sorted(s.history.items()) if v is not None])
    if s.history:
        out.step = max(s.history)
    elif start.get("resumed_from"):
        out.step = start["resumed_from"]
    if steps:
        out.loss, out.total = steps[-1].get("loss"), steps[-1].get("total", out.total)
        out.samples_per_second = _throughput(steps)
        if all(s.get("comm_seconds") is not None for s in steps):
            out.compute_seconds = statistics.mean(s["step_seconds"] - s["comm_seconds"] for s in steps)
    if s.ended:
        out.state, out.step = "finished", s.last.get("step", out.step)
    elif steps:
        out.state = "stalled" if out.age > stall_seconds else "running"
    return out


def _throughput(steps: list[dict]) -> float | None:   # samples/s over the window (checkpoints count)
    if len(steps) >= 2 and steps[-1]["time"] > steps[0]["time"]:
        return sum(s["samples"] for s in steps[1:]) / (steps[-1]["time"] - steps[0]["time"])
    seconds = steps[-1].get("step_seconds")
    return steps[-1]["samples"] / seconds if seconds else None


def _find_straggler(job: JobStatus) -> None:
    """A straggler: the rank whose compute time is ``SLOWER`` beyond the others' (module docstring)."""
    timed = {r.rank: r.compute_seconds for r in job.ranks if r.compute_seconds is not None}
    if len(timed) < 2:
        return
    rank = max(timed, key=timed.get)
    others = statistics.median(t for r, t in timed.items() if r != rank)
    if timed[rank] >= SLOWER[0] * others and timed[rank] - others >= SLOWER[1]:
        job.slowest, job.slowdown = rank, timed[rank] / max(others, 1e-9)


def describe(status: JobStatus) -> str:
    """Lesson 10: one line per rank and one for the job, for a terminal (``distlab monitor``)."""
    lines = [f"  {describe_rank(r)}" for r in status.ranks]
    lines += [f"  rank {r}: no metrics here yet" for r in status.missing]
    return "\n".join(lines + [job_line(status)])


def describe_rank(r: RankStatus) -> str:
    """Lesson 10: one rank in one line (its age only while it runs: a finished rank's would only grow)."""
    parts = [f"rank {r.rank}: step {r.step}/{r.total if r.total is not None else '?'}"]
    if r.loss is not None:
        parts.append(f"loss {r.loss:.4f}")
    if r.samples_per_second is not None:
        parts.append(f"{r.samples_per_second:.0f} samples/s")
    if r.restarts:
        parts.append(f"restart {r.restarts} (resumed from step {r.resumed_from or 0})")
    if r.checkpoint is not None:
        parts.append(f"checkpoint at step {r.checkpoint}")
    quiet = r.state in ("finished", "stopped") or r.age is None
    parts.append(r.state if quiet else f"{r.state}, last line {r.age:.1f} s ago")
    return ", ".join(parts)


def job_line(status: JobStatus) -> str:
    """Lesson 10: the job's state, and who holds it up, in one line."""
    text = f"job {status.state}: {len(status.ranks)} of {status.world_size or '?'} ranks reporting"
    if status.error is not None:
        e = status.error
        message = str(e.get("message")).splitlines()[0] if e.get("message") else ""
        text += f"; rank {e.get('rank')} failed: {e.get('type')}: {message[:150]}{'...' if len(message) > 150 else ''}"
    if status.silent:
        text += f"; rank(s) {', '.join(map(str, status.silent))} stopped without an error file (killed?)"
    if status.stalled:
        silent = min(r.age for r in status.ranks if r.rank in status.stalled)
        text += f"; no line from rank(s) {', '.join(map(str, status.stalled))} for over {int(silent)} s"
    if status.behind is not None:
        text += f"; rank {status.behind} is behind by {status.lag} step{'s' if status.lag != 1 else ''}"
    if status.slowest is not None:
        text += f"; rank {status.slowest} computes {status.slowdown:.1f}x as long a step as the others (they wait)"
    return text
