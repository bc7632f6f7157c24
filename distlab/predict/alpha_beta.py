"""What a collective costs: the alpha-beta model, message by message (the one copy of it).

Introduced in lesson 03 (``notebooks/03_combining_gradients.ipynb``); lesson 05 uses it for the
all-reduces inside training, lessons 08 and 12 for the bytes a ring sends.

Sending one message of ``b`` bytes takes ``alpha + b * beta`` seconds (Hockney 1994, "The
communication challenge for MPP"): ``alpha`` is the fixed price of any message (software, system
calls, waking the receiver), ``beta`` the price of each byte.  Adding a received chunk into your
own costs ``gamma`` seconds per byte (the cost model of Thakur, Rabenseifner and Gropp 2005,
"Optimization of collective communication operations in MPICH").  ``comm.cost_model`` fits the three on
this machine; on one machine the price of a byte is not one number (data that fits in the caches
is copied faster), so a ``Link`` may carry a second line for ``LARGE`` messages, and the model
takes the slower of the two for each message.

An algorithm is a list of *steps* (``schedule``): the messages of one step travel at the same
time, the steps one after another.  A step costs

    alpha * (messages that pass one after another)
  + beta  * (bytes that pass one after another)
  + gamma * (the most bytes one rank adds)

and "one after another" is the larger of two limits: a rank handles its own messages in turn
(a parameter server's link carries every push), and the hardware moves ``lanes`` messages at
full speed at once (``lanes=None``: one link per rank, a cluster; on our 2-core machine one
message keeps both cores busy, so ``lanes = 1``).

On a cluster, with n bytes of tensor, N ranks and c = n/N, that gives (the ring's bandwidth term is
Patarasuk and Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of workstations"):

==================  ==================================================  ===================
algorithm           predicted time                                      busiest rank sends
==================  ==================================================  ===================
naive               2(N-1) (alpha + n beta) + (N-1) n gamma               (N-1) n
parameter_server    2(N-1) (alpha + n beta) + (N-1) n gamma               (N-1) n
ring                2(N-1) (alpha + c beta) + (N-1) c gamma               2(N-1) c  (about 2n)
tree                2L (alpha + n beta) + L n gamma,  L = ceil(log2 N)    L n
==================  ==================================================  ===================

Every closed form the course uses (lesson 05's all-reduce time, the ring's bytes of lessons 08
and 12) is computed from these schedules, not written a second time.
"""
from __future__ import annotations

from dataclasses import dataclass

ALGORITHMS = ("naive", "parameter_server", "ring", "tree")    # as comm.collectives writes them
REDUCING = ("reduce", "push", "reduce-scatter")   # phases whose receiver adds what arrives
LARGE = 4_000_000   # bytes: measurements this large or larger fit the large-data lines
COLLECTIVES = {"all_reduce": ("reduce-scatter", "all-gather"),    # a ring all-reduce is both halves
               "reduce_scatter": ("reduce-scatter",), "all_gather": ("all-gather",)}


def check_algorithm(algorithm: str) -> None:
    """Lesson 03: an algorithm the course writes, or a ``ValueError`` that lists them."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")


@dataclass
class Link:
    """Lesson 03: the price of communication on one machine or cluster."""

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
        """Lesson 03: seconds one message of ``nbytes`` takes beyond ``alpha``: ``nbytes * beta``, or,
        from ``LARGE`` bytes on, the large-message line where that is slower.

        The large line is used only where it was fitted: extended down to small messages, its
        intercept (a least-squares artefact, 370 us in one of our fits) would swamp alpha."""
        small = nbytes * self.beta
        if self.large is None or nbytes < LARGE:
            return small
        return max(small, self.large[0] - self.alpha + nbytes * self.large[1])

    def add_seconds(self, nbytes: float) -> float:
        """Lesson 03: seconds to add ``nbytes`` received bytes into one's own: ``nbytes * gamma``,
        or, from ``LARGE`` bytes on, the large-data line where that is slower."""
        small = nbytes * self.gamma
        if self.large_add is None or nbytes < LARGE:
            return small
        return max(small, self.large_add[0] + nbytes * self.large_add[1])

    def message_seconds(self, nbytes: float) -> float:
        """Lesson 03: the model's time for one message of ``nbytes`` bytes."""
        return self.alpha + self.copy_seconds(nbytes)

    def __str__(self) -> str:
        """Lesson 03: the link as the lesson prints it: latency, bandwidths, lanes."""
        text = f"alpha = {self.alpha * 1e6:.0f} us per message, 1/beta = {1 / self.beta / 1e9:.2f} GB/s"
        if self.large is not None:
            text += f" ({1 / self.large[1] / 1e9:.2f} GB/s for large messages)"
        if self.gamma:
            text += f", 1/gamma = {1 / self.gamma / 1e9:.2f} GB/s added"
        if self.large_add is not None:
            text += f" ({1 / self.large_add[1] / 1e9:.2f} GB/s large)"
        return text + (f", lanes = {self.lanes}" if self.lanes else ", one link per rank")


def chunk_sizes(numel: float, world_size: int, whole: bool = True) -> list:
    """Lesson 03: the sizes ``tensor_split(world_size)`` gives: the first ``numel % N`` chunks get
    one more.  ``whole=False`` cuts ``numel`` into N equal shares instead, fractions allowed: the
    idealised ring of the closed forms, for a total spread over several tensors (lesson 05)."""
    if not whole:
        return [numel / world_size] * world_size
    q, r = divmod(numel, world_size)
    return [q + 1] * r + [q] * (world_size - r)


def schedule(algorithm: str, world_size: int, numel: float, itemsize: int = 4, whole: bool = True) -> list[dict]:
    """Lesson 03: the steps of an algorithm, without running it.

    Each step is ``{"phase", "step", "messages": [{"src", "dst", "chunk", "bytes"}, ...]}``;
    the tests check it against the message logs of real runs.  ``whole``: see ``chunk_sizes``.
    """
    check_algorithm(algorithm)
    N, n = world_size, numel * itemsize
    whole_tensor = lambda src, dst: {"src": src, "dst": dst, "chunk": None, "bytes": n}  # noqa: E731
    steps = []
    if algorithm == "naive":
        steps += [("reduce", s, [whole_tensor(s + 1, 0)]) for s in range(N - 1)]
        steps += [("broadcast", s, [whole_tensor(0, s + 1)]) for s in range(N - 1)]
    elif algorithm == "parameter_server" and N > 1:
        steps += [("push", 0, [whole_tensor(r, 0) for r in range(1, N)]),
                  ("pull", 0, [whole_tensor(0, r) for r in range(1, N)])]
    elif algorithm == "ring":
        size = [c * itemsize for c in chunk_sizes(numel, N, whole)]
        for phase, first in (("reduce-scatter", 0), ("all-gather", 1)):
            steps += [(phase, s, [{"src": r, "dst": (r + 1) % N, "chunk": (r + first - s) % N,
                                   "bytes": size[(r + first - s) % N]} for r in range(N)])
                      for s in range(N - 1)]
    elif algorithm == "tree":
        levels = (N - 1).bit_length()
        steps += [("reduce", k, [whole_tensor(r, r - (1 << k)) for r in range(1 << k, N, 2 << k)])
                  for k in range(levels)]
        steps += [("broadcast", s, [whole_tensor(r, r + (1 << k)) for r in range(0, N - (1 << k), 2 << k)])
                  for s, k in enumerate(reversed(range(levels)))]
    return [{"phase": p, "step": s, "messages": m} for p, s, m in steps]


def bytes_per_rank(algorithm: str, world_size: int, numel: int, itemsize: int = 4) -> list[int]:
    """Lesson 03: exactly how many bytes each rank sends in one all-reduce."""
    sent = [0] * world_size
    for step in schedule(algorithm, world_size, numel, itemsize):
        for m in step["messages"]:
            sent[m["src"]] += m["bytes"]
    return sent


def ring_bytes(nbytes: float, world_size: int, collective: str = "all_reduce") -> float:
    """Lesson 03 (and 08, 12): the bytes one rank sends in a ring ``collective`` of ``nbytes``, the
    tensor cut evenly: 2(N-1)/N of it for an all-reduce, (N-1)/N for each of its halves, a
    reduce-scatter or an all-gather (Patarasuk and Yuan 2009; the ZeRO paper's section 7 rounds
    these to 2 and 1).  Read from the ring's own schedule, not written a second time."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    return sum(m["bytes"] for step in schedule("ring", world_size, nbytes, 1, whole=False)
               if step["phase"] in COLLECTIVES[collective] for m in step["messages"] if m["src"] == 0)


def step_time(step: dict, link: Link, world_size: int) -> float:
    """Lesson 03: one step's time: the messages and bytes that must pass one after another, the adding."""
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


def predict_time(algorithm: str, world_size: int, numel: float, link: Link, itemsize: int = 4,
                 whole: bool = True) -> float:
    """Lesson 03: the alpha-beta model's time for one all-reduce, in seconds."""
    return sum(step_time(s, link, world_size) for s in schedule(algorithm, world_size, numel, itemsize, whole))


def all_reduce_seconds(nbytes: float, world_size: int, alpha: float, beta: float, messages: int = 1) -> float:
    """Lesson 05: ``messages`` ring all-reduces that carry ``nbytes`` between them, one link per rank.

    ``2(N-1) messages alpha + 2(N-1)/N nbytes beta``: each all-reduce pays the latency of its
    2(N-1) rounds, and the bytes do not care how they are cut.  It is ``predict_time("ring")`` with
    ``lanes=None``, no adding cost and the bytes shared evenly, so lesson 05's alpha and beta,
    fitted to the all-reduces *inside training* (``measure.speedup.fit_alpha_beta``), mean what
    lesson 03's mean."""
    link = Link(alpha, beta, 0.0, lanes=None)
    return messages * predict_time("ring", world_size, nbytes / messages, link, itemsize=1, whole=False)
