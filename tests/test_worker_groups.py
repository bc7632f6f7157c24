"""Lesson 07: every collective of ``Worker`` inside a group that is not the whole job, on both backends.

Four ranks make two groups, ranks {0, 2} and {1, 3}; each rank runs every collective in its own
group (and send/recv to its partner), and the results must be what the arithmetic says.  One
launch per backend runs them all (``group_collectives``); Horovod's groups are process sets, and
Horovod has no send/recv, so there the worker must say so and name the backend that has it.
"""
import pytest
import torch

import distlab

pytestmark = pytest.mark.usefixtures("warm_ranks")

GROUPS = ((0, 2), (1, 3))


def group_collectives(worker):
    """Every collective in this rank's group of ``GROUPS`` (run on each rank of a 4-rank job)."""
    made = [worker.new_group(ranks) for ranks in GROUPS]        # every rank makes every group
    group = next(g for g in made if worker.rank in g.ranks)
    r, out = worker.rank, {}
    out["sum"] = worker.all_reduce(torch.tensor([r + 1.0, 10.0 * r]), group=group)
    out["avg"] = worker.all_reduce(torch.tensor([r + 1.0]), op="avg", group=group)
    out["broadcast"] = worker.broadcast(torch.tensor([float(r)]), src=group.ranks[-1], group=group)
    out["all_gather"] = torch.stack(worker.all_gather(torch.tensor([r, r * r]), group=group))
    out["reduce_scatter"] = worker.reduce_scatter(torch.arange(4.0) + 10 * r, group=group)
    out["reduce_scatter avg"] = worker.reduce_scatter(torch.arange(4.0) + 10 * r, op="avg", group=group)
    out["all_to_all"] = worker.all_to_all(torch.tensor([100.0 * r, 100.0 * r + 1]), group=group)
    # issue 36: the same collectives started at once, finished later (the overlap's building block)
    pending = {"async sum": worker.all_reduce(torch.tensor([r + 1.0, 10.0 * r]), group=group, async_op=True),
               "async avg": worker.all_reduce(torch.tensor([r + 1.0]), op="avg", group=group, async_op=True),
               "async broadcast": worker.broadcast(torch.tensor([float(r)]), src=group.ranks[-1], group=group,
                                                   async_op=True),
               "async reduce_scatter": worker.reduce_scatter(torch.arange(4.0) + 10 * r, group=group, async_op=True),
               "async all_gather": worker.all_gather(torch.tensor([r, r * r]), group=group, async_op=True)}
    for name, p in pending.items():
        out[name] = p.wait()
    out["async all_gather"] = torch.stack(out["async all_gather"])
    out["waited twice"] = pending["async sum"].wait()
    partner = group.ranks[1 - group.index(r)]
    try:
        first, second = torch.zeros(1), torch.zeros(1)       # two messages told apart by their tags
        if group.index(r) == 0:
            sent = [worker.send(torch.tensor([7.0]), partner, tag=7, async_op=True),
                    worker.send(torch.tensor([5.0]), partner, tag=5, async_op=True)]
            for p in sent:
                p.wait()
        else:
            worker.recv(second, partner, tag=5)                # the later message first
            worker.recv(first, partner, tag=7, async_op=True).wait()
        out["tags"] = torch.cat([first, second])
    except RuntimeError as err:
        out["tags"] = str(err)
    try:
        got = torch.zeros(2)
        if group.index(r) == 0:
            worker.send(torch.tensor([r, -1.0]), partner)
        else:
            worker.recv(got, partner)
        out["recv"] = got
    except RuntimeError as err:
        out["recv"] = str(err)
    out["world sum"] = worker.all_reduce(torch.tensor([1.0]))          # the whole job still talks
    return out


def expected(rank):
    group = next(g for g in GROUPS if rank in g)
    me = group.index(rank)
    return {"sum": torch.tensor([sum(q + 1.0 for q in group), sum(10.0 * q for q in group)]),
            "avg": torch.tensor([sum(q + 1.0 for q in group) / 2]),
            "broadcast": torch.tensor([float(group[-1])]),
            "all_gather": torch.tensor([[q, q * q] for q in group]),
            "reduce_scatter": sum(torch.arange(4.0) + 10 * q for q in group)[2 * me:2 * me + 2],
            "reduce_scatter avg": sum(torch.arange(4.0) + 10 * q for q in group)[2 * me:2 * me + 2] / 2,
            "all_to_all": torch.tensor([100.0 * q + me for q in group]),
            "recv": torch.tensor([group[0], -1.0]) if me == 1 else torch.zeros(2),
            "async sum": torch.tensor([sum(q + 1.0 for q in group), sum(10.0 * q for q in group)]),
            "waited twice": torch.tensor([sum(q + 1.0 for q in group), sum(10.0 * q for q in group)]),
            "async avg": torch.tensor([sum(q + 1.0 for q in group) / 2]),
            "async broadcast": torch.tensor([float(group[-1])]),
            "async reduce_scatter": sum(torch.arange(4.0) + 10 * q for q in group)[2 * me:2 * me + 2],
            "async all_gather": torch.tensor([[q, q * q] for q in group]),
            "tags": torch.tensor([7.0, 5.0]) if me == 1 else torch.zeros(2),
            "world sum": torch.tensor([4.0])}


@pytest.mark.parametrize("backend", ["torchrun", "horovod"])
def test_each_collective_in_a_group_does_what_the_arithmetic_says(backend):
    results = distlab.launch(group_collectives, world_size=4, backend=backend, progress="none", timeout=60)
    for rank, got in enumerate(results):
        for name, want in expected(rank).items():
            if name in ("recv", "tags") and backend == "horovod":
                assert "Horovod has no point-to-point send/recv" in got[name]
                assert "backend='torchrun'" in got[name]
                continue
            assert torch.equal(got[name], want.to(got[name].dtype)), (backend, rank, name, got[name], want)


def skip_in_tensor_group(worker):
    """Rank 1 never joins its tensor group's all-reduce (a 2 data x 2 tensor mesh)."""
    from distlab.train.mesh import Mesh

    mesh = Mesh(worker, data=2, tensor=2)
    if worker.rank != 1:
        worker.all_reduce(torch.ones(3), group=mesh.group("tensor"))
    return worker.rank


def test_a_group_of_the_mesh_keeps_the_jobs_timeout():
    """The DeviceMesh's groups get the job's timeout (PyTorch's default for them is 30 minutes), and
    every wait has it too (issue 36: each operation is started asynchronously and waited for)."""
    with pytest.raises(distlab.WorkerError,
                       match="rank 0 failed: TimeoutError: all_reduce on rank 0 waited more than 2 s"):
        distlab.launch(skip_in_tensor_group, world_size=4, progress="none", warm=False, timeout=2)
