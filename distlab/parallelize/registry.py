"""Every strategy a run config can name, in one table: a new strategy is one module plus one line here.

Introduced in lesson 09 (from laptop to cluster).  A notebook runs a strategy by calling its
training function, ``distlab.launch(pipeline.train, world_size=2, micro_batches=4)``; a run
config names it instead (``parallel.strategy: pipeline``).  Between the two sits this table:
for each name, the training function (imported only when it is needed, so that reading a
config does not import DeepSpeed) and where each of its keyword arguments comes from in the
config.  Everything else is derived from it, so nothing can lag behind:

* the config's choices of ``parallel.strategy`` (``config_sections.Parallel``);
* ``RunConfig.call()`` (config -> function and arguments) and ``config.from_launch()``
  (a notebook's call -> config), which read the same ``Arg`` rows in opposite directions;
* the settings a strategy does not use: a config that sets one is refused, not silently
  ignored (``unused_fields``);
* what the function can do (``supports``: backends, devices, checkpoints, faults) and its own
  checks (``validate_args``): both are read from the function itself, so the module that owns
  a strategy stays the one place that says what it can do;
* ``distlab check``'s and ``distlab run``'s help (``describe``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ..train.spec import TrainSpec, flat_names

ALWAYS = ("model.width", "training.steps", "training.lr", "data.seed")     # every strategy trains with these


@dataclass(frozen=True)
class Arg:
    """Lesson 09: one keyword argument of a training function and the config field it comes from.

    ``per``: the field is a total that the function takes as a share: ``"rank"`` divides it
    by the world size (a global batch -> each rank's batch), ``"worker"`` by the world size
    less one (async SGD: rank 0 serves, the others train).
    """

    key: str
    field: str
    per: str = ""

    def value(self, config, world: int):
        section, name = self.field.split(".")
        value = getattr(getattr(config, section), name)
        return value // self.divisor(world) if self.per else value

    def divisor(self, world: int) -> int:
        return world - 1 if self.per == "worker" else world


@dataclass(frozen=True)
class Recipe:
    """Lesson 09: one strategy a config can name: its training function and its arguments.

    ``target`` is ``"module:function"``, the module's full path (imported lazily);
    ``args`` maps the function's keywords to config fields; ``spec``: the function takes one ``TrainSpec``
    (issue 36), whose sections are the config's, key for key; ``fixed`` are arguments a config
    run always passes (``record_grads_at=()``: nothing to record in a long run);
    ``stages_are_ranks`` names the axis (``parallel.pipeline`` or ``parallel.tensor``) that is
    one rank each, so a config may only set it to the world size; ``shares_batch``: whether
    the global batch is cut among the ranks or the workers (checked to divide).
    """

    name: str
    target: str
    lesson: str
    summary: str
    args: tuple[Arg, ...]
    fixed: dict = field(default_factory=dict)
    stages_are_ranks: str = ""          # "pipeline" or "tensor": that axis is one rank each
    shares_batch: str = "rank"          # the global batch is cut among the "rank"s, the "worker"s, or "" not
    spec: bool = False                  # the function takes one TrainSpec (its checks divide the batch)

    @property
    def fn(self):
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)

    @property
    def supports(self) -> frozenset | None:
        """What the function declares it can do (contract: ``fn.supports``); None if it says nothing."""
        return getattr(self.fn, "supports", None)

    @property
    def fields(self) -> frozenset[str]:
        """The config fields this strategy reads; any other set away from its default is refused."""
        axis = {f"parallel.{self.stages_are_ranks}"} if self.stages_are_ranks else set()
        return frozenset(ALWAYS) | {a.field for a in self.args} | axis

    def kwargs(self, config) -> dict:
        """Lesson 09: the function's keyword arguments for ``config`` (``RunConfig.call``).  A spec strategy's
        are one ``TrainSpec``, the config's four sections key for key."""
        if self.spec:
            return {"spec": TrainSpec.of(**{a.key: a.value(config, 0) for a in self.args})}
        world = config.launch.world_size
        out = {a.key: a.value(config, world) for a in self.args}
        if self.name == "3d":           # the data axis is what the other two leave of the ranks
            out["data"] = world // (config.parallel.pipeline * config.parallel.tensor)
        return {**out, **self.fixed}


def _spec_args(skip=()) -> tuple[Arg, ...]:
    """Issue 36: a spec strategy reads every config key that names a ``TrainSpec`` field, but those in ``skip``
    (its spec keeps their defaults, and a config that sets them is refused: ``unused_fields``)."""
    return tuple(Arg(flat, f"{section}.{name}") for flat, (section, name) in flat_names().items() if flat not in skip)


# what the five-axis trainer leaves alone: the MLP's data sets, number types and levers
NOT_THE_TRANSFORMERS = ("dataset", "samples", "data_root", "dtype", "zero_stage", "chunks", "local_steps", "average")


def _common(*more: Arg, batch: str = "") -> tuple[Arg, ...]:
    """The arguments every strategy takes; ``batch``: it takes its share of the global batch (``Arg.per``)."""
    base = (Arg("width", "model.width"), Arg("steps", "training.steps"), Arg("lr", "training.lr"),
            Arg("seed", "data.seed"))
    if batch:
        size = Arg("batch_size", "training.global_batch_size", per=batch)
    else:
        size = Arg("global_batch_size", "training.global_batch_size")
    return (*base, size, *more)


MODEL = (Arg("model", "model.kind"), Arg("depth", "model.depth"))
DTYPE = Arg("dtype", "training.dtype")
OPTIMIZER = Arg("optimizer", "training.optimizer")
PRECISION = Arg("precision", "training.precision")
PIPELINE = (Arg("micro_batches", "parallel.micro_batches"), Arg("schedule", "parallel.schedule"))

STRATEGIES: dict[str, Recipe] = {s.name: s for s in (
    Recipe("data", "distlab.data_parallel.data_parallel:train", "01",
             "data parallelism: every rank a full copy, gradients averaged",
             _common(*MODEL, DTYPE, OPTIMIZER, PRECISION, Arg("method", "parallel.method"),
                     Arg("bucket_mb", "parallel.bucket_mb"),
                     Arg("dataset", "data.dataset"), Arg("samples", "data.samples"), Arg("data_root", "data.root")),
             fixed={"record_grads_at": ()}),
    Recipe("local_sgd", "distlab.data_parallel.local_sgd:train", "04",
             "talk every k steps: local SGD or gradient accumulation",
             _common(*MODEL[:1], DTYPE, Arg("k", "parallel.local_steps"), Arg("average", "parallel.average"),
                     batch="rank")),
    Recipe("async_sgd", "distlab.data_parallel.async_sgd:train", "04",
             "asynchronous SGD: rank 0 serves the parameters",
             _common(*MODEL[:1], DTYPE, batch="worker"), shares_batch="worker"),
    Recipe("pipeline", "distlab.pipeline.pipeline:train", "06",
             "the model cut into stages, one a rank (every schedule)",
             _common(*MODEL, DTYPE, *PIPELINE, Arg("chunks", "parallel.chunks")), stages_are_ranks="pipeline",
             shares_batch=""),
    Recipe("torch_pipeline", "distlab.pipeline.torch_pipeline:train", "06",
             "the same pipeline through torch.distributed."
             "pipelining", _common(*MODEL, DTYPE, *PIPELINE), stages_are_ranks="pipeline", shares_batch=""),
    Recipe("tensor", "distlab.tensor.tensor_parallel:train", "07",
             "tensor parallelism: the depth-3 MLP's block split",
             _common(DTYPE), stages_are_ranks="tensor", shares_batch=""),
    Recipe("3d", "distlab.parallelize.mesh_3d:train", "07", "a data x pipeline x tensor grid of ranks",
             _common(Arg("depth", "model.depth"), Arg("pipeline", "parallel.pipeline"),
                     Arg("tensor", "parallel.tensor"), *PIPELINE), shares_batch=""),
    Recipe("zero", "distlab.zero.zero:train", "08", "ZeRO stages 0-2 written by hand",
             _common(*MODEL, DTYPE, OPTIMIZER, PRECISION, Arg("stage", "parallel.zero_stage"))),
    Recipe("fsdp", "distlab.zero.fsdp:train", "08",
             "ZeRO stage 3 with PyTorch's FSDP2", _common(*MODEL, DTYPE, OPTIMIZER, PRECISION)),
    Recipe("deepspeed", "distlab.zero.deepspeed_zero:train", "08", "DeepSpeed's ZeRO, stages 0-3",
             _common(*MODEL, DTYPE, OPTIMIZER, Arg("stage", "parallel.zero_stage"))),
    Recipe("transformer", "distlab.parallelize.trainer:train", "12-13",
             "the one trainer: the line transformer (experts too) on any data x pipeline x expert x context x "
             "tensor mesh, the MLP on data x pipeline x tensor", _spec_args(skip=NOT_THE_TRANSFORMERS),
             shares_batch="", spec=True),
)}


def get(name: str) -> Recipe:
    """Lesson 09: the strategy called ``name``, or an error listing the names there are."""
    if name not in STRATEGIES:
        raise ValueError(f"no strategy {name!r}: choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def of_function(fn) -> Recipe | None:
    """Lesson 09: the strategy whose training function is ``fn`` (``config.from_launch``)."""
    target = f"{getattr(fn, '__module__', '')}:{getattr(fn, '__name__', '')}"
    return next((s for s in STRATEGIES.values() if s.target == target and s.fn is fn), None)


def unused_fields(name: str, config) -> list[str]:
    """Lesson 09: the fields ``config`` sets (away from their defaults) that strategy ``name`` never reads.

    A setting the strategy ignores is a setting the user believes in and does not get
    (``parallel.method: fused`` with the pipeline), so the config refuses it; the message
    names the strategies that do use it.
    """
    used, out = get(name).fields, []
    for section in ("model", "data", "training", "parallel"):
        part = getattr(config, section)
        for key, info in type(part).model_fields.items():
            where = f"{section}.{key}"
            if where == "parallel.strategy" or where in used or getattr(part, key) == info.get_default(
                    call_default_factory=True):
                continue
            users = [s.name for s in STRATEGIES.values() if where in s.fields]
            out.append(f"{where} = {getattr(part, key)!r}: strategy {name} does not use it "
                       f"(it is for {', '.join(users) or 'no strategy'})")
    return out


def check_supports(strategy: Recipe, backend: str, device: str, *, checkpoint: bool, fault: bool) -> None:
    """Issue 27 (lessons 09-10): a config's backend, device, checkpoint and fault against ``fn.supports``.

    The same check ``launch`` makes (``processes.arguments.check_capabilities``), with the config's
    key in front of the message, so that ``distlab check`` names the line to change.
    """
    from ..processes.arguments import check_capabilities

    try:
        check_capabilities(strategy.fn, backend, device if device != "auto" else None,
                           {"checkpoint": {} if checkpoint else None, "fault": {} if fault else None},
                           who_can=who_can)
    except ValueError as err:
        text = str(err)
        key = ("checkpoint.every" if "checkpoint" in text.split(":")[0] else "fault.kind" if "fault" in
               text.split(":")[0] else "launch.backend" if "backend=" in text else "launch.device")
        raise ValueError(f"{key}: strategy {strategy.name}: {text}") from None


def who_can(capability: str) -> list[str]:
    """Lesson 10: the strategies whose function declares ``capability`` (e.g. "checkpoint", "horovod")."""
    return [s.name for s in STRATEGIES.values() if capability in (s.supports or ())]


def describe() -> str:
    """Lesson 09: one line per strategy, for the command line's help."""
    return "\n".join(f"  {s.name:<15} {s.summary} (lesson {s.lesson})" for s in STRATEGIES.values())
