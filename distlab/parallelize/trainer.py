"""One trainer for every layout: the line reader on data x pipeline x expert x context x tensor, the MLP too.

Introduced in lesson 12 (the line reader split by heads and by the line) and lesson 13 (its experts),
with lesson 06's pipeline and lesson 01's data parallelism: one training function for every layout, and
for both families of models (``workloads``: lesson 01's MLP and CNN on the data, pipeline and tensor axes,
lesson 12's transformer on all five).
``train(worker, spec)`` builds the model from the spec and its seed, splits it with the
ordered transforms (``transforms.parallelize``) and runs the one loop (``train.loop.train_steps``),
whose step is the one micro-step (``train.step``) m times and the one gradient reducer, or, with a
pipeline, the schedule's passes (each a half of that micro-step) and the same reducer.  ``train_single``
is the one process every layout must equal: the same model, the same lines, nothing split; where the
ranks route tokens to experts in groups of their own, it routes in the same groups.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

from ..experts.moe import MoE
from ..pipeline import schedules
from ..train.loop import Done, Run, Strategy, train_steps
from ..train.mesh import Mesh, check_mesh
from ..pipeline.pipeline import PipelineSchedule
from ..precision import mixed
from ..processes.cores import one_thread
from ..processes.worker import Worker
from ..records import RankRecord
from ..tensor.sequence_parallel import positions
from ..train import recompute
from ..train.spec import TrainSpec
from ..train.reduce import GradientReducer
from ..train.step import make_optimizer, micro_step
from .checks import check
from .transforms import Layout, Parallelized, parallelize
from .watch import Watch
from .workloads import workload


# lesson 12's small transformer: what a notebook's keywords start from (a run config sets every key itself)
DEFAULTS = dict(model="transformer", width=32, depth=2, steps=20, global_batch_size=16, lr=3e-3, optimizer="adam",
                method="fused")


class MicroSteps(Strategy):
    """Lesson 12: a step without a pipeline: the one micro-step on each of m micro-batches (their gradients
    add up), the one gradient reducer, the update; ``watch`` writes down what happened inside."""

    def __init__(self, par: Parallelized, micro_batches: int, work, watch: Watch | None = None):
        self.par, self.m, self.work, self.watch = par, micro_batches, work, watch

    def step(self, run: Run, step: int, x: torch.Tensor, y: torch.Tensor) -> Done:
        t_start = run.clock()
        if self.watch:
            self.watch.before()
        run.optimizer.zero_grad()
        loss = accuracy = 0.0
        overlap = self.par.reducer.overlap        # lesson 15: sent during the last micro-batch's backward only
        for i, (xs, ys) in enumerate(zip(x.chunk(self.m), y.chunk(self.m))):
            if overlap is not None:
                overlap.armed = i == self.m - 1
            with self.watch.forward() if self.watch else nullcontext():
                part_loss, part_accuracy = micro_step(run.model, xs, ys, share=self.m, precision=run.precision)
            loss, accuracy = loss + part_loss / self.m, accuracy + part_accuracy / self.m
        t_compute_end = run.clock()
        self.par.reducer.reduce()
        comm = (t_compute_end, run.clock())
        run.precision.step(run.optimizer)          # lesson 14: fp16 unscales and may skip; bf16 master rounds
        if self.watch:
            self.watch.after()
        return Done(loss, accuracy, t_start, t_compute_end, comm)

    @torch.no_grad()
    def finish(self, run: Run) -> None:
        """The test accuracy (the transformer's: each digit's, and how often the line's check was read right),
        and this rank's parameters under one process's names (PyTorch's split tensors gathered whole)."""
        run.model.eval()
        with run.precision.autocast():      # lesson 14: a 16-bit model reads its test lines in 16 bits
            run.record.test_accuracy, more = self.work.evaluate(run.model, run.worker.device)
        run.model.train()
        run.record.config.update(more)
        if self.watch:
            self.watch.finish(run.data)
        run.record.params = {n: getattr(p, "full_tensor", lambda p=p: p)().detach().cpu().clone()
                             for n, p in self.par.params.items()}
        run.record.loss_scale = run.precision.trace()            # lesson 14: fp16's scale, step by step
        if self.par.reducer.overlap is not None:                 # lesson 15: each step's buckets, sent in backward
            run.record.buckets = self.par.reducer.overlap.timeline


def describe_layout(spec: TrainSpec, sizes: dict) -> str:
    """Lesson 12: the layout in words, for the record's ``method`` ("context 4 (ring, zigzag)", ...)."""
    p = spec.parallel
    what = " x ".join(f"{axis} {size}" for axis, size in sizes.items() if size > 1) or "one rank"
    if sizes["context"] > 1:
        what += f" ({p.attention}, {p.split})"
    if p.sequence_parallel:
        what += " + sequence parallel"
    if p.use_torch:
        what += " (PyTorch's parallelize_module)"
    if sizes["expert"] > 1:
        what += f" (all-to-all {p.all_to_all.replace('_', ' ')})"
    if spec.training.recompute != "none":
        what += f", {spec.training.recompute} recomputation"
    if spec.training.precision != "fp32":
        what += f", {spec.training.precision}"
    return what


def _record(worker, spec: TrainSpec, method: str, mesh=None) -> RankRecord:
    shares = mesh.share()[1] if mesh is not None else 1
    config = dict(spec.flat(), tokens=spec.model.digits * 16, batch_size=spec.training.global_batch_size // shares,
                  mesh=dict(mesh.sizes) if mesh is not None else None,
                  coordinates=dict(mesh.coordinates) if mesh is not None else None)
    return RankRecord(worker.rank, worker.world_size, worker.backend, method, str(worker.device), config=config,
                      shard=torch.arange(0))


def train(worker, spec: TrainSpec) -> RankRecord:
    """Lesson 12: the model of ``spec`` (the line reader, or lesson 01's MLP or CNN: ``workloads``) trained on
    this rank's place in the mesh ``spec.parallel.mesh``.

    The record's ``params`` are what this rank trains, under one process's names (``assemble`` puts a
    job's together); ``config`` holds the spec, the mesh and this rank's coordinates; ``traffic`` the bytes
    the split blocks' collectives carried in the last step."""
    mesh = Mesh(worker, **spec.parallel.mesh)
    work = workload(spec)
    model = work.build(worker.device)
    par = parallelize(model, worker, mesh, spec, work.data.x_test[:1].to(worker.device))
    what = describe_layout(spec, mesh.sizes)
    record = _record(worker, spec, f"{spec.model.kind}: {what}", mesh)
    precision = mixed.policy(spec.training.precision, worker.device.type)      # lesson 14
    mixed.agree_on_overflow(precision, worker)
    if par.stage is not None:
        par.stage.precision = precision
    optimizer = make_optimizer(spec.training.optimizer, precision.prepare(list(par.params.values())),
                               spec.training.lr, foreach=False)
    m = spec.parallel.micro_batches
    if par.stage is not None:
        p = mesh.size("pipeline")
        ops = schedules.schedule(spec.parallel.schedule, p, m, 1)[mesh.coordinates["pipeline"]]
        strategy, net = PipelineSchedule(par.stage, ops, m, lambda params: par.reducer.reduce()), None
        run_model = par.params
    else:
        watch = Watch(model, par.layout, record) if spec.model.kind == "transformer" else None
        strategy, net, run_model = MicroSteps(par, m, work, watch), model, model
    run = Run(worker, work.data, *work.tensors(worker.device), run_model, net, optimizer, record, precision=precision)
    return train_steps(run, strategy, spec.training.steps, work.batches(mesh.share()))


def reference_groups(model, spec: TrainSpec, world_size: int) -> None:
    """Lesson 13: one process routing tokens to its experts in the groups the ranks of a ``world_size``
    job would route them in: each share of the batch, each micro-batch, each piece of the line alone."""
    sizes = check_mesh(world_size, spec.parallel.mesh)
    p = spec.parallel
    pieces = None
    if sizes["context"] > 1:
        pieces = [positions(i, sizes["context"], spec.model.digits * 16, p.split) for i in range(sizes["context"])]
    elif p.sequence_parallel and sizes["tensor"] > 1:
        pieces = [positions(i, sizes["tensor"], spec.model.digits * 16, "contiguous") for i in range(sizes["tensor"])]
    for module in model.modules():
        if isinstance(module, MoE):
            module.groups = sizes["data"] * sizes["expert"] * p.micro_batches
            module.line_pieces = pieces


def train_single(spec: TrainSpec | None = None, *, world_size: int = 1, **settings) -> RankRecord:
    """Lesson 12: the reference: the same training in this process, nothing split (the experts routing in
    the groups a ``world_size`` job of this spec would route in).  ``spec``, or its settings as keywords."""
    spec = spec if spec is not None else spec_of(**settings)
    check(world_size, spec)
    alone = Worker(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"))
    work = workload(spec)
    model = work.build()
    reference_groups(model, spec, world_size)
    recompute.apply(model, spec.training.recompute)      # lesson 14: the one lever that is not a split
    params = dict(model.named_parameters())
    layout = Layout(alone, None, spec)
    par = Parallelized(model, layout, params, GradientReducer(alone, params))      # nothing to split or reduce
    record = _record(alone, spec, f"{spec.model.kind}, one process")
    precision = mixed.policy(spec.training.precision)
    optimizer = make_optimizer(spec.training.optimizer, precision.prepare(model), spec.training.lr, foreach=False)
    run = Run(alone, work.data, *work.tensors("cpu"), model, model, optimizer, record, precision=precision)
    watch = Watch(model, layout, record) if spec.model.kind == "transformer" else None
    with one_thread():
        return train_steps(run, MicroSteps(par, 1, work, watch), spec.training.steps, work.batches((0, 1)))


def assemble(records: list[RankRecord]) -> dict[str, torch.Tensor]:
    """Lesson 12: the whole model's parameters from a job's records, under one process's names: a tensor-
    parallel group's slices joined along the dimension each was cut, everything else from the first rank
    that holds it (the copies in other replicas are equal)."""
    from .workloads import Digits, Lines

    SPLIT = (Lines if records[0].config["model"] == "transformer" else Digits).split
    whole: dict[str, torch.Tensor] = {}
    by_name: dict[str, dict] = {}
    for r in sorted(records, key=lambda r: r.rank):
        lines = {k: v for k, v in r.config["coordinates"].items() if k != "tensor"}
        for name, value in r.params.items():
            key = (name, tuple(sorted(lines.items())))
            by_name.setdefault(name, {}).setdefault(key, {})[r.config["coordinates"]["tensor"]] = value
    for name, copies in by_name.items():
        slices = next(iter(copies.values()))
        cut = next((dim for suffix, dim in SPLIT.items() if name.endswith(suffix)), None)
        split = records[0].config["mesh"]["tensor"] > 1 and not records[0].config["use_torch"]
        whole[name] = (torch.cat([slices[t] for t in sorted(slices)], dim=cut) if cut is not None and split
                       else slices[min(slices)])
    return whole


def spec_of(**settings) -> TrainSpec:
    """Lesson 12: the spec of a notebook's keywords: lesson 12's small transformer (``DEFAULTS``) unless told
    otherwise.  (A run config gives every setting itself: ``RunConfig.call``.)"""
    return TrainSpec.of(**{**DEFAULTS, **settings})


train.validate_args = check
train.spec_of = spec_of            # launch(train, world_size, **settings): the settings become one spec
train.supports = frozenset({"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"})
