"""Issue 36: one settings object.  A run config's four sections and a ``TrainSpec`` are the same keys with
the same defaults (so the config maps onto the spec one to one), flat keywords find their place, and a
keyword that is no setting is refused by name before any process starts."""
import dataclasses

import pytest

import distlab
from distlab.cluster import config as cfg
from distlab.parallelize import registry
from distlab.parallelize import trainer
from distlab.train.spec import SECTIONS, TrainSpec, flat_names


def test_the_config_and_the_spec_have_the_same_keys_and_defaults():
    config = cfg.RunConfig()
    for section, cls in SECTIONS.items():
        part = getattr(config, section)
        keys = set(type(part).model_fields) - {"strategy"}          # (the strategy picks the function)
        assert keys == {f.name for f in dataclasses.fields(cls)}, section
        spec_part = cls()
        for key in keys:
            assert getattr(part, key) == getattr(spec_part, key), f"{section}.{key}"


def test_flat_keywords_find_their_section_and_come_back():
    spec = TrainSpec.of(model="transformer", width=48, context=2, data_root="/tmp/mnist", steps=7)
    assert (spec.model.kind, spec.model.width, spec.parallel.context, spec.data.root, spec.training.steps) == (
        "transformer", 48, 2, "/tmp/mnist", 7)
    assert TrainSpec.of(**spec.flat()) == spec
    assert spec.replace(context=1).parallel.context == 1 and spec.parallel.context == 2
    assert len(flat_names()) == sum(len(dataclasses.fields(c)) for c in SECTIONS.values())   # no name twice
    with pytest.raises(TypeError, match="d_model=32 is no setting of a run"):
        TrainSpec.of(d_model=32)


def test_a_transformer_config_is_its_spec_key_for_key():
    config = cfg.load("configs/five_axes.yaml")
    fn, kwargs = config.call()
    assert fn is trainer.train and set(kwargs) == {"spec"}
    spec = kwargs["spec"]
    for flat, (section, name) in flat_names().items():
        assert getattr(getattr(spec, section), name) == getattr(getattr(config, section), name), flat
    assert registry.of_function(trainer.train).name == "transformer"


@pytest.mark.parametrize("settings,message", [
    (dict(d_model=32), r"train\(\): d_model=32 is no setting of a run"),
    (dict(width="32"), "width='32': train\\(\\) expects an int"),
    (dict(tensor=3), "does not divide the world size 4"),
    (dict(heads=2, tensor=4, data=1), "2 attention heads do not share out among 4 tensor-parallel ranks"),
    (dict(heads=3), "d_model 32 does not divide into 3 heads"),
    (dict(context=2, data=2, split="diagonal"), "unknown split 'diagonal'"),
    (dict(expert=2, data=2), "spreads experts over ranks, but the model has none"),
    (dict(experts=3, expert=2, data=2), "3 experts do not spread evenly over 2 expert-parallel ranks"),
    (dict(pipeline=2, data=2, micro_batches=3), "micro-batches"),
    (dict(pipeline=4, depth=1), "4 pipeline stages but the model has 3 pieces"),
    (dict(sequence_parallel=True, context=2, tensor=2), "sequence parallelism with context parallelism"),
    (dict(method="ddp"), "this trainer's gradients go through the one gradient reducer"),
    (dict(zero_stage=2), "zero_stage=2 is a setting of the MLP's strategies"),
    (dict(model="mlp", context=2, data=2), "model kind 'mlp' reads one digit, with no line to cut"),
    (dict(model="mlp", heads=2), "heads=2 is the transformer's; model kind 'mlp' has none"),
    (dict(model="cnn", tensor=2, data=2), "splits the depth-3 MLP's block"),
    (dict(model="mlp", depth=1, pipeline=4, data=1, micro_batches=4), "4 stages but the model has only 2 layers"),
    (dict(global_batch_size=10), "does not divide into 4 shares"),
])
def test_a_layout_that_cannot_run_is_refused_before_anything_starts(settings, message):
    with pytest.raises(ValueError, match=message):
        distlab.launch(trainer.train, world_size=4, progress="none", **settings)


@pytest.mark.parametrize("settings,message", [
    (dict(pipeline=2, data=2, micro_batches=2), "a pipeline passes activations point to point"),
    (dict(context=2, data=2), "ring attention passes K and V to the next rank point to point"),
    (dict(experts=4, expert=2, data=2, all_to_all="by_hand"), "the all-to-all by hand is made of send/recv"),
])
def test_what_horovod_cannot_do_is_refused_on_horovod(settings, message):
    with pytest.raises(ValueError, match=message):
        distlab.launch(trainer.train, world_size=4, backend="horovod", progress="none", **settings)
