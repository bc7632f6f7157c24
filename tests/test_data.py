"""The partitioner gives what DistributedSampler gives: disjoint, covering, reproducible shards."""
import pytest
import torch
from torch.utils.data import DistributedSampler

from distlab import data
from distlab.models import build_model, count_parameters


@pytest.mark.parametrize("n", [10, 1437, 1797])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("epoch", [0, 3])
def test_shards_match_distributed_sampler(n, world_size, epoch):
    ds = list(range(n))
    for rank in range(world_size):
        sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=5)
        sampler.set_epoch(epoch)
        ours = data.shard_indices(n, rank, world_size, seed=5, epoch=epoch)
        assert ours.tolist() == list(sampler)


@pytest.mark.parametrize("world_size", [1, 2, 4, 5])
def test_shards_cover_and_are_disjoint_when_n_divides(world_size):
    n = 20 * world_size
    shards = [set(data.shard_indices(n, r, world_size).tolist()) for r in range(world_size)]
    assert set().union(*shards) == set(range(n))
    assert sum(len(s) for s in shards) == n


def test_padding_repeats_only_the_start_when_n_does_not_divide():
    n, world_size = 10, 4          # 12 slots: 2 indices are used twice
    all_idx = torch.cat([data.shard_indices(n, r, world_size) for r in range(world_size)])
    assert set(all_idx.tolist()) == set(range(n)) and len(all_idx) == 12
    assert {len(data.shard_indices(n, r, world_size)) for r in range(world_size)} == {3}


def test_shards_are_reproducible_and_change_with_epoch():
    a = data.shard_indices(100, 1, 3, seed=1, epoch=0)
    assert torch.equal(a, data.shard_indices(100, 1, 3, seed=1, epoch=0))
    assert not torch.equal(a, data.shard_indices(100, 1, 3, seed=1, epoch=1))


def test_global_batch_is_the_union_of_rank_batches():
    n, world_size, b = 1437, 4, 8
    for step in (0, 1, 44, 45, 100):   # 44 steps per epoch: crosses epochs
        union = torch.cat([data.rank_batch(n, r, world_size, b, step) for r in range(world_size)])
        assert sorted(union.tolist()) == sorted(data.global_batch(n, world_size, b, step).tolist())


def test_digits_are_real_and_split_deterministically():
    d = data.load_digits()
    assert d.x_train.shape[1:] == (1, 8, 8) and d.n_train + len(d.y_test) == 1797
    assert 0.0 <= d.x_train.min() and d.x_train.max() <= 1.0
    assert set(d.y_train.tolist()) == set(range(10))
    assert torch.equal(d.y_test, data.load_digits().y_test)


def test_bad_partition_inputs():
    with pytest.raises(ValueError, match="positive integer"):
        data.shard_indices(10, 0, 0)
    with pytest.raises(ValueError, match="larger than the training set"):
        data.shard_indices(10, 0, 11)
    with pytest.raises(ValueError, match="outside"):
        data.shard_indices(10, 4, 4)
    with pytest.raises(ValueError, match="larger than a rank's shard"):
        data.rank_batch(10, 0, 2, 6, 0)


def test_models_have_width_knob_and_named_stages():
    small, big = build_model("mlp", 16), build_model("mlp", 256)
    assert count_parameters(big) > count_parameters(small)
    x = torch.rand(5, 1, 8, 8)
    for name in ("mlp", "cnn"):
        m = build_model(name, 8)
        assert m(x).shape == (5, 10)
        assert m[1:](m[:1](x)).shape == (5, 10)      # can be cut into stages
    a, b = build_model("cnn", 8, seed=3), build_model("cnn", 8, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="unknown model"):
        build_model("resnet")
