"""Predicting what an all-reduce costs: the alpha-beta model, fitted from a measured ping-pong.

Introduced in lesson 03 (``notebooks/03_combining_gradients.ipynb``).

Sending one message of ``b`` bytes takes ``alpha + b * beta`` seconds: ``alpha`` is the
fixed price of any message (software, system calls, waking the receiver), ``beta`` the price
of each byte (copying it through the network or, on one machine, through memory).  Adding
a received chunk into your own costs ``gamma`` seconds per byte.  We measure all three on
this machine: a *ping-pong* (rank 0 sends, rank 1 sends it straight back: half the round
trip is one message) gives alpha and beta, a timed ``add_`` gives gamma.  On one machine
the price of a byte is not one number: data that fits in the CPU's caches is copied and
added faster than data that does not, so ``fit_link`` fits a second line to measurements of
``LARGE`` (4 MB) and more (``Link.large``, ``Link.large_add``), and the model takes the
slower of the two lines for each message.

An algorithm is a list of *steps* (``schedule``): the messages of one step travel at the
same time, the steps one after another.  A step costs

    alpha * (messages that pass one after another)
  + beta  * (bytes that pass one after another)
  + gamma * (the most bytes one rank adds)

and "one after another" is the larger of two limits:

* a rank handles its own messages in turn: the most messages (bytes) that one rank sends
  or receives in the step (a parameter server's link carries every push);
* the hardware moves ``lanes`` messages at full speed at once: all the step's messages
  (bytes) divided by ``lanes``.  On a cluster every rank has its own link (``lanes=None``:
  no such limit).  On one machine the "network" is the CPU cores copying bytes, and one
  message already keeps two cores busy (one copies out, the other copies in).  We measure
  ``lanes`` by timing two messages sent at once (ranks 0 and 1 to each other): 1 on our
  2-core machine, so there a ring's N simultaneous messages take turns.

On a cluster, with n bytes of tensor, N ranks and c = n/N, that gives:

==================  ==================================================  ===================
algorithm           predicted time                                      busiest rank sends
==================  ==================================================  ===================
naive               2(N-1) (alpha + n beta) + (N-1) n gamma               (N-1) n
parameter_server    2(N-1) (alpha + n beta) + (N-1) n gamma               (N-1) n
ring                2(N-1) (alpha + c beta) + (N-1) c gamma               2(N-1) c  (about 2n)
tree                2L (alpha + n beta) + L n gamma,  L = ceil(log2 N)    L n
==================  ==================================================  ===================
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

ALGORITHMS = ("naive", "parameter_server", "ring", "tree")    # as in collectives.py
BASELINE = "gloo"        # dist.all_reduce: what the hand-written algorithms are timed against
PHASE_ORDER = ("reduce", "push", "reduce-scatter", "all-gather", "pull", "broadcast")
REDUCING = ("reduce", "push", "reduce-scatter")   # phases whose receiver adds what arrives


def check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")


@dataclass
class Link:
    """Lesson 03: the measured price of communication on this machine."""

    alpha: float        # seconds per message
    beta: float         # seconds per byte sent
    gamma: float = 0.0  # seconds per byte added
    lanes: int | None = 1    # messages that travel at full speed at once; None: one link per rank
    # Large data (lines of their own, fitted on LARGE bytes or more; None: not fitted): on
    # one machine a message is a memory copy, and copying or adding is fast while the data
    # fits in the CPU's caches and slower per byte once it does not.
    large: tuple[float, float] | None = None       # one message: seconds = a + b * bytes
    large_add: tuple[float, float] | None = None   # adding: seconds = a + b * bytes

    def copy_seconds(self, nbytes: float) -> float:
        """Seconds one message of ``nbytes`` takes beyond ``alpha``: ``nbytes * beta``, or, from
        ``LARGE`` bytes on, the large-message line where that is slower.

        The large line is used only where it was fitted: extended down to small messages, its
        intercept (a least-squares artefact, 370 us in one of our fits) would swamp alpha."""
        small = nbytes * self.beta
        if self.large is None or nbytes < LARGE:
            return small
        return max(small, self.large[0] - self.alpha + nbytes * self.large[1])

    def add_seconds(self, nbytes: float) -> float:
        """Seconds to add ``nbytes`` received bytes into one's own: ``nbytes * gamma``, or,
        from ``LARGE`` bytes on, the large-data line where that is slower."""
        small = nbytes * self.gamma
        if self.large_add is None or nbytes < LARGE:
            return small
        return max(small, self.large_add[0] + nbytes * self.large_add[1])

    def message_seconds(self, nbytes: float) -> float:
        """Lesson 03: the model's time for one message of ``nbytes`` bytes."""
        return self.alpha + self.copy_seconds(nbytes)

    def __str__(self) -> str:
        text = f"alpha = {self.alpha * 1e6:.0f} us per message, 1/beta = {1 / self.beta / 1e9:.2f} GB/s"
        if self.large is not None:
            text += f" ({1 / self.large[1] / 1e9:.2f} GB/s for large messages)"
        if self.gamma:
            text += f", 1/gamma = {1 / self.gamma / 1e9:.2f} GB/s added"
        if self.large_add is not None:
            text += f" ({1 / self.large_add[1] / 1e9:.2f} GB/s large)"
        return text + (f", lanes = {self.lanes}" if self.lanes else ", one link per rank")


LARGE = 4_000_000   # bytes: measurements this large or larger fit the large-data lines


def fit_line(x, y, *, relative: bool = True) -> tuple[float, float]:
    """Intercept and slope of ``y = a + b x``, fitted for *relative* error.

    Plain least squares would let the largest messages decide everything; weighting each
    point by 1/y makes a 10 us message count as much as a 10 ms one, so alpha comes from
    the small messages and beta from the big ones.  A time cannot start below zero, so the
    intercept is clamped at 0.

    ``relative=False`` is for the large-data lines: plain least squares, so the biggest
    messages (the ones whose milliseconds matter) decide, and no clamp: such a line only
    holds to the right of its knee and may start below zero.
    """
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if len(x) < 2 or len(x) != len(y) or (y <= 0).any():
        raise ValueError("need at least two (size, positive time) pairs")
    weight = 1 / y if relative else torch.ones_like(y)
    design = torch.stack([torch.ones_like(x), x], 1) * weight[:, None]
    coef = torch.linalg.lstsq(design, (y * weight)[:, None]).solution.flatten()
    return (max(coef[0].item(), 0.0) if relative else coef[0].item()), coef[1].item()


def fit_link(ping_pong: dict, add: dict | None = None) -> Link:
    """Lesson 03: ``Link`` from a ping-pong and an add measurement (see ``measure``).

    ``lanes`` compares two messages sent at once (``exchange_seconds``) with one: if the
    pair takes as long as one message, two lanes; as long as two messages, one lane
    (a whole number, at least one: the median estimate, rounded).

    With two or more measurements of ``LARGE`` bytes or more (and two smaller ones), the large
    ones fit a line of their own (``large``, ``large_add``): one straight line through 8 bytes
    and 40 MB fits neither end (on our machine it predicted 10 ms for a 40 MB message that
    took 17 ms, and adding 40 MB took twice what the small adds foretold).
    """
    alpha, beta, large = _two_lines(ping_pong["bytes"], ping_pong["seconds"])
    gamma, large_add = 0.0, None
    if add:
        _, gamma, large_add = _two_lines(add["bytes"], add["seconds"])
    link = Link(alpha, beta, gamma, 1, large, large_add)
    pairs = [2 * link.copy_seconds(b) / max(t - alpha, 1e-12)
             for b, t in zip(ping_pong.get("exchange_bytes", []), ping_pong.get("exchange_seconds", []))]
    link.lanes = max(1, round(sorted(pairs)[len(pairs) // 2])) if pairs else 1
    return link


def _two_lines(sizes, seconds):
    """(intercept, slope) of the small sizes, and the large sizes' (intercept, slope) or None."""
    large = [(b, t) for b, t in zip(sizes, seconds) if b >= LARGE]
    small = [(b, t) for b, t in zip(sizes, seconds) if b < LARGE]
    if len(large) < 2 or len(small) < 2:
        return (*fit_line(sizes, seconds), None)
    return (*fit_line(*zip(*small)), fit_line(*zip(*large), relative=False))


def chunk_sizes(numel: int, world_size: int) -> list[int]:
    """The sizes ``tensor_split(world_size)`` gives: the first ``numel % N`` chunks get one more."""
    q, r = divmod(numel, world_size)
    return [q + 1] * r + [q] * (world_size - r)


def schedule(algorithm: str, world_size: int, numel: int, itemsize: int = 4) -> list[dict]:
    """Lesson 03: the steps of an algorithm, without running it.

    Each step is ``{"phase", "step", "messages": [{"src", "dst", "chunk", "bytes"}, ...]}``;
    the tests check it against the message logs of real runs.
    """
    check_algorithm(algorithm)
    N, n = world_size, numel * itemsize
    whole = lambda src, dst: {"src": src, "dst": dst, "chunk": None, "bytes": n}  # noqa: E731
    steps = []
    if algorithm == "naive":
        steps += [("reduce", s, [whole(s + 1, 0)]) for s in range(N - 1)]
        steps += [("broadcast", s, [whole(0, s + 1)]) for s in range(N - 1)]
    elif algorithm == "parameter_server" and N > 1:
        steps += [("push", 0, [whole(r, 0) for r in range(1, N)]),
                  ("pull", 0, [whole(0, r) for r in range(1, N)])]
    elif algorithm == "ring":
        size = [c * itemsize for c in chunk_sizes(numel, N)]
        for phase, first in (("reduce-scatter", 0), ("all-gather", 1)):
            steps += [(phase, s, [{"src": r, "dst": (r + 1) % N, "chunk": (r + first - s) % N,
                                   "bytes": size[(r + first - s) % N]} for r in range(N)])
                      for s in range(N - 1)]
    elif algorithm == "tree":
        levels = (N - 1).bit_length()
        steps += [("reduce", k, [whole(r, r - (1 << k)) for r in range(1 << k, N, 2 << k)])
                  for k in range(levels)]
        steps += [("broadcast", s, [whole(r, r + (1 << k)) for r in range(0, N - (1 << k), 2 << k)])
                  for s, k in enumerate(reversed(range(levels)))]
    return [{"phase": p, "step": s, "messages": m} for p, s, m in steps]


def bytes_per_rank(algorithm: str, world_size: int, numel: int, itemsize: int = 4) -> list[int]:
    """Lesson 03: exactly how many bytes each rank sends in one all-reduce."""
    sent = [0] * world_size
    for step in schedule(algorithm, world_size, numel, itemsize):
        for m in step["messages"]:
            sent[m["src"]] += m["bytes"]
    return sent


def step_time(step: dict, link: Link, world_size: int) -> float:
    """One step's time: the messages and bytes that must pass one after another, the adding."""
    sent, got = [0] * world_size, [0] * world_size            # messages per rank
    out, into = [0.0] * world_size, [0.0] * world_size        # copying seconds per rank
    added = [0.0] * world_size                                # adding seconds per rank
    for m in step["messages"]:
        sent[m["src"]] += 1
        got[m["dst"]] += 1
        out[m["src"]] += link.copy_seconds(m["bytes"])       # bytes * beta (small messages)
        into[m["dst"]] += link.copy_seconds(m["bytes"])
        added[m["dst"]] += link.add_seconds(m["bytes"])      # bytes * gamma (small messages)
    lanes = link.lanes or world_size                          # None: every rank its own link
    messages = max(max(sent), max(got), len(step["messages"]) / lanes)
    copying = max(max(out), max(into), sum(into) / lanes)
    adding = max(added) if step["phase"] in REDUCING else 0.0
    return messages * link.alpha + copying + adding


def predict_time(algorithm: str, world_size: int, numel: int, link: Link, itemsize: int = 4) -> float:
    """Lesson 03: the alpha-beta model's time for one all-reduce, in seconds."""
    return sum(step_time(s, link, world_size) for s in schedule(algorithm, world_size, numel, itemsize))


# ---------------------------------------------------------------------------------------------
# reading what the real runs recorded (message logs, timings)
# ---------------------------------------------------------------------------------------------
def merge_logs(logs: list[list[dict]]) -> list[dict]:
    """Lesson 03: all ranks' message logs as one list, in the order the messages happened."""
    messages = [m for log in logs for m in log]
    return sorted(messages, key=lambda m: (PHASE_ORDER.index(m["phase"]), m["step"], m["dst"]))


def bytes_sent(messages: list[dict], world_size: int) -> list[int]:
    """Lesson 03: how many bytes each rank sent, from a merged message log."""
    sent = [0] * world_size
    for m in messages:
        sent[m["src"]] += m["bytes"]
    return sent


def best(times: list[float]) -> float:
    """The fastest repetition: on a shared machine, the one least disturbed by others."""
    return min(times)
