"""Training the line reader with experts: on one process, or with its experts spread over ranks.

Introduced in lesson 13 (experts: a bigger model for the same compute).  Nothing here is a new loop:
lesson 12's line reader has the MLP of every block replaced by a mixture of experts (``add_experts``),
and ``ReadWithExperts`` is lesson 12's step (``sequence.training.ReadLines``) with the experts'
balancing losses added to the loss and each step's routing written down.  The mesh is
``data x expert``: the ranks of an expert group share out the experts and exchange tokens
(``expert_parallel``); every rank trains on lines of its own, so the dense parameters are averaged
over all ranks, as in data parallelism, and each expert's gradient, which already holds the tokens
of its whole expert group, is averaged over that expert's copies in the data replicas.
"""
from __future__ import annotations

import torch

from ..data import load_digits
from ..train.reduce import all_reduce_flat
from ..parallel.loop import Run, train_steps
from ..parallel.named_mesh import Mesh, check_mesh
from ..parallel.tensor_parallel import Traffic
from ..processes.checks import check_int, check_positive
from ..processes.cores import one_thread
from ..processes.worker import Worker
from ..records import RankRecord
from ..sequence.lines import LineData
from ..sequence.training import OPTIMIZERS, ReadLines
from ..sequence.transformer import TransformerConfig, build_transformer, describe
from .expert_parallel import HOW, ExpertParallelMoE, check_experts
from .moe import MoE, MoEConfig


def add_experts(model, cfg: MoEConfig, seed: int, groups: int = 1):
    """Lesson 13: every block's MLP replaced by ``cfg.experts`` experts of the MLP's size and a router,
    made from ``seed`` (the same on every rank, as the dense parameters are)."""
    for i, block in enumerate(model.blocks):
        torch.manual_seed(seed * 1_000 + 17 + i)
        block.mlp = MoE(model.cfg.d_model, model.cfg.mlp_ratio * model.cfg.d_model, cfg, groups)
    return model


EXAMPLES = 4      # test lines whose tokens' first choices the record keeps (the router's picture)


class ReadWithExperts(ReadLines):
    """Lesson 13: lesson 12's step, plus the balancing losses, plus what each step routed where."""

    def __init__(self, sync=None, traffic: Traffic | None = None):
        super().__init__(traffic=traffic, sync=sync)
        self.bytes_by_step = []   # per step: the bytes that arrived from other ranks, forward and backward
        self.routing = []     # per step, per block: tokens asked of and kept by each expert, dropped, ...
        self.router = {}      # after training: the first choice of every token of a few test lines

    def extra_loss(self, run: Run):
        return sum(block.mlp.extra_loss for block in run.model.blocks)

    def step(self, run, step, x, y):
        done = super().step(run, step, x, y)
        self.bytes_by_step.append(dict(self.last_step))
        self.routing.append([{k: v for k, v in block.mlp.last.items() if k != "choice"}
                             for block in run.model.blocks])
        return done

    def finish(self, run: Run) -> None:
        """Lesson 12's test, then which expert each block's router picked for the first test lines' tokens."""
        super().finish(run)
        tokens = EXAMPLES * run.data.x_test.shape[1]
        self.router = {"experts": run.model.blocks[0].mlp.cfg.experts,
                       "tokens": run.data.x_test[:EXAMPLES].clone(), "digits": run.data.y_test[:EXAMPLES].clone(),
                       "choice": [block.mlp.last["choice"][:tokens].view(EXAMPLES, -1).clone()
                                  for block in run.model.blocks]}


def _sync(model, worker, mesh) -> None:
    """Lesson 13: the dense parameters averaged over every rank; an expert's gradient (the sum over its
    expert group's tokens) divided by the group's size and averaged over the data replicas.  Each of
    the two is one all-reduce of all its gradients laid end to end (``all_reduce_flat``, lesson 01's
    fused average): a step with dozens of small all-reduces would spend its time on their start-ups."""
    dense, experts = [], []
    for name, p in model.named_parameters():
        (experts if ".mlp.experts." in name else dense).append(p.grad)
    all_reduce_flat(worker, dense)
    if mesh.size("data") > 1:
        all_reduce_flat(worker, experts, mesh.group("data"))
    for g in experts:
        g.div_(mesh.size("expert"))


def validate_args(world_size: int, *, backend: str = "torchrun", device: str = "cpu", d_model: int = 32,
                  heads: int = 4, layers: int = 2, digits: int = 3, global_batch_size: int = 16, steps: int = 20,
                  lr: float = 3e-3, seed: int = 0, optimizer: str = "adam", data: int = 1, expert: int | None = None,
                  experts: int = 4, top_k: int = 1, capacity_factor: float = 1.25, aux_weight: float = 0.01,
                  z_weight: float = 0.0, how: str = "library", test_lines: int = 256) -> None:
    """Lesson 13: the settings of a line reader with experts, checked before any process starts."""
    TransformerConfig(d_model=d_model, heads=heads, layers=layers, max_digits=digits)
    MoEConfig(experts, top_k, capacity_factor, aux_weight, z_weight)
    sizes = check_mesh(world_size, dict(data=data, expert=_expert(world_size, data, expert)))
    check_experts(experts, sizes["expert"])
    if how not in HOW:
        raise ValueError(f"unknown all-to-all {how!r}; use one of {', '.join(HOW)}")
    if how == "by_hand" and backend == "horovod" and sizes["expert"] > 1:
        raise ValueError("the all-to-all by hand is made of send/recv, which Horovod does not have: "
                         "use backend='torchrun', or how='library' (hvd.alltoall)")
    if global_batch_size % world_size:
        raise ValueError(f"global_batch_size {global_batch_size} does not divide among {world_size} ranks "
                         "(each rank routes lines of its own)")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    check_int("digits", digits, minimum=2)
    check_int("steps", steps)
    check_int("seed", seed, minimum=0)
    check_int("test_lines", test_lines)
    check_positive("lr", lr)


def _expert(world_size: int, data: int, expert: int | None) -> int:
    return expert if expert is not None else max(world_size // max(data, 1), 1)


def _run(worker, *, d_model, heads, layers, digits, global_batch_size, steps, lr, seed, optimizer, experts,
         top_k, capacity_factor, aux_weight, z_weight, how, test_lines, method, mesh=None, groups=1) -> RankRecord:
    cfg = TransformerConfig(d_model=d_model, heads=heads, layers=layers, max_digits=digits)
    moe_cfg = MoEConfig(experts, top_k, capacity_factor, aux_weight, z_weight)
    model = add_experts(build_transformer(cfg, seed=seed), moe_cfg, seed, groups).to(worker.device)
    share, sync, traffic = slice(None), None, Traffic()
    if mesh is not None:
        for block in model.blocks:
            block.mlp = ExpertParallelMoE(block.mlp, worker, mesh.group("expert"), how, traffic)
        b = global_batch_size // worker.world_size
        share = slice(worker.rank * b, (worker.rank + 1) * b)
        sync = lambda: _sync(model, worker, mesh)      # noqa: E731
    record = RankRecord(worker.rank, worker.world_size, worker.backend, method, str(worker.device),
                        config=dict(describe(cfg), digits=digits, tokens=digits * 16, experts=experts, top_k=top_k,
                                    capacity_factor=capacity_factor, aux_weight=aux_weight, z_weight=z_weight,
                                    how=how, global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed,
                                    optimizer=optimizer, test_lines=test_lines,
                                    mesh=dict(mesh.sizes) if mesh is not None else None),
                        shard=torch.arange(0))
    run = Run(worker, LineData(load_digits(), digits, seed, test_size=test_lines), None, None, model, model,
              OPTIMIZERS[optimizer](model.parameters(), lr=lr, foreach=False), record)
    strategy = ReadWithExperts(sync, traffic)
    record = train_steps(run, strategy, steps,
                         lambda step: torch.arange(step * global_batch_size, (step + 1) * global_batch_size)[share])
    record.routing, record.router, record.traffic = strategy.routing, strategy.router, strategy.bytes_by_step
    return record


def train(worker, *, d_model: int = 32, heads: int = 4, layers: int = 2, digits: int = 3,
          global_batch_size: int = 16, steps: int = 20, lr: float = 3e-3, seed: int = 0, optimizer: str = "adam",
          data: int = 1, expert: int | None = None, experts: int = 4, top_k: int = 1,
          capacity_factor: float = 1.25, aux_weight: float = 0.01, z_weight: float = 0.0, how: str = "library",
          test_lines: int = 256) -> RankRecord:
    """Lesson 13: the line reader with ``experts`` experts in every block, spread over the expert axis of
    the mesh ``data x expert`` (``expert`` defaults to the ranks the data axis leaves); ``how`` the
    all-to-all ("by_hand" from send/recv, or "library").  Each rank trains on its own share of every
    batch.  The record's ``routing`` has, per step and block, the tokens asked of and kept by each expert,
    sent to each rank, the forward's times; ``traffic``, per step, the bytes that came from other ranks;
    ``router``, the experts the trained router picks for the tokens of a few test lines."""
    mesh = Mesh(worker, data=data, expert=_expert(worker.world_size, data, expert))
    what = " x ".join(f"{axis} {mesh.size(axis)}" for axis in ("data", "expert") if mesh.size(axis) > 1)
    return _run(worker, d_model=d_model, heads=heads, layers=layers, digits=digits,
                global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed, optimizer=optimizer,
                experts=experts, top_k=top_k, capacity_factor=capacity_factor, aux_weight=aux_weight,
                z_weight=z_weight, how=how, test_lines=test_lines, method=f"experts: {what} ({how})", mesh=mesh)


def train_single(*, groups: int = 1, d_model: int = 32, heads: int = 4, layers: int = 2, digits: int = 3,
                 global_batch_size: int = 16, steps: int = 20, lr: float = 3e-3, seed: int = 0,
                 optimizer: str = "adam", experts: int = 4, top_k: int = 1, capacity_factor: float = 1.25,
                 aux_weight: float = 0.01, z_weight: float = 0.0, test_lines: int = 256) -> RankRecord:
    """Lesson 13: the reference, every expert in this process.  ``groups``: route each step's lines in
    that many groups, as that many ranks would (the capacity holds per group)."""
    alone = Worker(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"))
    with one_thread():
        return _run(alone, d_model=d_model, heads=heads, layers=layers, digits=digits,
                    global_batch_size=global_batch_size, steps=steps, lr=lr, seed=seed, optimizer=optimizer,
                    experts=experts, top_k=top_k, capacity_factor=capacity_factor, aux_weight=aux_weight,
                    z_weight=z_weight, how="library", test_lines=test_lines, method="experts, one process",
                    groups=groups)


train.validate_args = validate_args
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda"})
