"""A run config: one file that says what a training run is, for a notebook, a terminal or a cluster.

Introduced in lesson 09 (from laptop to cluster).  Why a file: in a notebook a run is a call,
``distlab.launch(data_parallel.train, world_size=2, steps=100, ...)``, and its settings live in a
cell.  A cluster job is started by programs that never see that cell (torchrun on each node, a
SLURM batch script, Azure ML, a Kubernetes operator), so the run must be written down: what model
on what data, how many nodes and processes, which backend, which parallelism, batch and learning
rate, where checkpoints and logs go.  One file, kept with the code, read the same way everywhere;
``distlab run`` trains from it and ``distlab job`` turns it into each scheduler's job file.

The schema is pydantic's: each section a model whose fields say their type, range and choices,
with unknown keys refused, so that a mistake names the key, the value and what is allowed
before any process starts.  YAML (safe-loaded) or TOML.
"""
from __future__ import annotations

import json
import os
import re
import tomllib
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from .config_sections import Data, Model, Parallel, Section, Training
from .config_text import ConfigError, apply_override, dump_toml, explain
from ..parallelize import registry

# REGISTRY/PATH:TAG or REGISTRY/PATH@sha256:DIGEST (lesson 09: what a cluster can pull)
IMAGE = re.compile(r"^[a-z0-9][a-z0-9.:-]*/[a-z0-9._/-]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$")


class Launch(Section):
    backend: Literal["torchrun", "horovod"] = "torchrun"
    nodes: int = Field(1, ge=1, le=4096)
    processes_per_node: int = Field(2, ge=1, le=1024, description="ranks on each node (one per GPU)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    hosts: list[str] = Field(default_factory=list, description="one address per node, the first hosts the rendezvous")
    port: int = Field(29500, ge=1024, le=65535, description="the rendezvous port on the first node")
    timeout: float = Field(120, gt=0, le=86400, description="seconds any collective may wait")
    ssh_port: int = Field(22, ge=1, le=65535, description="horovodrun reaches the other nodes over ssh on this port")
    ssh_identity_file: str | None = Field(None, description="the ssh key horovodrun uses (none: ssh's default)")
    max_restarts: int = Field(0, ge=0, le=100, description="torchrun restarts every rank this many times at most "
                                                          "when one fails (lesson 10: they resume from a checkpoint)")
    image: str | None = Field(None, description="the container image cloud jobs run (distlab job azureml, k8s, "
                                                "vertex): REGISTRY/distlab:TAG, built from docker/Dockerfile and "
                                                "pushed where the cluster can pull it (lesson 09)")

    @field_validator("image")
    @classmethod
    def _pullable(cls, image):
        """Lesson 09: a cloud pulls an image by its full path: a registry (or a repository on one) and a tag."""
        if image is not None and not IMAGE.match(image):
            raise ValueError(f"launch.image {image!r} is no image a cloud can pull: give REGISTRY/REPOSITORY:TAG, e.g. "
                             "europe-west4-docker.pkg.dev/PROJECT/distlab/distlab:0.1 (build it from "
                             "docker/Dockerfile and push it there first)")
        return image

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node


class Checkpoint(Section):
    every: int = Field(0, ge=0, description="steps between checkpoints of every rank's state (0: none)")
    dir: str | None = Field(None, description="where checkpoints go (none: checkpoints/ in the run's folder); "
                                              "distlab run also saves rank 0's final parameters there")
    keep: int = Field(2, ge=1, description="how many complete checkpoints stay (older ones are deleted)")
    resume: bool = Field(True, description="start from the newest complete checkpoint, if there is one")


class Fault(Section):
    kind: Literal["none", "kill", "raise", "hang", "exit"] = Field(
        "none", description="a failure on purpose (lesson 10): rank `rank` fails this way in step `step`")
    rank: int = Field(0, ge=0)
    step: int = Field(0, ge=0)


class Logging(Section):
    dir: str = Field("runs", description="where each run writes its records and metrics")
    name: str = Field("run", pattern=r"^[A-Za-z0-9_.-]+$", description="the run's folder inside dir")
    tensorboard: bool = Field(True, description="also write TensorBoard files (tensorboard --logdir RUN_FOLDER)")
    horovod_timeline: bool = Field(False, description="Horovod's own timeline of every collective "
                                                      "(horovod_timeline.json in the run's folder)")


class RunConfig(Section):
    """Everything a run is; ``RunConfig.load(path)``, ``config.save(path)``, ``config.call()``."""
    model: Model = Field(default_factory=Model)
    data: Data = Field(default_factory=Data)
    training: Training = Field(default_factory=Training)
    parallel: Parallel = Field(default_factory=Parallel)
    launch: Launch = Field(default_factory=Launch)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    logging: Logging = Field(default_factory=Logging)
    fault: Fault = Field(default_factory=Fault)

    @model_validator(mode="after")
    def _fits_together(self):
        """What no single field can check: the sizes must fit the ranks."""
        world, p, launch = self.launch.world_size, self.parallel, self.launch
        if launch.hosts and len(launch.hosts) != launch.nodes:
            raise ValueError(f"launch.hosts lists {len(launch.hosts)} hosts but launch.nodes is {launch.nodes}: "
                             "give one host per node (or none, to choose them at submission)")
        strategy = registry.get(p.strategy)
        share = strategy.shares_batch          # the global batch is cut among the ranks (or the workers)
        if share == "worker" and world < 2:
            raise ValueError(f"strategy {p.strategy} needs at least 2 ranks: rank 0 serves, the others train")
        parts = world - 1 if share == "worker" else world
        if share and self.training.global_batch_size % parts:
            raise ValueError(f"training.global_batch_size {self.training.global_batch_size} does not divide "
                             f"into {parts} {'workers' if share == 'worker' else 'ranks'} "
                             "(launch.nodes x launch.processes_per_node" + (" - 1)" if share == "worker" else ")"))
        if p.strategy == "zero" and p.zero_stage > 2:
            raise ValueError("parallel.zero_stage: strategy zero is stages 0-2 written by hand; "
                             "stage 3 is strategy fsdp (or deepspeed)")
        if p.strategy == "3d" and world % (p.pipeline * p.tensor):
            raise ValueError(f"parallel.pipeline x parallel.tensor = {p.pipeline * p.tensor} does not divide "
                             f"the {world} ranks")
        axis = strategy.stages_are_ranks
        if axis and getattr(p, axis) not in (1, world):
            raise ValueError(f"parallel.{axis} {getattr(p, axis)} contradicts the ranks: strategy {p.strategy} "
                             f"puts one {axis} part on each of its {world} ranks (set parallel.{axis}: {world}, "
                             "or leave it out)")
        unused = registry.unused_fields(p.strategy, self)
        if unused:
            raise ValueError("settings the strategy would silently ignore:\n  " + "\n  ".join(unused))
        registry.check_supports(strategy, self.launch.backend, self.launch.device,
                                checkpoint=bool(self.checkpoint.every), fault=self.fault.kind != "none")
        if self.fault.kind != "none" and self.fault.rank >= world:
            raise ValueError(f"fault.rank {self.fault.rank} is not a rank of this run (0 to {world - 1})")
        if self.logging.horovod_timeline and launch.backend != "horovod":
            raise ValueError("logging.horovod_timeline is Horovod's own timeline: it needs launch.backend horovod")
        if launch.max_restarts and launch.backend != "torchrun":
            raise ValueError("launch.max_restarts: restarts are torchrun's (horovodrun has its own elastic mode)")
        return self

    def check_call(self) -> None:
        """Lesson 09: every check ``distlab.launch`` makes before starting a rank (``distlab check``, ``run``)."""
        from ..processes.arguments import bind_arguments
        from ..processes.devices import choose_device

        fn, kwargs = self.call()
        try:
            device = choose_device(self.launch.device, self.launch.processes_per_node)
            bind_arguments(fn, self.launch.world_size, kwargs, backend=self.launch.backend, device=device)
        except (ValueError, TypeError, RuntimeError) as err:
            raise ConfigError(f"this run cannot start: {err}") from None

    # -- reading and writing
    @classmethod
    def load(cls, path: str, overrides: list[str] | None = None) -> "RunConfig":
        """Read YAML (safe) or TOML, apply ``key=value`` overrides, validate."""
        with open(path, "rb") as f:
            raw = f.read()
        try:
            data = tomllib.loads(raw.decode()) if path.endswith(".toml") else yaml.safe_load(raw)
        except (yaml.YAMLError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"{path} is not valid {'TOML' if path.endswith('.toml') else 'YAML'}: {err}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a run config is a mapping of sections (model, training, ...), "
                              f"not a {type(data).__name__}")
        return cls.parse(data, overrides, source=path)

    @classmethod
    def parse(cls, data: dict, overrides: list[str] | None = None, source: str = "config") -> "RunConfig":
        data = json.loads(json.dumps(data))                         # a deep copy
        for item in overrides or []:
            apply_override(data, item)
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise ConfigError(explain(err, source, cls)) from None

    def save(self, path: str) -> str:
        text = (dump_toml(self.model_dump()) if path.endswith(".toml")
                else yaml.safe_dump(self.model_dump(), sort_keys=False))
        with open(path, "w") as f:
            f.write(text)
        return path

    # -- what it runs
    def checkpoint_dir(self) -> str:
        """Where this run's checkpoints go: ``checkpoint.dir``, or ``checkpoints`` in the run's folder."""
        folder = os.path.join(self.logging.dir, self.logging.name)
        return os.path.abspath(self.checkpoint.dir or os.path.join(folder, "checkpoints"))

    def options(self) -> dict:
        """Lesson 10: what every rank sets on its ``Worker`` besides the training's arguments."""
        options = {"tensorboard": self.logging.tensorboard}
        c = self.checkpoint
        if c.every:
            options["checkpoint"] = {"dir": self.checkpoint_dir(), "every": c.every, "keep": c.keep,
                                     "resume": c.resume}
        if self.fault.kind != "none":
            options["fault"] = {"kind": self.fault.kind, "rank": self.fault.rank, "step": self.fault.step}
        return options

    def call(self):
        """The training function and its keyword arguments, as ``distlab.launch`` takes them (``registry``)."""
        strategy = registry.get(self.parallel.strategy)
        return strategy.fn, strategy.kwargs(self)



def from_launch(fn, world_size: int, **kwargs) -> RunConfig:
    """Lesson 09: the config of a notebook's ``distlab.launch(fn, world_size, **kwargs)`` call.

    Only runs a config can describe: the strategies of ``parallelize.registry``, read backwards.
    Lets every lesson's run be saved as a file (``from_launch(...).save("run.yaml")``) and
    started again from a terminal.
    """
    strategy = registry.of_function(fn)
    if strategy is None:
        raise ConfigError(f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', fn)} has no run config: "
                          f"configs describe {', '.join(s.target for s in registry.STRATEGIES.values())}")
    kw = dict(kwargs)
    launch = {k: kw.pop(k) for k in ("backend", "device", "timeout") if k in kw}
    section = {"model": {}, "data": {}, "training": {}, "parallel": {"strategy": strategy.name}}
    where = {a.key: a for a in strategy.args}
    for key, val in kw.items():
        if key in ("progress", "warm") or key in strategy.fixed or (strategy.name == "3d" and key == "data"):
            continue
        if key not in where:
            raise ConfigError(f"{key}={val!r} has no place in a run config of strategy {strategy.name} "
                              f"(its keys: {', '.join(where)})")
        sec, name = where[key].field.split(".")
        section[sec][name] = val * where[key].divisor(world_size) if where[key].per else val
    section["launch"] = dict(launch, processes_per_node=world_size)
    return RunConfig.parse(section, source=f"launch({fn.__name__})")


def is_run_config(fn) -> bool:
    """Lesson 09: ``launch``'s first argument is a run config (or its file), not a function."""
    return isinstance(fn, RunConfig) or (isinstance(fn, (str, os.PathLike))
                                         and str(fn).endswith((".yaml", ".yml", ".toml")))


# what distlab.launch takes for itself rather than for the training function
LAUNCH_KEYS = ("port", "threads", "progress", "title", "bind_cores", "warm", "checkpoint", "fault", "tensorboard")


def launch_arguments(config, world_size, kwargs: dict) -> tuple:
    """Lesson 09: what ``distlab.launch(config, **kwargs)`` runs: the config's training call on its ranks, as
    ``processes.launcher.launch``'s ``(fn, world_size, keyword arguments)``.  Keyword arguments other than
    the launcher's own override the config's training settings (a spec strategy's, key for key)."""
    if not isinstance(config, RunConfig):
        config = load(os.fspath(config))
    if config.launch.nodes != 1:
        raise ValueError(f"this config runs on {config.launch.nodes} nodes; a notebook launches on one: "
                         "start `distlab run CONFIG --node-rank N` on each node instead")
    if world_size is not None and world_size != config.launch.world_size:
        raise ValueError(f"world_size={world_size}, but the config says {config.launch.world_size} ranks: "
                         "change launch.processes_per_node in the config instead")
    fn, settings = config.call()
    launcher = {k: v for k, v in kwargs.items() if k in LAUNCH_KEYS}
    training = {k: v for k, v in kwargs.items() if k not in LAUNCH_KEYS}
    if "spec" in settings and training:
        settings, training = {"spec": settings["spec"].replace(**training)}, {}
    return fn, config.launch.world_size, dict(backend=config.launch.backend, device=config.launch.device,
                                              timeout=config.launch.timeout, run_options=config.options(),
                                              **launcher, **{**settings, **training})


def load(path: str, overrides: list[str] | None = None) -> RunConfig:
    """Lesson 09: read and check a run config (``distlab run CONFIG`` and ``distlab.launch(path)``)."""
    if not os.path.exists(path):
        raise ConfigError(f"no run config at {path}")
    return RunConfig.load(path, overrides)
