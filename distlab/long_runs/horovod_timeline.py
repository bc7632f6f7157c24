"""Horovod's own timeline: what its background thread did with every tensor, and when.

Introduced in lesson 10 (monitoring a job).  With ``HOROVOD_TIMELINE=PATH`` set before
``hvd.init()`` (a run config's ``logging.horovod_timeline: true`` does it, writing
``horovod_timeline.json`` into the run's folder), rank 0 writes a Chrome trace: for each
tensor, nested begin/end events of the phases it went through:

* ``NEGOTIATE_ALLREDUCE``: rank 0 waiting until *every* rank has said "this gradient is ready"
  (a slow rank shows up here, as the time the others spend waiting for it);
* ``ALLREDUCE`` and inside it ``MEMCPY_IN_FUSION_BUFFER`` (small gradients packed into one
  buffer: tensor fusion), ``GLOO_ALLREDUCE`` (the transfer itself), ``MEMCPY_OUT_FUSION_BUFFER``.

Open it in ``chrome://tracing`` or https://ui.perfetto.dev, or read it with ``read_timeline``.
Horovod stops writing at shutdown before its queue is empty, so ``HorovodWorker.stop`` calls
``hvd.stop_timeline()`` first (that call waits for the queue).
"""
from __future__ import annotations

import json
from collections import defaultdict


def load_events(path: str) -> list[dict]:
    """The trace's events.  A writer killed mid-run leaves the file cut after its last event:
    read up to the last complete one."""
    with open(path) as f:
        text = f.read().rstrip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    end = text.rfind("}")
    while end > 0:
        try:
            return json.loads(text[:end + 1].rstrip(",") + "]")
        except ValueError:
            end = text.rfind("}", 0, end)
    raise ValueError(f"{path} holds no Horovod timeline events")


def read_timeline(path: str) -> list[dict]:
    """Lesson 10: every phase of every tensor as ``{"tensor", "phase", "start_us", "microseconds"}``,
    in the order they began (times in microseconds since the timeline started)."""
    names, open_phases, spans = {}, defaultdict(list), []
    for event in load_events(path):
        kind, pid = event.get("ph"), event.get("pid")
        if kind == "M" and "name" in event.get("args", {}):       # metadata: which tensor this pid is
            names[pid] = event["args"]["name"]
        elif kind == "B":
            open_phases[pid].append(event)
        elif kind == "E" and open_phases[pid]:
            begin = open_phases[pid].pop()
            spans.append({"tensor": names.get(pid, str(pid)), "phase": begin["name"], "start_us": begin["ts"],
                          "microseconds": event["ts"] - begin["ts"]})
    return sorted(spans, key=lambda s: s["start_us"])


def phase_totals(spans: list[dict]) -> dict[str, tuple[int, float]]:
    """Lesson 10: per phase, how many times it ran and its total milliseconds."""
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for s in spans:
        totals[s["phase"]][0] += 1
        totals[s["phase"]][1] += s["microseconds"] / 1000
    return {phase: (n, ms) for phase, (n, ms) in sorted(totals.items())}


def read_ready(path: str) -> list[dict]:
    """Lesson 10: when each rank said a tensor was ready, ``{"tensor", "rank", "start_us"}``.

    Inside a ``NEGOTIATE_*`` phase, rank 0 (Horovod's coordinator) marks each rank's "ready" as
    an instant event named by that rank's number: the phase ends at the last of them, so the gap
    between the first and the last mark is time the early ranks spent waiting."""
    names, ready = {}, []
    for event in load_events(path):
        kind, pid = event.get("ph"), event.get("pid")
        if kind == "M" and "name" in event.get("args", {}):
            names[pid] = event["args"]["name"]
        elif kind == "X" and str(event.get("name", "")).isdigit():
            ready.append({"tensor": names.get(pid, str(pid)), "rank": int(event["name"]), "start_us": event["ts"]})
    return sorted(ready, key=lambda r: r["start_us"])


def rounds(spans: list[dict], ready: list[dict] = ()) -> list[list[dict]]:
    """Lesson 10: the spans and ready marks cut into rounds, in the order they ran: every
    tensor's first broadcast (the parameters, at the start), then its first all-reduce (step 1),
    its second (step 2), ...  A ready mark joins the negotiation it falls in (``phase="ready"``)."""
    count: dict[str, int] = defaultdict(int)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for s in spans:                                   # in the order they began
        if s["phase"].startswith("NEGOTIATE_"):
            count[s["tensor"]] += 1
        groups[s["tensor"].split(".")[0], count[s["tensor"]]].append(s)
    for mark in ready:
        for items in groups.values():
            if any(s["tensor"] == mark["tensor"] and s["phase"].startswith("NEGOTIATE_")
                   and s["start_us"] <= mark["start_us"] <= s["start_us"] + s["microseconds"] for s in items):
                items.append(dict(mark, phase="ready"))
                break
    return [groups[k] for k in sorted(groups, key=lambda k: min(s["start_us"] for s in groups[k]))]
