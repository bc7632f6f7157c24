"""Lesson 07: the 3D grid of ranks, its groups, and two 2 x 2 meshes that train like one process."""
import pytest
from helpers import launched, once, trained

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.parallelize import mesh_3d as mesh
from distlab.train import mesh as named_mesh
from distlab.pipeline import pipeline
from distlab.tensor import tensor_parallel as T
from distlab.predict import traffic

# these tests only need ranks to train on: launches reuse warm ones (conftest.py)
pytestmark = pytest.mark.usefixtures("warm_ranks")

STEPS, LR, BATCH, WIDTH = 20, 0.2, 48, 32
COMMON = dict(width=WIDTH, depth=3, global_batch_size=BATCH, steps=STEPS, lr=LR)
MESHES = {"data x pipeline": dict(data=2, pipeline=2, tensor=1, micro_batches=2),
          "data x tensor": dict(data=2, pipeline=1, tensor=2),
          "data x tensor on Horovod": dict(data=2, pipeline=1, tensor=2),
          "pipeline x tensor": dict(data=1, pipeline=2, tensor=2, micro_batches=2)}


def test_the_grid_and_its_lines():
    ranks = mesh.grid(2, 2, 2)
    assert mesh.groups_of(ranks, "tensor") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.groups_of(ranks, "pipeline") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.groups_of(ranks, "data") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh.coordinates(ranks, 6) == {"data": 1, "pipeline": 1, "tensor": 0}
    for axis in mesh.AXES:    # every rank in exactly one group along each axis
        assert sorted(r for g in mesh.groups_of(ranks, axis) for r in g) == list(range(8))


@pytest.mark.parametrize("kwargs,message", [
    (dict(data=2, pipeline=2, tensor=1, world_size=2), "= 4 ranks does not match the world size 2"),
    (dict(data=3, pipeline=1, tensor=1, world_size=3, global_batch_size=64), "does not divide among 3 data"),
    (dict(data=1, pipeline=4, tensor=2, world_size=8, micro_batches=4), "pipeline 4 cuts the split block fc2"),
    (dict(data=1, pipeline=2, tensor=2, world_size=4, depth=2), "use depth=3"),
    (dict(data=2, pipeline=1, tensor=2, world_size=4, width=33), "tensor-parallel size of 2 does not divide"),
    (dict(data=2, pipeline=0, tensor=2, world_size=4), "pipeline must be a positive integer"),
    (dict(data=2, pipeline=2, tensor=1, world_size=4, backend="horovod"), "Horovod has no point-to-point"),
])
def test_a_mesh_that_does_not_fit_is_refused_before_starting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        distlab.launch(mesh.train, progress="none", **kwargs)


@pytest.mark.parametrize("sizes,message", [
    ({"data": 2, "tensor": 2}, None),
    ({"data": 2, "sequence": 2}, "unknown mesh axis 'sequence'; the axes are data, pipeline, expert, context"),
    ([("data", 2), ("tensor", 1), ("data", 2)], "mesh axis 'data' is named twice"),
    ({"data": 2, "expert": 3}, "a mesh of data 2 x expert 3 = 6 ranks does not match the world size 4"),
    ({"context": 0}, "context must be a positive integer"),
    ({"data": -1, "tensor": 2}, None),
    ({"data": -1, "tensor": -1}, "only one mesh axis may be -1"),
    ({"data": -1, "tensor": 3}, "tensor 3 = 3 ranks does not divide the world size 4"),
])
def test_the_named_mesh_is_checked_before_any_process_starts(sizes, message):
    if message is None:
        assert named_mesh.check_mesh(4, sizes) == dict(data=2, pipeline=1, expert=1, context=1, tensor=2)
        return
    with pytest.raises(ValueError, match=message):
        named_mesh.check_mesh(4, sizes)


def test_purpose_groups_are_the_ranks_that_differ_only_along_their_axes():
    """Issue 36: groups of several axes (data x context for the gradients of what saw a piece of the line)."""
    sizes = named_mesh.check_mesh(8, dict(data=2, context=2, tensor=2))
    assert named_mesh.blocks(sizes, ("data", "context")) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert named_mesh.blocks(sizes, ("context", "tensor")) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert named_mesh.blocks(sizes, ("data",)) == named_mesh.lines(sizes, "data")
    assert named_mesh.wide_combinations(sizes) == [("data", "context"), ("data", "tensor"), ("context", "tensor"),
                                                   ("data", "context", "tensor")]
    for combo in named_mesh.wide_combinations(sizes):      # every rank in exactly one group of each purpose
        assert sorted(r for g in named_mesh.blocks(sizes, combo) for r in g) == list(range(8))


def test_the_named_mesh_puts_tensor_ranks_side_by_side():
    sizes = named_mesh.check_mesh(8, dict(data=2, context=2, tensor=2))
    assert named_mesh.lines(sizes, "tensor") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert named_mesh.lines(sizes, "context") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert named_mesh.lines(sizes, "data") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert named_mesh.lines(sizes, "expert") == [[r] for r in range(8)]
    assert named_mesh.coordinates(sizes, 6) == dict(data=1, pipeline=0, expert=0, context=1, tensor=0)


def runs(name: str) -> list:
    """Each rank's record of the mesh ``name``: the torchrun meshes trained in one launch, the Horovod one in
    another, each launched once whichever test asks first (helpers.trained, helpers.launched)."""
    if "Horovod" in name:
        return launched(mesh.train, 4, backend="horovod", timeout=120, **COMMON, **MESHES[name])
    cases = {n: ("mesh", dict(COMMON, **shape)) for n, shape in MESHES.items() if "Horovod" not in n}
    return trained(4, cases, timeout=120)[name]


def reference():
    """One process training the whole model on the whole batch (helpers.once)."""
    return once(dp.train_single, model="mlp", depth=3, width=WIDTH, global_batch_size=BATCH, steps=STEPS, lr=LR,
                record_grads_at=())


@pytest.mark.parametrize("name", MESHES)
def test_each_replica_trains_like_one_process(name):
    ref = reference()
    if name == "pipeline x tensor":      # stage 0 (fc1) whole on both tensor ranks, stage 1's block split
        records = runs(name)
        stage = {s: [r for r in records if r.config["mesh"]["pipeline"] == s] for s in (0, 1)}
        merged = dict(T.merge_params([r.params for r in stage[1]]), **stage[0][0].params)
        assert distlab.max_param_difference(merged, ref.params) <= 1e-6
        assert distlab.max_param_difference(stage[0][1].params, stage[0][0].params) == 0
        return
    for d in range(2):
        replica = [r for r in runs(name) if r.config["mesh"]["data"] == d]
        merged = (T.merge_params([r.params for r in replica]) if "data x tensor" in name
                  else pipeline.merge_params(replica))
        assert distlab.max_param_difference(merged, ref.params) <= 1e-6


def test_who_talks_to_whom():
    for r in runs("data x pipeline"):
        assert r.config["groups"]["data"] == [r.rank % 2, r.rank % 2 + 2]      # same stage, other replica
        assert r.config["groups"]["pipeline"] == [r.rank // 2 * 2, r.rank // 2 * 2 + 1]
        assert r.traffic["pipeline"] == BATCH // 2 * WIDTH * 4                  # one way each: act. or grad.
        assert r.traffic["pipeline"] == traffic.pipeline_bytes(BATCH // 2, [WIDTH, 10],
                                                               r.config["groups"]["pipeline"].index(r.rank))
        assert r.traffic["data"] == 4 * sum(p.numel() for p in r.params.values())
    for name in ("data x tensor", "data x tensor on Horovod"):
        for r in runs(name):
            assert r.backend == ("horovod" if "Horovod" in name else "torchrun")
            assert r.config["groups"]["tensor"] == [r.rank // 2 * 2, r.rank // 2 * 2 + 1]
            assert r.config["groups"]["data"] == [r.rank % 2, r.rank % 2 + 2]
            assert r.traffic["tensor"] == 2 * BATCH // 2 * WIDTH * 4 == sum(traffic.tensor_parallel_bytes(BATCH // 2,
                                                                                               WIDTH).values())
            assert r.traffic["data"] == 4 * sum(p.numel() for p in r.params.values())
    for r in runs("pipeline x tensor"):                     # rank = 2 * stage + tensor slice
        assert r.config["groups"]["tensor"] == [r.rank // 2 * 2, r.rank // 2 * 2 + 1]
        assert r.config["groups"]["pipeline"] == [r.rank % 2, r.rank % 2 + 2]
        assert r.traffic["pipeline"] == BATCH * WIDTH * 4                       # the whole batch, one way
        assert r.traffic["tensor"] == (2 * BATCH * WIDTH * 4 if r.rank >= 2 else 0)   # only stage 1 is split


def test_the_mesh_picture_and_table_come_from_the_records():
    from distlab.widgets import display
    from distlab.widgets import mesh as M

    records = runs("data x pipeline")
    table = M.traffic_table(records).splitlines()
    assert table[1].split() == ["0", "d0", "p0", "t0", f"{records[0].traffic['data']:,}",
                                f"{records[0].traffic['pipeline']:,}", "0"]
    assert M.holds(records[0]).startswith("fc1\n")      # fc1 (64 x 32) does as much as the rest
    assert M.holds(runs("data x tensor")[0]).startswith("fc1, fc2, fc3, out (fc2, fc3 sliced)")
    for axis in M.AXIS_COLOURS:
        assert display.figure_png(M.mesh_figure(records, axis)).startswith(b"\x89PNG")
    widget = M.mesh_widget(records)
    assert widget.describe("pipeline") == "pipeline groups: [0, 1]; [2, 3]"
