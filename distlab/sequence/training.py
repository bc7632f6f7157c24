"""Training the line reader with the one loop, on one process or with its blocks split across ranks.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  Nothing here is a
new loop: ``ReadLines`` is a ``Strategy`` whose step computes the transformer's two-part loss
(each digit, and whether the line checks out), and ``LineData`` hands the loop lines by number,
so checkpoints, metrics, faults and the step records come from ``parallel.loop`` as for every
other strategy.  ``train`` splits each block across the mesh's tensor group
(``sequence.tensor_parallel``); ``train_single`` is the one-process reference it must equal.
"""
from __future__ import annotations

import time

import torch

from ..data import load_digits
from ..parallel.loop import Done, Run, Strategy, train_steps
from ..parallel.named_mesh import Mesh, check_mesh
from ..parallel.tensor_parallel import Traffic, check_backend
from ..processes.checks import check_int, check_positive
from ..processes.cores import one_thread
from ..processes.worker import Worker
from ..records import RankRecord
from . import context_parallel as cp
from . import tensor_parallel as tp
from .lines import LineData
from .memory import SavedTensors
from .transformer import TransformerConfig, build_transformer, describe, line_loss


class ReadLines(Strategy):
    """Lesson 12: one step of the line reader: forward, the two-part loss, backward, the gradients
    made whole (``sync``: summed over the context group, averaged over the data group), Adam's update.
    With the blocks split, the all-reduces happen inside forward and backward (``Traffic`` counts them)."""

    def __init__(self, traffic: Traffic | None = None, piece=None, sync=None):
        self.traffic, self.piece, self.sync = traffic, piece, sync
        self.last_step = {}     # the bytes the latest step all-reduced inside the blocks
        self.last_ring = {}     # and, split along the sequence, its messages and attention time
        self.activation_bytes = 0   # the bytes of activations its forward saved for backward
        self.attention_by_step = []     # this rank's attention time in each step (a spread, not one figure)

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = time.time()
        before = dict(self.traffic.bytes) if self.traffic else {}
        if self.piece is not None:
            self.piece.new_step()
        with SavedTensors(run.model) as saved:            # what the forward keeps for the backward
            loss, digits, _ = line_loss(*run.net(x), y)
            loss = loss + self.extra_loss(run)
        self.activation_bytes = saved.bytes
        run.optimizer.zero_grad()
        loss.backward()
        t_compute_end = time.time()
        if self.sync is not None:
            self.sync()
        run.optimizer.step()
        if self.traffic:
            self.last_step = {k: v - before[k] for k, v in self.traffic.bytes.items()}
        if self.piece is not None:
            self.attention_by_step.append(self.piece.work)
            self.last_ring = {"bytes": dict(self.piece.bytes), "log": list(self.piece.log),
                              "attention_seconds": self.piece.work, "score_blocks": self.piece.blocks,
                              "attention_seconds_by_step": list(self.attention_by_step),
                              "computed": sorted(self.piece.computed), "chunks": self.piece.tokens // self.piece.chunk}
        return Done(loss.item(), digits, t_start, t_compute_end)

    def extra_loss(self, run: Run):
        """What the model adds to the task's loss: nothing here; lesson 13's experts their balancing losses."""
        return 0.0

    @torch.no_grad()
    def finish(self, run: Run) -> None:
        """The record's last entries: the digit accuracy on the test lines (and, in its config, how
        often the line's check was read right), and this rank's parameters."""
        device = run.worker.device
        _, run.record.test_accuracy, check = line_loss(*run.model(run.data.x_test.to(device)),
                                                       run.data.y_test.to(device))
        run.record.config["test_check_accuracy"] = check
        run.record.params = {n: getattr(p, "full_tensor", lambda p=p: p)().detach().cpu().clone()   # DTensors whole
                             for n, p in run.model.named_parameters()}


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", d_model: int = 64,
                  heads: int = 4, layers: int = 2, digits: int = 4, global_batch_size: int = 32,
                  steps: int = 20, lr: float = 3e-3, seed: int = 0, causal: bool = False,
                  optimizer: str = "adam", data: int = 1, context: int = 1, tensor: int | None = None,
                  attention: str = "ring", split: str = "contiguous", sequence_parallel: bool = False,
                  use_torch: bool = False, test_lines: int = 256) -> None:
    """Lesson 12: the settings of a split line reader, checked before any process starts."""
    check_backend("sequence.training.train", backend, device, use_torch)
    check_int("digits", digits, minimum=2)
    cfg = TransformerConfig(d_model=d_model, heads=heads, layers=layers, max_digits=digits, causal=causal)
    sizes = check_mesh(world_size, dict(data=data, context=context, tensor=_tensor(world_size, data, context, tensor)))
    tp.check_heads(cfg.heads, cfg.mlp_ratio * cfg.d_model, sizes["tensor"])
    if attention not in cp.ATTENTION:
        raise ValueError(f"unknown context-parallel attention {attention!r}; use one of {', '.join(cp.ATTENTION)}")
    cp.check_split(digits * 16, sizes["context"], split)
    if not isinstance(sequence_parallel, bool):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    if sequence_parallel:
        if sizes["tensor"] == 1:
            raise ValueError("sequence_parallel=True cuts the line across the tensor group: it needs tensor > 1")
        if sizes["context"] > 1:
            raise ValueError("sequence parallelism with context parallelism is not built here: "
                             "use one of them (context > 1, or sequence_parallel=True)")
        cp.check_split(digits * 16, sizes["tensor"], "contiguous")
    if use_torch and (sizes["tensor"] == 1 or sizes["context"] > 1 or sizes["data"] > 1):
        raise ValueError("use_torch=True splits the blocks with PyTorch's parallelize_module across all the ranks: "
                         "give no data or context axis (tensor parallelism, with or without sequence_parallel)")
    if sizes["context"] > 1 and attention == "ring" and backend == "horovod":
        raise ValueError("ring attention passes K and V to the next rank point to point, which Horovod "
                         "cannot do (it has collectives only): use backend='torchrun', or attention='all_gather'")
    check_int("steps", steps)
    check_positive("lr", lr)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    check_int("global_batch_size", global_batch_size)
    if global_batch_size % data:
        raise ValueError(f"global_batch_size {global_batch_size} does not divide among {data} data replicas")
    check_int("seed", seed, minimum=0)
    check_int("test_lines", test_lines)


def _tensor(world_size: int, data: int, context: int, tensor: int | None) -> int:
    """The tensor axis: as given, or the ranks the data and context axes leave (at least 1)."""
    return tensor if tensor is not None else max(world_size // max(data * context, 1), 1)


OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def _run(worker, *, d_model, heads, layers, digits, global_batch_size, steps, lr, seed, causal, method,
         mesh=None, attention="ring", split="contiguous", optimizer="adam", sequence_parallel=False,
         use_torch=False, test_lines=256) -> RankRecord:
    cfg = TransformerConfig(d_model=d_model, heads=heads, layers=layers, max_digits=digits, causal=causal)
    data = LineData(load_digits(), digits, seed, test_size=test_lines)
    model = build_transformer(cfg, seed=seed).to(worker.device)
    traffic, piece, sync = None, None, None
    share, replicas = slice(None), 1
    if mesh is not None:
        if mesh.size("tensor") > 1 and use_torch:
            tp.split_model_with_torch(model, mesh.device_mesh["tensor"], sequence_parallel)
        elif mesh.size("tensor") > 1:
            traffic = Traffic()
            tp.split_model(model, worker, mesh.group("tensor"), traffic, sequence_parallel)
        if sequence_parallel:       # the line between the split regions: contiguous pieces of the tensor group
            model.set_piece(cp.Piece(worker, mesh.group("tensor"), digits * 16, "contiguous"), attention=False)
        if mesh.size("context") > 1:
            piece = cp.split_line(model, worker, mesh.group("context"), digits * 16, split, attention)
        replicas = mesh.size("data")
        b = global_batch_size // replicas
        share = slice(mesh.coordinates["data"] * b, (mesh.coordinates["data"] + 1) * b)
        sync = lambda: _sync(model, worker, mesh, piece or model.piece)     # noqa: E731
    record = RankRecord(worker.rank, worker.world_size, worker.backend, method, str(worker.device),
                        config=dict(describe(cfg), digits=digits, tokens=digits * 16,
                                    batch_size=global_batch_size // replicas, global_batch_size=global_batch_size,
                                    steps=steps, lr=lr, optimizer=optimizer, seed=seed, attention=attention,
                                    split=split, sequence_parallel=sequence_parallel, use_torch=use_torch,
                                    test_lines=test_lines,
                                    mesh=dict(mesh.sizes) if mesh is not None else None),
                        shard=torch.arange(0))
    # (foreach=False: PyTorch's split leaves DTensors and plain tensors side by side in one optimizer)
    run = Run(worker, data, None, None, model, model, OPTIMIZERS[optimizer](model.parameters(), lr=lr, foreach=False),
              record)
    strategy = ReadLines(traffic, piece, sync)
    record.shapes = watch_shapes(model.blocks[0])     # filled by the first forward pass
    record = train_steps(run, strategy, steps,
                         lambda step: torch.arange(step * global_batch_size, (step + 1) * global_batch_size)[share])
    record.traffic, record.ring = dict(strategy.last_step), dict(strategy.last_ring)
    record.activation_bytes = strategy.activation_bytes
    return record


POINTS = {"ln1": "LayerNorm 1", "attn.q": "Q", "attn": "attention out", "ln2": "LayerNorm 2",
          "mlp.fc1": "MLP hidden", "mlp": "MLP out"}


def watch_shapes(block) -> list:
    """Lesson 12: the shape of the tensor this rank holds at each point of ``block`` (``POINTS``), from its
    first forward pass: which part of the line and of the width each rank keeps where."""
    shapes, hooks = [], []

    def hook(name):
        def note(module, args, out):
            if len(shapes) < len(POINTS):
                shapes.append((POINTS[name], tuple(getattr(out, "_local_tensor", out).shape)))
            if len(shapes) == len(POINTS):
                for h in hooks:
                    h.remove()
        return note

    for name in POINTS:
        hooks.append(block.get_submodule(name).register_forward_hook(hook(name)))
    return shapes


def _sync(model, worker, mesh, piece) -> None:
    """Lesson 12: each parameter's gradient made the whole batch's: the context group's tokens summed
    (each rank saw only its piece of the line), then the data replicas' lines averaged (lesson 04)."""
    if piece is not None:           # context parallelism, or sequence parallelism's pieces of the tensor group
        cp.sum_token_grads(model, piece, split=tp.SPLIT if mesh.size("context") == 1 else ())
    if mesh.size("data") > 1:
        for p in model.parameters():
            worker.all_reduce(p.grad, op="avg", group=mesh.group("data"))


def train(worker, *, d_model: int = 64, heads: int = 4, layers: int = 2, digits: int = 4,
          global_batch_size: int = 32, steps: int = 20, lr: float = 3e-3, seed: int = 0,
          causal: bool = False, data: int = 1, context: int = 1, tensor: int | None = None,
          attention: str = "ring", split: str = "contiguous", optimizer: str = "adam",
          sequence_parallel: bool = False, use_torch: bool = False, test_lines: int = 256) -> RankRecord:
    """Lesson 12: the line reader split across the mesh ``data x context x tensor`` (``tensor``
    defaults to the ranks the other two leave): each block's heads and hidden units across the tensor
    group (tensor parallelism by hand), the line across the context group (``attention``: "ring" or
    "all_gather"; ``split``: "contiguous" or "zigzag"), the batch across the data replicas.
    ``test_lines``: how many test lines the accuracy is read on at the end (fewer for long lines, whose
    evaluation would otherwise hold more memory than their training).

    The record's ``params`` are this rank's (``tensor_parallel.merge_params`` joins a tensor group's),
    ``traffic`` the bytes the blocks all-reduced in the last step, ``ring`` the context group's
    messages and attention time in it."""
    mesh = Mesh(worker, data=data, context=context, tensor=_tensor(worker.world_size, data, context, tensor))
    what = " x ".join(f"{axis} {mesh.size(axis)}" for axis in ("data", "context", "tensor") if mesh.size(axis) > 1)
    if mesh.size("context") > 1:
        what += f" ({attention}, {split})"
    if sequence_parallel:
        what += " + sequence parallel"
    if use_torch:
        what += " (PyTorch's parallelize_module)"
    return _run(worker, d_model=d_model, heads=heads, layers=layers, digits=digits,
                global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed, causal=causal,
                method=f"transformer: {what or 'one rank'}", mesh=mesh, attention=attention, split=split,
                optimizer=optimizer, sequence_parallel=sequence_parallel, use_torch=use_torch, test_lines=test_lines)


def train_single(*, d_model: int = 64, heads: int = 4, layers: int = 2, digits: int = 4,
                 global_batch_size: int = 32, steps: int = 20, lr: float = 3e-3, seed: int = 0,
                 causal: bool = False, optimizer: str = "adam", test_lines: int = 256) -> RankRecord:
    """Lesson 12: the reference: the same training in this process, nothing split."""
    alone = Worker(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"))
    with one_thread():
        return _run(alone, d_model=d_model, heads=heads, layers=layers, digits=digits,
                    global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed, causal=causal,
                    method="transformer, one process", optimizer=optimizer, test_lines=test_lines)


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})
