"""Issue 36: one transformer on all five axes.  The line reader (lesson 12) with experts in every block
(lesson 13) trains on every pair of the axes data, pipeline, expert, context and tensor at size 2 (4 ranks),
on two triples (8 ranks), and on the pairs Horovod can run, and each layout equals one process (routing
its tokens in the groups the ranks route them in) within 1e-5 after 12 SGD steps.  Lesson 01's MLP goes
through the same trainer on its three axes (data, pipeline, tensor: every pair, and all three).  SGD, because Adam's
update barely notices a gradient scaled by a constant: a sum where an average is due would pass with it.
Each launch runs all its layouts in turn, on warm ranks (``workers.five_axes``)."""
import itertools

import pytest
import workers

import distlab
from distlab.parallelize import trainer

pytestmark = pytest.mark.usefixtures("warm_ranks")

AXES = ("data", "pipeline", "expert", "context", "tensor")
# experts that drop tokens (capacity factor 1 with top-2), so the groups the ranks route in must be the reference's
MODEL = dict(width=32, heads=4, depth=2, digits=3, experts=4, top_k=2, capacity_factor=1.0, aux_weight=0.01)
TRAIN = dict(global_batch_size=16, steps=12, lr=0.05, optimizer="sgd", seed=0, test_lines=32)
TOLERANCE = 1e-5


def layout(*axes: str, **more) -> dict:
    """Settings for a layout: each named axis 2 ranks, the others one; a pipeline with two micro-batches."""
    sizes = {a: (2 if a in axes else 1) for a in AXES}
    extra = dict(micro_batches=2, schedule="1f1b") if "pipeline" in axes else {}
    return dict(MODEL, **TRAIN, **sizes, **extra, **more)


# lesson 01's MLP through the same trainer, on the axes it has (the depth-3 MLP's block is what tensor splits)
MLP = dict(model="mlp", width=32, depth=3, global_batch_size=32, steps=12, lr=0.05, optimizer="sgd", seed=0)


def mlp_layout(*axes: str) -> dict:
    sizes = {a: (2 if a in axes else 1) for a in ("data", "pipeline", "tensor")}
    extra = dict(micro_batches=2, schedule="1f1b") if "pipeline" in axes else {}
    return dict(MLP, **sizes, **extra)


PAIRS = {" x ".join(pair): layout(*pair) for pair in itertools.combinations(AXES, 2)}
PAIRS.update({"mlp " + " x ".join(pair): mlp_layout(*pair)
              for pair in itertools.combinations(("data", "pipeline", "tensor"), 2)})
TRIPLES = {"data x pipeline x tensor": layout("data", "pipeline", "tensor"),
           "pipeline x expert x context": layout("pipeline", "expert", "context", split="zigzag", causal=True),
           "mlp data x pipeline x tensor": mlp_layout("data", "pipeline", "tensor")}
HOROVOD = {name: dict(settings, attention="all_gather") for name, settings in PAIRS.items()
           if "pipeline" not in name and not name.startswith("mlp")}
HOROVOD["mlp data x tensor"] = PAIRS["mlp data x tensor"]


@pytest.fixture(scope="module")
def runs():
    out = {}
    for cases, world, backend in ((PAIRS, 4, "torchrun"), (TRIPLES, 8, "torchrun"), (HOROVOD, 4, "horovod")):
        ranks = distlab.launch(workers.five_axes, world_size=world, backend=backend, cases=cases, progress="none",
                               timeout=180)
        out.update({(backend, name): [r[name] for r in ranks] for name in cases})
    return out


def check_equal(records, settings) -> float:
    reference = trainer.train_single(world_size=len(records), **settings)
    whole = trainer.assemble(records)
    assert whole.keys() == reference.params.keys()
    difference = distlab.max_param_difference(whole, reference.params)
    assert difference <= TOLERANCE, difference
    return difference


@pytest.mark.parametrize("name", PAIRS)
def test_every_pair_of_axes_trains_like_one_process(runs, name):
    check_equal(runs[("torchrun", name)], PAIRS[name])


@pytest.mark.parametrize("name", TRIPLES)
def test_two_triples_on_eight_ranks_train_like_one_process(runs, name):
    check_equal(runs[("torchrun", name)], TRIPLES[name])


@pytest.mark.horovod
@pytest.mark.parametrize("name", HOROVOD)
def test_the_pairs_horovod_can_run_train_like_one_process(runs, name):
    records = runs[("horovod", name)]
    assert {r.backend for r in records} == {"horovod"}
    check_equal(records, HOROVOD[name])
