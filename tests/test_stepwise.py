"""Issue 37: distlab.compare, two runs step by step, names where they part and by how much."""
import torch

import distlab
from distlab.data_parallel import data_parallel


def sgd_trace(steps=6, scale_at=None, factor=2.0, what="params"):
    """A real small training; at step ``scale_at`` the gradient is multiplied by ``factor`` (the
    planted mistake: a sum where a mean is due).  Returns a list of snapshots, one a step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for step in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if step == scale_at:
            model[2].weight.grad *= factor
        if what == "grads":
            out.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
        if what == "params":
            out.append(distlab.snapshot(model))
    return out


def test_identical_runs_agree():
    report = distlab.compare(sgd_trace(), sgd_trace())
    assert report.same and "agree within 1e-05 at every one of 6 step(s)" in str(report)


def test_a_planted_mistake_is_found_at_its_step_and_parameter():
    report = distlab.compare(sgd_trace(scale_at=3), sgd_trace())
    assert (report.step, report.name) == (3, "2.weight"), str(report)
    assert "steps 0 to 2 agree" in str(report)


def test_a_constant_factor_is_named():
    report = distlab.compare(sgd_trace(scale_at=2, what="grads"), sgd_trace(what="grads"))
    assert report.step == 2 and abs(report.factor - 2.0) < 1e-6, str(report)
    assert "is 2x the reference" in str(report)


def test_records_of_real_runs_compare_by_their_final_parameters():
    a = data_parallel.train_single(steps=10, width=16, global_batch_size=32, record_grads_at=())
    b = data_parallel.train_single(steps=10, width=16, global_batch_size=32, record_grads_at=())
    c = data_parallel.train_single(steps=10, width=16, global_batch_size=32, lr=0.2, record_grads_at=())
    assert distlab.compare(a, b).same
    assert distlab.compare(c, a).step == 0


def test_shards_and_names_that_do_not_match_are_said_not_compared():
    full = {"w": torch.ones(4, 4)}
    assert "a rank's shard?" in str(distlab.compare({"w": torch.ones(2, 4)}, full))
    assert "only in yours: ['v']" in str(distlab.compare({"v": torch.ones(4, 4)}, full))
    assert "compare runs of the same length" in str(distlab.compare([full, full], [full]))
