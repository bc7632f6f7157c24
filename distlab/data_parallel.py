"""Data parallelism, two ways: averaging gradients by hand, then PyTorch's DistributedDataParallel.

Introduced in lesson 01.  The idea in one sentence: every rank holds a full copy of the
model, trains on its own shard of the data, and before each update the ranks *average
their gradients*, so every copy takes the same step and the copies never drift apart.

Why averaging is exactly right: the loss of a mini-batch is the mean over its samples, so
the gradient of one big batch of N*B samples is the mean of the N gradients of N batches of
B samples.  N ranks at batch B therefore take the same steps as one process at batch N*B
(``train_single``), up to floating-point rounding; the tests check it to 1e-6.

``method="by_hand"`` does it in the plainest way: backward, then one ``all_reduce`` per
parameter.  ``method="ddp"`` lets DistributedDataParallel do it (bucketed all-reduces that
overlap the backward pass) or, on Horovod, ``hvd.DistributedOptimizer``.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from .collectives import ALGORITHMS, all_reduce
from .data import check_world_size, global_batch, load_digits, rank_batch, shard_indices, steps_per_epoch
from .models import MODELS, build_model
from .records import RankRecord, StepRecord

METHODS = ("by_hand", "ddp")
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def per_rank_batch(world_size: int, batch_size: int | None, global_batch_size: int | None) -> int:
    """The per-rank batch, from either the per-rank or the global batch size."""
    if (batch_size is None) == (global_batch_size is None):
        raise ValueError("give exactly one of batch_size (per rank) or global_batch_size")
    if global_batch_size is not None:
        if not isinstance(global_batch_size, int) or global_batch_size < 1:
            raise ValueError(f"global_batch_size must be a positive integer, got {global_batch_size!r}")
        if global_batch_size % world_size:
            raise ValueError(f"global batch {global_batch_size} does not divide among {world_size} "
                             f"ranks; use a multiple of {world_size}")
        return global_batch_size // world_size
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def validate_args(world_size: int, *, method: str = "by_hand", model: str = "mlp", width: int = 64,
                  batch_size: int | None = None, global_batch_size: int | None = None,
                  steps: int = 50, dtype: str = "float32", straggler=None, warmup_steps: int = 0,
                  collective: str = "dist", **_) -> int:
    """Check a data-parallel job before any process starts; return the per-rank batch."""
    if collective != "dist" and collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; choose 'dist' or one of {', '.join(ALGORITHMS)}")
    if collective != "dist" and method != "by_hand":
        raise ValueError("collective= chooses how method='by_hand' averages; DDP and Horovod use their own")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0, got {warmup_steps!r}")
    check_straggler(straggler, world_size)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    n = load_digits().n_train
    check_world_size(world_size, n)
    b = per_rank_batch(world_size, batch_size, global_batch_size)
    if steps_per_epoch(n, world_size, b) == 0:
        raise ValueError(f"batch size {b} per rank is larger than each rank's shard "
                         f"({-(-n // world_size)} samples of {n})")
    return b


def check_straggler(straggler, world_size: int) -> None:
    """Lesson 04: ``straggler`` is ``None`` or ``(rank, seconds)``: that rank computes slower."""
    if straggler is None:
        return
    if (not isinstance(straggler, (tuple, list)) or len(straggler) != 2
            or isinstance(straggler[0], bool) or not isinstance(straggler[0], int)
            or isinstance(straggler[1], bool) or not isinstance(straggler[1], (int, float))):
        raise ValueError(f"straggler must be (rank, seconds), e.g. (1, 0.05), got {straggler!r}")
    rank, delay = straggler
    if not 0 <= rank < world_size:
        raise ValueError(f"straggler rank {rank} is outside 0..{world_size - 1}")
    if not 0 <= delay <= 10:
        raise ValueError(f"straggler delay must be between 0 and 10 seconds, got {delay!r}")


def warmup_lr(lr: float, step: int, warmup_steps: int, world_size: int) -> float:
    """Lesson 05: the learning rate at ``step`` with a linear warm-up (Goyal et al., 2017).

    N ranks averaging gradients take the steps of one process at N times the batch; the
    *linear scaling rule* multiplies the learning rate by N to match.  Early in training a
    step that large can overshoot, so the rate starts at ``lr / world_size`` (the
    single-worker rate) and grows linearly to ``lr`` over ``warmup_steps`` steps.
    """
    if step >= warmup_steps:
        return lr
    return lr * (1 / world_size + (1 - 1 / world_size) * step / warmup_steps)


def train(worker, *, method: str = "by_hand", model: str = "mlp", width: int = 64,
          batch_size: int | None = None, global_batch_size: int | None = None, steps: int = 50,
          lr: float = 0.1, seed: int = 0, record_grads_at=(0,), record_layers=None,
          dtype: str = "float32", straggler: tuple[int, float] | None = None,
          warmup_steps: int = 0, collective: str = "dist") -> RankRecord:
    """Lesson 01: train on this rank's shard, averaging gradients with the other ranks.

    Returns this rank's ``RankRecord``: loss and accuracy per step, the shard, timings, the
    local and averaged gradients at the steps in ``record_grads_at``, and the final
    parameters.

    ``straggler=(rank, seconds)`` (lesson 04) makes that rank sleep ``seconds`` inside the
    compute phase of every step, as a slower machine would: the others wait for it at
    every all-reduce.  ``warmup_steps`` (lesson 05) ramps the learning rate up (``warmup_lr``).
    ``collective`` (lesson 03): ``"dist"`` averages with ``dist.all_reduce``; ``"naive"``,
    ``"parameter_server"``, ``"ring"`` or ``"tree"`` with the hand-written ``distlab.collectives``.
    """
    b = validate_args(worker.world_size, method=method, model=model, width=width,
                      batch_size=batch_size, global_batch_size=global_batch_size,
                      steps=steps, dtype=dtype, straggler=straggler, warmup_steps=warmup_steps,
                      collective=collective)
    data = load_digits(dtype=DTYPES[dtype])
    x_all, y_all = data.x_train.to(worker.device), data.y_train.to(worker.device)
    net = build_model(model, width, seed=seed, dtype=DTYPES[dtype]).to(worker.device)
    names = [n for n, _ in net.named_parameters()]
    layers = names if record_layers is None else list(record_layers)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    inner = net   # the plain model, whatever wraps it

    if method == "ddp" and worker.backend == "horovod":
        hvd = worker._hvd
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters())
    elif method == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        # DDP broadcasts rank 0's parameters when it is built, then averages in backward.
        net = DDP(net, device_ids=[worker.device.index] if worker.device.type == "cuda" else None)
    else:
        # By hand: start from the same parameters everywhere (rank 0's), as DDP would.
        with torch.no_grad():
            for p in net.parameters():
                worker.broadcast(p.data, src=0)

    record = RankRecord(worker.rank, worker.world_size, worker.backend, method, str(worker.device),
                        config=dict(model=model, width=width, batch_size=b, steps=steps, lr=lr,
                                    seed=seed, dtype=dtype, straggler=straggler,
                                    warmup_steps=warmup_steps, collective=collective),
                        shard=shard_indices(data.n_train, worker.rank, worker.world_size, seed=seed))
    t_first = time.time()
    for step in range(steps):
        idx = rank_batch(data.n_train, worker.rank, worker.world_size, b, step, seed=seed).to(worker.device)
        x, y = x_all[idx], y_all[idx]
        wanted = step in record_grads_at
        local = _local_gradients(inner, x, y, layers) if wanted and method == "ddp" else None
        t0 = time.time()
        out = net(x)
        loss = F.cross_entropy(out, y)
        net.zero_grad(set_to_none=False)   # (Horovod 0.28's optimizer wrapper has no set_to_none)
        loss.backward()        # with DDP (and Horovod's optimizer) the averaging starts in here
        if straggler is not None and worker.rank == straggler[0]:
            time.sleep(straggler[1])   # lesson 04: a slower machine, seen as longer compute
        t1 = time.time()
        t_comm = None
        if method == "by_hand":
            if wanted:
                local = {n: p.grad.detach().cpu().clone() for n, p in net.named_parameters() if n in layers}
            t_comm = time.time()
            for p in net.parameters():      # the naive way: one all-reduce per parameter tensor
                if collective == "dist":
                    worker.all_reduce(p.grad, op="avg")
                else:                       # lesson 03: a hand-written all-reduce
                    all_reduce(p.grad, "avg", collective)
            t_comm = (t_comm, time.time())
        for group in opt.param_groups:
            group["lr"] = warmup_lr(lr, step, warmup_steps, worker.world_size)
        if method == "ddp" and worker.backend == "horovod":
            worker.wait_for_optimizer(opt)   # Horovod's all-reduces, started in backward
        opt.step()
        t2 = time.time()
        if wanted:
            record.grads[step] = {n: {"local": local[n], "average": p.grad.detach().cpu().clone()}
                                  for n, p in inner.named_parameters() if n in layers}
        acc = (out.argmax(1) == y).double().mean().item()
        record.steps.append(StepRecord(step, loss.item(), acc, t0, t1,
                                       t_comm[0] if t_comm else None,
                                       t_comm[1] if t_comm else None, t2))
        worker.progress(step + 1, steps, loss=loss.item())
    record.wall_time = time.time() - t_first
    record.test_accuracy = evaluate(inner, data.x_test.to(worker.device), data.y_test.to(worker.device))
    record.params = {n: p.detach().cpu().clone() for n, p in inner.named_parameters()}
    return record


train.validate_args = validate_args   # the launcher calls it before starting any process


def _local_gradients(net, x, y, layers) -> dict[str, torch.Tensor]:
    """This rank's own gradient, computed on the plain model so that no all-reduce happens.

    DDP and Horovod average inside ``backward``, so the local gradient never sits in
    ``.grad``; on the steps we record, we compute it once more on the side.
    """
    params = [(n, p) for n, p in net.named_parameters() if n in layers]
    loss = F.cross_entropy(net(x), y)
    grads = torch.autograd.grad(loss, [p for _, p in params])
    return {n: g.detach().cpu().clone() for (n, _), g in zip(params, grads)}


@torch.no_grad()
def evaluate(net, x, y) -> float:
    """Accuracy on a held-out set."""
    net.eval()
    acc = (net(x).argmax(1) == y).double().mean().item()
    net.train()
    return acc


def train_single(*, world_size: int = 1, model: str = "mlp", width: int = 64,
                 batch_size: int | None = None, global_batch_size: int | None = None,
                 steps: int = 50, lr: float = 0.1, seed: int = 0, record_grads_at=(0,),
                 record_layers=None, dtype: str = "float32", device: str = "cpu",
                 warmup_steps: int = 0) -> RankRecord:
    """Lesson 01: the reference, one process at the global batch that ``world_size`` ranks share.

    Runs in the calling process.  At every step it takes exactly the union of the ranks'
    mini-batches (``global_batch``), so its parameters are what data parallelism must give.
    ``grads[step][layer]["local"]`` holds the big-batch gradient.
    """
    b = validate_args(world_size, model=model, width=width, batch_size=batch_size,
                      global_batch_size=global_batch_size, steps=steps, dtype=dtype,
                      warmup_steps=warmup_steps)
    data = load_digits(dtype=DTYPES[dtype])
    net = build_model(model, width, seed=seed, dtype=DTYPES[dtype]).to(device)
    layers = [n for n, _ in net.named_parameters()] if record_layers is None else list(record_layers)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    record = RankRecord(0, 1, "single", "single", device,
                        config=dict(model=model, width=width, batch_size=b * world_size, steps=steps,
                                    lr=lr, seed=seed, dtype=dtype, mimics_world_size=world_size,
                                    warmup_steps=warmup_steps),
                        shard=torch.arange(data.n_train))
    t_first = time.time()
    for step in range(steps):
        idx = global_batch(data.n_train, world_size, b, step, seed=seed)
        x, y = data.x_train[idx].to(device), data.y_train[idx].to(device)
        t0 = time.time()
        out = net(x)
        loss = F.cross_entropy(out, y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        t1 = time.time()
        if step in record_grads_at:
            record.grads[step] = {n: {"local": p.grad.detach().cpu().clone(),
                                      "average": p.grad.detach().cpu().clone()}
                                  for n, p in net.named_parameters() if n in layers}
        for group in opt.param_groups:
            group["lr"] = warmup_lr(lr, step, warmup_steps, world_size)
        opt.step()
        acc = (out.argmax(1) == y).double().mean().item()
        record.steps.append(StepRecord(step, loss.item(), acc, t0, t1, None, None, time.time()))
    record.wall_time = time.time() - t_first
    record.test_accuracy = evaluate(net, data.x_test.to(device), data.y_test.to(device))
    record.params = {n: p.detach().cpu().clone() for n, p in net.named_parameters()}
    return record
