"""Who broke a job, and how: the one diagnosis behind ``launch``, ``distlab run`` and the monitor.

Introduced in lesson 10 (failure is normal at scale).  Three readers need the same answer from
the same evidence: the notebook's ``launch`` (a ``WorkerError`` naming the rank), ``distlab run``
in a terminal (a line per failed rank), and ``RunMonitor`` watching from outside (a failed job).
The evidence is of two kinds:

- **error files**: a rank that raises writes ``error_<rank>.json`` (its exception, traceback,
  time and job) before it ends (``rank.serve``).  These work the same under torchrun and Horovod,
  and for warm ranks that serve many jobs.  (torchrun also records a raising rank's error in a
  file of its own, ``torch.distributed.elastic.multiprocessing.errors``, and prints it as its
  "root cause"; the launcher's log keeps that text, but it knows neither the job nor Horovod.)
- **exits**: a rank killed outright (the out-of-memory killer, ``kill -9``) writes nothing.  Its
  launcher saw it die: from the exit codes the pool records, or from the launcher's own log.

The rule for blame: a rank killed by a signal of its own is the cause (its peers fail after it,
with "connection reset"); otherwise the earliest error; and when every error is a timeout, the
rank that said nothing is the one that hung.
"""
from __future__ import annotations

import json
import os
import re
import signal

SIGNALS = {int(s): s.name for s in signal.Signals}


def read_errors(folder: str, job: int | None = None) -> list[dict]:
    """The error files in ``folder``, earliest first (``job``: only those the ranks marked with it).

    Only whole ``error_<rank>.json`` files: a rank killed while writing one leaves half of it
    under ``.tmp``, which is nobody's error."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    errors = []
    for name in sorted(n for n in names if n.startswith("error_") and n.endswith(".json")):
        try:
            with open(os.path.join(folder, name)) as f:
                error = json.load(f)
        except (OSError, ValueError):
            continue
        if job is None or error.get("job") == job:
            errors.append(error)
    return sorted(errors, key=lambda e: e.get("time", 0))


def killed_by(exit_codes: dict[int, int], errors: list[dict], log: str = "") -> dict[int, str]:
    """Ranks killed by a signal, by name, from their exit codes (negative: the signal), leaving out
    the SIGTERM a launcher sends to the survivors and any rank that wrote an error first.

    A rank missing from ``exit_codes`` is looked up in the launcher's ``log``: the watcher that
    writes the codes (``torch_backend.record_exits``) and torchrun both wait for a rank's end, and
    when torchrun collects a dead rank first the watcher learns nothing; without torchrun's own
    ``failed (exitcode: -9) local_rank: 1`` line, the SIGTERM'd survivor would be blamed."""
    spoke = {e.get("rank") for e in errors}
    killed = {rank: SIGNALS.get(-code, str(code)) for rank, code in exit_codes.items()
              if code < 0 and code != -signal.SIGTERM and rank not in spoke}
    killed.update({rank: name for rank, name in killed_in_log(log).items()
                   if rank not in exit_codes and rank not in spoke and name != "SIGTERM"})
    return dict(sorted(killed.items()))


def killed_in_log(log: str, first_rank: int = 0) -> dict[int, str]:
    """Ranks killed by a signal, as the launchers' logs say it: torchrun's ``failed (exitcode: -9)
    local_rank: 1`` (local ranks, so ``first_rank`` is added) and horovodrun's ``Process 1 exit with
    status code 137`` (128 + the signal)."""
    killed = {first_rank + int(local): SIGNALS.get(-int(code), code)
              for code, local in re.findall(r"failed \(exitcode: (-\d+)\) local_rank: (\d+)", log)}
    killed.update({int(rank): SIGNALS.get(int(code) - 128, code)
                   for rank, code in re.findall(r"Process (\d+) exit with status code (\d+)", log)
                   if 128 < int(code) < 128 + 65})
    return killed


def timed_out(error: dict) -> bool:
    """An error that says its rank gave up waiting in a collective (gloo, NCCL or Horovod)."""
    text = f"{error.get('type', '')} {error.get('message', '')}".lower()
    return "timeout" in text or "timed out" in text or "waited more than" in text


def blame(errors: list[dict], killed: dict[int, str], silent=lambda: []) -> tuple[int | None, str, str]:
    """The rank that caused the failure, why, and its traceback ("" when it had none).

    ``silent()``: the ranks that neither wrote an error nor finished (asked only when every error is
    a timeout, the sign of a rank that hung).  (None, "", "") when the evidence names nobody."""
    if killed:
        rank = min(killed)
        return rank, f"it was killed by {killed[rank]} (out of memory, or killed by hand?)", ""
    if not errors:
        return None, "", ""
    first = errors[0]
    hung = silent() if all(timed_out(e) for e in errors) else []
    if hung:
        return hung[0], (f"it stopped answering: rank {first['rank']} timed out waiting for it "
                         f"({first['type']}: {first['message'][:300]}), while rank {hung[0]} raised "
                         "nothing and never finished its job (it hung)"), first.get("traceback", "")
    return first["rank"], f"{first['type']}: {first['message']}", first.get("traceback", "")


def failure_lines(errors: list[dict], killed: dict[int, str]) -> list[str]:
    """Every failed rank, one line each, the killed first (they left no error of their own)."""
    return ([f"rank {rank} was killed by {name} (it left no error of its own)" for rank, name in sorted(killed.items())]
            + [f"rank {e['rank']} failed: {e['type']}: {e['message']}" for e in errors])
