"""Lesson 09: the run config (distlab/cluster/config.py): read, checked, saved, and turned into a training call."""
import pytest

from distlab.cluster import config as cfg
from distlab.cluster.config import ConfigError, RunConfig
from distlab.data_parallel import data_parallel
from distlab.zero import fsdp, zero
from distlab.parallelize import mesh_3d as mesh
from distlab.pipeline import pipeline

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_yaml_config_is_read_and_becomes_a_launch_call(tmp_path):
    path = write(tmp_path, """
model: {kind: mlp, width: 32}
training: {steps: 7, global_batch_size: 48, lr: 0.05}
parallel: {strategy: data, method: by_hand}
launch: {processes_per_node: 3}
""")
    c = cfg.load(path)
    assert c.launch.world_size == 3 and c.model.depth == 2          # unset keys take their defaults
    fn, kwargs = c.call()
    assert fn is data_parallel.train
    assert kwargs["width"] == 32 and kwargs["method"] == "by_hand" and kwargs["global_batch_size"] == 48


def test_toml_and_yaml_round_trip(tmp_path):
    c = RunConfig.parse({"parallel": {"strategy": "3d", "pipeline": 2}, "launch": {"nodes": 2}})
    for name in ("a.yaml", "a.toml"):
        again = cfg.load(c.save(str(tmp_path / name)))
        assert again == c


@pytest.mark.parametrize("overrides,message", [
    (["training.lr=-1"], "training.lr = -1: Input should be greater than 0"),
    (["training.optimizer=lamb"], "training.optimizer = 'lamb': Input should be 'sgd', 'momentum' or 'adam'"),
    (["training.learning_rate=0.1"], "training.learning_rate: unknown key (allowed here: steps, global_batch_size, "
                                     "lr, optimizer, dtype, recompute, precision)"),
    (["optimiser.lr=0.1"], "optimiser: unknown key (allowed here: model, data, training, parallel, launch, "
                           "checkpoint, logging, fault)"),
    (["training.global_batch_size=50", "launch.processes_per_node=4"],
     "training.global_batch_size 50 does not divide into 4 ranks"),
    (["launch.nodes=2", "launch.hosts=[a]"], "launch.hosts lists 1 hosts but launch.nodes is 2"),
    (["launch.backend=horovod", "parallel.strategy=pipeline"],
     "launch.backend: strategy pipeline: pipeline.train cannot run with backend='horovod': it runs on "
     "backend='torchrun' only"),
    (["parallel.strategy=zero", "parallel.zero_stage=3"], "stage 3 is strategy fsdp"),
    (["launch.port=80"], "launch.port = 80: Input should be greater than or equal to 1024"),
    (["model.width=wide"], "model.width = 'wide': Input should be a valid integer"),
    (["data.dataset=imagenet"], "data.dataset = 'imagenet': Input should be 'digits', 'distorted_digits', 'mnist', "
                                   "'mnist_5k' or 'distorted_mnist_5k'"),
    (["data.samples=5000"], "dataset digits has 1438 training samples, not 5000: use dataset distorted_digits"),
    (["data.dataset=distorted_digits", "parallel.strategy=pipeline"],
     "data.dataset = 'distorted_digits': strategy pipeline does not use it (it is for data)"),
    (["data.samples=500", "parallel.strategy=zero"],
     "data.samples = 500: strategy zero does not use it (it is for data)"),
    (["data.root=/data"], "data root '/data' is for dataset mnist"),
])
def test_every_bad_value_is_named_with_what_is_allowed(overrides, message):
    with pytest.raises(ConfigError) as err:
        RunConfig.parse({}, overrides)
    assert message in str(err.value)


def test_malformed_files_get_one_clear_message(tmp_path):
    with pytest.raises(ConfigError, match="is not valid YAML"):
        cfg.load(write(tmp_path, "model: {kind: mlp\n"))
    with pytest.raises(ConfigError, match="is not valid TOML"):
        cfg.load(write(tmp_path, "[model\n", "bad.toml"))
    with pytest.raises(ConfigError, match="a mapping of sections"):
        cfg.load(write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match="no run config at"):
        cfg.load(str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="write it as section.key=value"):
        RunConfig.parse({}, ["training.lr"])


def test_a_yaml_file_cannot_run_code(tmp_path):
    with pytest.raises(ConfigError, match="is not valid YAML"):
        cfg.load(write(tmp_path, "model: !!python/object/apply:os.system ['echo hi']\n"))


@pytest.mark.parametrize("fn,kwargs,strategy", [
    (data_parallel.train, dict(method="ddp", steps=5, global_batch_size=64, lr=0.1), "data"),
    (data_parallel.train, dict(dataset="distorted_digits", samples=20_000, steps=5), "data"),
    (zero.train, dict(stage=2, optimizer="adam", width=256, steps=3), "zero"),
    (fsdp.train, dict(optimizer="adam", steps=3), "fsdp"),
    (pipeline.train, dict(micro_batches=4, schedule="1f1b", depth=3), "pipeline"),
    (mesh.train, dict(data=1, pipeline=2, tensor=1, depth=3), "3d"),
])
def test_a_notebook_launch_is_saved_as_a_config_that_gives_the_same_call(tmp_path, fn, kwargs, strategy):
    c = cfg.from_launch(fn, 2, **kwargs)
    assert c.parallel.strategy == strategy
    again = cfg.load(c.save(str(tmp_path / "run.yaml")))
    fn2, kwargs2 = again.call()
    assert fn2 is fn
    for key, value in kwargs.items():
        if key not in ("data",):
            assert kwargs2[{"stage": "stage"}.get(key, key)] == value, key


def test_a_launch_a_config_cannot_describe_is_refused():
    with pytest.raises(ConfigError, match="has no run config"):
        cfg.from_launch(data_parallel.train_both_methods, 2, steps=4)
    with pytest.raises(ConfigError, match="straggler=.* has no place in a run config"):
        cfg.from_launch(data_parallel.train, 2, straggler=(1, 0.1))


def test_the_notebook_launcher_takes_a_config(tmp_path):
    import distlab

    c = RunConfig.parse({"model": {"width": 16}, "training": {"steps": 3, "global_batch_size": 32},
                         "parallel": {"method": "by_hand"}, "launch": {"processes_per_node": 2}})
    path = c.save(str(tmp_path / "run.yaml"))
    fn, kwargs = c.call()
    direct = distlab.launch(fn, 2, progress="none", **kwargs)
    for via in (path, c):
        records = distlab.launch(via, progress="none")
        assert [r.losses for r in records] == [r.losses for r in direct]
    assert distlab.launch(c, progress="none", steps=2)[0].config["steps"] == 2     # keywords override
    with pytest.raises(ValueError, match="the config says 2 ranks"):
        distlab.launch(c, 4)
    with pytest.raises(ValueError, match="start `distlab run CONFIG --node-rank N` on each node"):
        distlab.launch(RunConfig.parse({"launch": {"nodes": 2}, "training": {"global_batch_size": 64}}))


def test_a_config_trains_on_distorted_digits_made_on_the_ranks():
    """Lesson 05: data.dataset and data.samples reach every rank; 2 ranks take one process's steps."""
    import distlab
    from distlab.records import max_param_difference

    c = RunConfig.parse({"data": {"dataset": "distorted_digits", "samples": 50_000, "seed": 2},
                         "training": {"steps": 4, "global_batch_size": 32}, "launch": {"processes_per_node": 2}})
    fn, kwargs = c.call()
    assert (kwargs["dataset"], kwargs["samples"]) == ("distorted_digits", 50_000)
    records = distlab.launch(c, progress="none", evaluate_every=2)
    assert records[0].config["dataset"] == "distorted_digits" and records[0].config["samples"] == 50_000
    assert [e[0] for e in records[0].evaluations] == [2, 4]
    alone = data_parallel.train_single(world_size=2, global_batch_size=32, steps=4, seed=2, record_grads_at=(),
                                       dataset="distorted_digits", samples=50_000)
    assert max_param_difference(alone.params, records[0].params) < 1e-6
    other = data_parallel.train_single(world_size=2, global_batch_size=32, steps=4, seed=2, record_grads_at=())
    assert max_param_difference(other.params, records[0].params) > 1e-3    # not the real digits


def test_a_config_trains_on_mnist_files_in_a_folder(tmp_path):
    """Lesson 05: dataset mnist reads data.root's IDX files; without them, a clear error before any process."""
    import distlab
    from test_data import write_mnist

    write_mnist(tmp_path, n_train=64, n_test=16)
    c = RunConfig.parse({"data": {"dataset": "mnist", "root": str(tmp_path)},
                         "training": {"steps": 2, "global_batch_size": 16}, "launch": {"processes_per_node": 2}})
    records = distlab.launch(c, progress="none")
    assert records[0].params["fc1.weight"].shape[1] == 28 * 28 and records[0].config["dataset"] == "mnist"
    missing = c.model_copy(update={"data": c.data.model_copy(update={"root": str(tmp_path / "none")})})
    with pytest.raises(FileNotFoundError, match="MNIST is not complete in .*none"):
        distlab.launch(missing, progress="none")


# ---- issue 27: the registry is where the config's strategies come from ------------------------
def test_every_strategy_of_the_registry_is_a_config_choice_and_declares_what_it_supports():
    from distlab.parallelize import registry
    from distlab.pipeline import schedules

    assert set(RunConfig.model_fields["parallel"].annotation.model_fields["strategy"].annotation.__args__) \
        == set(registry.STRATEGIES)
    assert set(RunConfig.model_fields["parallel"].annotation.model_fields["schedule"].annotation.__args__) \
        == set(schedules.SCHEDULES)
    for name, strategy in registry.STRATEGIES.items():
        fn, kwargs = RunConfig.parse({"parallel": {"strategy": name}}).call()
        assert fn is strategy.fn and strategy.supports is not None, name
        assert set(kwargs) <= set(__import__("inspect").signature(fn).parameters), name


@pytest.mark.parametrize("fn_name,kwargs,strategy", [
    ("distlab.data_parallel.local_sgd:train", dict(k=2, average="gradients", batch_size=16, steps=4), "local_sgd"),
    ("distlab.data_parallel.async_sgd:train", dict(batch_size=16, steps=3), "async_sgd"),
    ("distlab.pipeline.torch_pipeline:train", dict(micro_batches=2, schedule="1f1b"), "torch_pipeline"),
    ("distlab.pipeline.pipeline:train", dict(schedule="interleaved", chunks=2, micro_batches=4, depth=3), "pipeline"),
    ("distlab.tensor.tensor_parallel:train", dict(width=32, steps=3), "tensor"),
])
def test_the_strategies_the_config_lagged_behind_round_trip(tmp_path, fn_name, kwargs, strategy):
    import importlib

    module, name = fn_name.split(":")
    fn = getattr(importlib.import_module(module), name)
    c = cfg.from_launch(fn, 2, **kwargs)
    assert c.parallel.strategy == strategy
    fn2, kwargs2 = cfg.load(c.save(str(tmp_path / "run.yaml"))).call()
    assert fn2 is fn and all(kwargs2[k] == v for k, v in kwargs.items())


@pytest.mark.parametrize("overrides,message", [
    (["parallel.strategy=pipeline", "parallel.pipeline=3"],
     "parallel.pipeline 3 contradicts the ranks: strategy pipeline puts one pipeline part on each of its 2 ranks"),
    (["parallel.strategy=tensor", "parallel.tensor=4"], "parallel.tensor 4 contradicts the ranks"),
    (["parallel.tensor=2"], "parallel.tensor = 2: strategy data does not use it (it is for tensor, 3d, transformer)"),
    (["parallel.strategy=pipeline", "parallel.method=fused"],
     "parallel.method = 'fused': strategy pipeline does not use it (it is for data, transformer)"),
    (["parallel.micro_batches=4"], "parallel.micro_batches = 4: strategy data does not use it"),
    (["parallel.strategy=pipeline", "training.optimizer=adam"], "training.optimizer = 'adam': strategy pipeline"),
    (["parallel.local_steps=8"], "parallel.local_steps = 8: strategy data does not use it (it is for local_sgd)"),
    (["parallel.strategy=async_sgd", "training.global_batch_size=64", "launch.processes_per_node=4"],
     "training.global_batch_size 64 does not divide into 3 workers"),
    (["parallel.strategy=async_sgd", "launch.processes_per_node=1"], "needs at least 2 ranks"),
    (["parallel.strategy=zero", "launch.backend=horovod"], "zero.train cannot run with backend='horovod'"),
])
def test_a_setting_that_does_not_fit_the_strategy_is_refused(overrides, message):
    with pytest.raises(ConfigError) as err:
        RunConfig.parse({}, overrides)
    assert message in str(err.value)


@pytest.mark.parametrize("setting,capability", [("checkpoint.every=5", "checkpoint"), ("fault.kind=kill", "fault")])
def test_checkpoints_and_faults_are_refused_where_the_function_would_ignore_them(setting, capability):
    """Whatever each function's ``supports`` says wins: today deepspeed and async_sgd take no checkpoints."""
    from distlab.parallelize import registry

    for name, strategy in registry.STRATEGIES.items():
        overrides = [f"parallel.strategy={name}", setting]
        if capability in strategy.supports:
            RunConfig.parse({}, overrides)
        else:
            with pytest.raises(ConfigError, match=f"{setting.split('=')[0]}: strategy {name}: .* (takes no "
                                                  f"checkpoints|does not obey a fault).*strategies that can: data"):
                RunConfig.parse({}, overrides)


def test_one_parser_reads_key_value_in_a_config_override_and_in_a_terminal_job():
    """Issue 27: one key=value parser.  Python literals first (YAML reads 1e-3 as text, and a job's
    record_grads_at=() is a tuple), then YAML (true, null), then the bare word."""
    from distlab.processes.arguments import parse_kwargs, parse_value

    assert [parse_value(t) for t in ("1e-3", "()", "None", "true", "null", "[1, 2]", "ddp")] == \
        [0.001, (), None, True, None, [1, 2], "ddp"]
    assert parse_kwargs(["steps=50", "method=ddp", "record_grads_at=()"]) == \
        {"steps": 50, "method": "ddp", "record_grads_at": ()}
    with pytest.raises(ValueError, match="no sections"):
        parse_kwargs(["training.lr=0.1"])
    with pytest.raises(ValueError, match="key=value"):
        parse_kwargs(["steps"])
    assert RunConfig.parse({}, overrides=["training.lr=1e-3"]).training.lr == 0.001
