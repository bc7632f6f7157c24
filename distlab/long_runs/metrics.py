"""What every rank writes down while it trains, so that a job can be watched from outside.

Introduced in lesson 10 (failure is normal at scale).  A job on a cluster runs for hours on
machines nobody is looking at; the only way to know how it is doing is what it writes.  Each
rank appends one JSON line per event to ``metrics_<rank>.jsonl`` in the run's folder:

=============  ====================================================================================
``event``      fields besides ``event``, ``rank``, ``world_size``, ``time`` (seconds since 1970)
=============  ====================================================================================
``start``      ``pid``, ``restart`` (how many times the job was restarted before this life),
               ``max_restarts`` (how many torchrun allows), ``resumed_from`` (the step of the
               checkpoint it resumed from, or None), ``total``
``step``       ``step`` (steps done), ``total``, ``loss``, ``accuracy``, ``samples`` (this rank's
               mini-batch), ``step_seconds``, ``comm_seconds`` (None when not timed apart)
``checkpoint`` ``step``, ``path``, ``seconds`` (how long saving took, barrier included)
``end``        ``step``, ``test_accuracy``
=============  ====================================================================================

Plain lines in a plain file: ``tail -f`` reads them, so do ``distlab monitor RUN_DIR`` and
the monitor widget, from another process, even on another machine with the folder shared.
Each line is written whole and flushed, so a reader sees complete lines only (a rank killed
mid-write leaves at most one partial last line, which readers skip).

When asked (``tensorboard=True``: a run config's ``logging.tensorboard``), the same numbers
also go to TensorBoard's event files in ``tensorboard/rank_<rank>``, so that
``tensorboard --logdir RUN_DIR`` draws every rank's loss and throughput.
"""
from __future__ import annotations

import json
import os
import time


def metrics_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"metrics_{rank}.jsonl")


def restart_count() -> int:
    """Lesson 10: how many times torchrun restarted this job before this life (0: the first)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


class MetricsLog:
    """One rank's metrics file (and TensorBoard writer).  ``run_dir=None``: writes nothing."""

    def __init__(self, worker, total: int, resumed_from: int | None = None, tensorboard: bool = False):
        self.rank, self.world_size, self.total = worker.rank, worker.world_size, total
        folder = worker.run_dir
        self.file = open(metrics_path(folder, self.rank), "a") if folder else None
        self.board = None
        if folder and tensorboard:
            from torch.utils.tensorboard import SummaryWriter   # (imported only when asked: ~1 s)
            self.board = SummaryWriter(os.path.join(folder, "tensorboard", f"rank_{self.rank}"))
        self.write("start", pid=os.getpid(), restart=restart_count(), resumed_from=resumed_from, total=total,
                   max_restarts=int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")))

    def write(self, event: str, **fields) -> None:
        if self.file is None:
            return
        line = {"event": event, "rank": self.rank, "world_size": self.world_size, "time": time.time(), **fields}
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()

    def step(self, step: int, *, loss: float, accuracy: float, samples: int, step_seconds: float,
             comm_seconds: float | None = None) -> None:
        """After step ``step`` (counted from 1): what it did and how long it took."""
        self.write("step", step=step, total=self.total, loss=_number(loss), accuracy=_number(accuracy),
                   samples=samples, step_seconds=step_seconds, comm_seconds=comm_seconds)
        if self.board is not None:
            if loss == loss:                                   # (NaN on pipeline stages without the loss)
                self.board.add_scalar("loss", loss, step)
            self.board.add_scalar("samples_per_second", samples / max(step_seconds, 1e-9), step)
            self.board.add_scalar("step_seconds", step_seconds, step)

    def close(self, step: int, test_accuracy: float | None = None) -> None:
        self.write("end", step=step, test_accuracy=_number(test_accuracy))
        if self.board is not None:
            self.board.close()
        if self.file is not None:
            self.file.close()
            self.file = None


def _number(x):
    """JSON has no NaN: a loss that is not known on this rank is written as null."""
    return None if x is None or x != x else float(x)


class JsonLines:
    """Lessons 01 and 10: the whole lines a rank appended to its JSON-lines file since the last read.

    The one reader of both streams the ranks write (``progress_<rank>.jsonl``, read by
    ``processes.progress``, and the metrics files here, read by ``monitor``), from another process
    and while the rank writes:

    - a line still being written waits for the next read;
    - a file shorter than what was read was started again (a new run in the same folder):
      reading starts over and ``started_again`` says so, until the next read;
    - a rank killed mid-line leaves half an object, and its next life appends to it: the last whole
      object on such a line is kept, and a line with none is skipped.
    """

    def __init__(self, path: str):
        self.path, self.offset, self.started_again = path, 0, False

    def read(self) -> list[dict]:
        self.started_again = False
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:
                    self.offset, self.started_again = 0, True
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [d for raw in complete.decode(errors="replace").splitlines() if (d := _whole(raw)) is not None]


def _whole(raw: str) -> dict | None:
    """One line as a dict, or else the longest tail of it that is a whole object (see ``JsonLines``)."""
    starts = [i for i, c in enumerate(raw) if c == "{"]
    for i in starts:
        try:
            found = json.loads(raw[i:])
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None
