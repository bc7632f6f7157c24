"""Asynchronous SGD with a parameter server: nobody waits for anybody else.

Introduced in lesson 04 ("Keeping workers in sync").  Synchronous data parallelism makes
every rank wait at every all-reduce for the slowest one.  The oldest way out (the
parameter server of early large-scale training) is to stop waiting:

- rank 0 is the **server**: it owns the parameters and a version number (how many
  updates it has applied);
- ranks 1..N-1 are **workers**, each with its own shard.  A worker *pulls* the current
  parameters and their version, computes a gradient on its next mini-batch, *pushes* the
  gradient together with the version it used, and pulls again;
- the server applies each gradient the moment it arrives (plain SGD: p -= lr * g), from
  whichever worker sent it, and answers that worker with the new parameters.

The price: while a worker was computing, other workers' gradients moved the parameters,
so its gradient was computed on an older version.  **Staleness** = the server's version
when the gradient is applied minus the version it was computed on.  With one worker it is
always 0 (that is plain SGD); with W workers of equal speed it is about W - 1; a slow
worker's gradients are staler still.

Everything goes over point-to-point messages (``Worker.send``/``recv``, torch.distributed's underneath):
``Worker.recv_any`` takes the next message from *any* worker and says who sent it.  Every receive is
bounded by the job's timeout (``launch(..., timeout=...)``).

Messages (float64, so that version numbers travel exactly):
server -> worker: ``[version, parameters...]``; worker -> server: ``[version used, loss,
accuracy, gradient...]``.

No checkpoints and no faults on purpose (``train.supports`` has neither, so ``launch`` and a run
config refuse ``checkpoint=`` and ``fault=`` before any process starts).  The workers run the one
loop (``loop.train_steps``), but the server does not: it answers whichever worker is first, so
it has no steps of its own to save after, and which gradient it applies when depends on timing.
A resumed run could therefore never equal the uninterrupted one (two uninterrupted runs do not
equal each other either), and a checkpoint's barrier would wait for a server that never reaches it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..data import load_digits, rank_batch
from ..models import DTYPES, build_model
from .data_parallel import per_rank_batch
from ..train.loop import Run, Strategy, check_settings, evaluate, start, train_steps

SERVER = 0


@dataclass
class Update:
    """One gradient applied by the server."""

    version: int          # the server's version after applying it (1, 2, ...)
    worker: int           # who sent it
    version_used: int     # the version the worker computed it on
    staleness: int        # updates applied in between: version - 1 - version_used
    time: float           # time.time() when it was applied
    loss: float           # the worker's mini-batch loss, at the version it used
    accuracy: float       # the worker's mini-batch accuracy, at the version it used


@dataclass
class ServerRecord:
    """What the parameter server hands back: every update, in the order applied."""

    rank: int
    world_size: int
    config: dict
    t_first: float                                  # when the server sent the first parameters
    updates: list[Update] = field(default_factory=list)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    test_accuracy: float = float("nan")
    wall_time: float = 0.0
    method: str = "parameter server"

    @property
    def staleness(self) -> list[int]:
        return [u.staleness for u in self.updates]


def validate_args(world_size: int, *, model: str, width: int, batch_size: int, steps: int, lr: float,
                  dtype: str, straggler, backend: str = "torchrun", device: str = "cpu") -> int:
    """Check an asynchronous job before any process starts; return the per-worker batch."""
    if backend != "torchrun":
        raise ValueError("async_sgd.train runs on launch(backend='torchrun') only: its server receives from "
                         f"whichever worker is ready (dist.recv, no source), which Horovod cannot (got {backend!r})")
    if device != "cpu":
        raise ValueError("async_sgd.train runs on device='cpu' only (gloo): NCCL cannot receive from any rank, "
                         f"got device={device!r}")
    if world_size < 2:
        raise ValueError(f"a parameter server needs world_size >= 2 (1 server + workers), "
                         f"got {world_size}")
    check_settings(world_size, model=model, width=width, steps=steps, lr=lr, dtype=dtype, straggler=straggler)
    if straggler is not None and straggler[0] == SERVER:
        raise ValueError("the straggler must be a worker (rank 1 or above), not the server")
    # the workers share the data exactly as world_size - 1 synchronous ranks would
    return per_rank_batch(world_size - 1, batch_size, None)


def train(worker, *, model: str = "mlp", width: int = 64, batch_size: int = 32, steps: int = 50,
          lr: float = 0.1, seed: int = 0, dtype: str = "float32",
          straggler: tuple[int, float] | None = None):
    """Lesson 04: asynchronous SGD; rank 0 serves, ranks 1.. each push ``steps`` gradients.

    Worker ``r`` trains on the shard and mini-batches of rank ``r - 1`` of a synchronous run
    with ``world_size - 1`` ranks, so ``data_parallel.train`` on ``world_size - 1`` ranks
    with the same ``batch_size``, ``seed`` and ``lr`` sees exactly the same data.
    ``straggler=(rank, seconds)`` slows one worker down.  Returns a ``ServerRecord`` on
    rank 0 and a ``RankRecord`` (``method="async"``) on the workers.
    """
    if worker.device.type != "cpu" or worker.backend != "torchrun":
        raise ValueError("async_sgd runs on CPU processes over gloo (NCCL cannot receive from "
                         "any rank); launch it with device='cpu' and backend='torchrun'")
    config = dict(model=model, width=width, batch_size=batch_size, steps=steps, lr=lr, seed=seed,
                  dtype=dtype, straggler=straggler, workers=worker.world_size - 1)
    if worker.rank == SERVER:
        return serve(worker, build_model(model, width, seed=seed, dtype=DTYPES[dtype]), config)
    me, workers = worker.rank - 1, worker.world_size - 1       # my shard among the workers
    run = start(worker, model=model, width=width, lr=lr, seed=seed, dtype=dtype, method="async",
                config=config, shard=(me, workers))
    n = run.data.n_train
    return train_steps(run, AsyncWorker(steps), steps,
                       lambda step: rank_batch(n, me, workers, batch_size, step, seed=seed),
                       straggler=straggler)


train.validate_args = validate_args   # the launcher calls it before starting any process
train.supports = frozenset({"torchrun", "cpu"})   # no checkpoints or faults: see the module's docstring


class AsyncWorker(Strategy):
    """Lesson 04: a worker: pull, compute a gradient, push; never waits for another worker."""

    def __init__(self, steps: int):
        self.steps = steps

    def prepare(self, run: Run) -> None:
        self.inbox = torch.empty(1 + sum(p.numel() for p in run.model.parameters()), dtype=torch.float64)
        run.worker.recv(self.inbox, SERVER)                  # the first pull

    def before_step(self, run: Run, step: int) -> None:
        """Train on the parameters just pulled."""
        self.version = self.inbox[0].item()
        vector_to_parameters(self.inbox[1:].to(next(run.model.parameters()).dtype), run.model.parameters())

    def communicate(self, run: Run, step: int) -> tuple[float, float]:
        """Push the gradient (with the version it was computed on), then pull the news."""
        start = time.time()
        grad = torch.cat([p.grad.reshape(-1) for p in run.model.parameters()]).double()
        header = torch.tensor([self.version, run.loss, run.accuracy], dtype=torch.float64)
        run.worker.send(torch.cat([header, grad]), SERVER)   # push
        if step + 1 < self.steps:
            run.worker.recv(self.inbox, SERVER)              # pull
        return start, time.time()

    def update(self, run: Run, step: int) -> None:
        pass                                                 # the server applies the gradient


def serve(worker, net, config) -> ServerRecord:
    """The server: apply gradients as they come, answer each worker with fresh parameters."""
    n_workers, steps, lr = worker.world_size - 1, config["steps"], config["lr"]
    params = parameters_to_vector(net.parameters()).detach()
    version = 0
    record = ServerRecord(worker.rank, worker.world_size, config, t_first=time.time())
    for w in range(1, worker.world_size):                  # everybody starts from version 0
        worker.send(torch.cat([torch.tensor([version], dtype=torch.float64), params.double()]), w)
    left = {w: steps for w in range(1, worker.world_size)}
    inbox = torch.empty(3 + params.numel(), dtype=torch.float64)
    for _ in range(n_workers * steps):
        sender = worker.recv_any(inbox)                    # from whichever worker is first
        used, loss, acc = int(inbox[0]), float(inbox[1]), float(inbox[2])
        params -= lr * inbox[3:].to(params.dtype)          # plain SGD, on arrival
        version += 1
        record.updates.append(Update(version, sender, used, version - 1 - used, time.time(),
                                     loss, acc))
        left[sender] -= 1
        if left[sender]:                                   # it still has work: send the news
            worker.send(torch.cat([torch.tensor([version], dtype=torch.float64), params.double()]),
                        sender)
    record.wall_time = time.time() - record.t_first
    vector_to_parameters(params, net.parameters())
    data = load_digits(dtype=DTYPES[config["dtype"]])
    record.test_accuracy = evaluate(net, data.x_test, data.y_test)
    record.params = {n: p.detach().clone() for n, p in net.named_parameters()}
    return record


# -------------------------------------------------------------------------------------------
# reading the records (the loss curves the lesson draws: widgets/timeline.py, curve_async)
# -------------------------------------------------------------------------------------------
def staleness_counts(server: ServerRecord) -> dict[int, int]:
    """Lesson 04: how many applied gradients had staleness 0, 1, 2, ..."""
    counts: dict[int, int] = {}
    for s in server.staleness:
        counts[s] = counts.get(s, 0) + 1
    return dict(sorted(counts.items()))


def staleness_split(server: ServerRecord) -> dict[int, dict[str, list[int]]]:
    """Lesson 04: each worker's staleness, split where the other workers stopped pushing.

    ``{worker: {"shared": [...], "alone": [...]}}``.  "alone" holds the gradients a worker
    computed on parameters pulled after every other worker had pushed its last gradient:
    nobody can move the parameters between that pull and the push, so their staleness is 0
    by construction.  "shared" holds the rest.  Every worker runs the same number of steps,
    so a fast worker finishes early and a slow one then trains alone: its mean staleness over
    the whole run mixes a stale part with a fresh one, and this split shows both.
    """
    last = {}                                     # the server's version after each worker's last gradient
    for u in server.updates:
        last[u.worker] = u.version
    out = {w: {"shared": [], "alone": []} for w in sorted(last)}
    for u in server.updates:
        others = max((v for w, v in last.items() if w != u.worker), default=0)
        out[u.worker]["alone" if u.version_used >= others else "shared"].append(u.staleness)
    return out
