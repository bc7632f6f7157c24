"""Handwritten digits, and how a data set is split across workers.

Introduced in lesson 01 (``notebooks/01_data_parallelism.ipynb``).

The insurance company of the course wants to read handwritten forms.  Offline we use
the 1,797 real 8x8 handwritten digits that scikit-learn ships (``load_digits``); lesson 05
makes 100,000 and more from them (``distorted.py``), and ``load_mnist`` reads the 28x28 MNIST
digits from their files where a machine has them (``load_dataset`` picks one by name).

Data parallelism starts with a *partition*: every worker gets its own shard of the
training set, the shards are disjoint and together cover the whole set.  ``shard_indices``
reproduces exactly what PyTorch's ``DistributedSampler`` does, so what a learner sees in
the widgets is what real PyTorch jobs do:

1. shuffle all indices with a generator seeded by ``seed + epoch`` (same on every rank,
   so no communication is needed to agree on the order);
2. pad the list by repeating its start until its length divides by the world size;
3. rank ``r`` takes every ``world_size``-th index starting at ``r``.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np
import torch

from .processes.checks import check_int

DIGITS_CACHE = os.path.join(os.environ.get("DISTLAB_CACHE", os.path.expanduser("~/.cache/distlab")),
                            "sklearn-digits.pt")


@dataclass
class Digits:
    """A train/test split of handwritten digits as float tensors in [0, 1]."""

    x_train: torch.Tensor   # (n, 1, side, side)
    y_train: torch.Tensor   # (n,)
    x_test: torch.Tensor
    y_test: torch.Tensor
    name: str

    @property
    def side(self) -> int:
        return self.x_train.shape[-1]

    @property
    def n_train(self) -> int:
        return len(self.y_train)


def load_digits(test_fraction: float = 0.2, seed: int = 0, dtype=torch.float32) -> Digits:
    """Lesson 01: the 8x8 handwritten digits shipped with scikit-learn (no download).

    The split is deterministic: the same ``seed`` gives the same train and test sets on
    every rank and every machine, which is what lets N workers agree without talking.
    """
    images, labels = digit_arrays()
    x = (images / 16.0).to(dtype).unsqueeze(1)                         # pixel values are 0..16
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Digits(x[train], labels[train], x[test], labels[test], name="sklearn-digits-8x8")


@functools.lru_cache(maxsize=1)
def digit_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 00: the 1,797 images (float64, 0..16) and their labels, read once per process.

    Why a cache file: importing scikit-learn takes about two seconds, and every rank of every
    launch would pay it before its first step.  The first process that reads the digits from
    scikit-learn keeps them in ``DIGITS_CACHE`` (a few hundred kB); every later one, ranks
    included, loads that file in milliseconds.  A missing or damaged file is read again from
    scikit-learn.
    """
    try:
        images, labels = torch.load(DIGITS_CACHE, weights_only=True)
        if images.shape == (1797, 8, 8) and labels.shape == (1797,):
            return images, labels
    except Exception:           # absent, half-written by a crash, or from another version
        pass
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    images = torch.tensor(bunch.images, dtype=torch.float64)
    labels = torch.tensor(bunch.target, dtype=torch.long)
    try:
        os.makedirs(os.path.dirname(DIGITS_CACHE), exist_ok=True)
        tmp = f"{DIGITS_CACHE}.tmp{os.getpid()}"
        torch.save((images, labels), tmp)
        os.replace(tmp, DIGITS_CACHE)             # readers never see half a file
    except OSError:                               # a read-only home: read scikit-learn each time
        pass
    return images, labels


MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"    # the mirror torchvision reads
MNIST_ROOT = "~/.cache/distlab/mnist"


def read_idx(path: str) -> torch.Tensor:
    """Lesson 05: one file in MNIST's IDX format (plain, or gzip'd when the name ends in .gz).

    The format: two zero bytes, a type byte (0x08: unsigned bytes), the number of dimensions,
    then each dimension as a big-endian 32-bit integer, then the values.
    """
    import gzip

    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (its first bytes are {raw[:4]!r})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    body = raw[4 + 4 * ndim:]
    if len(body) != math.prod(dims):
        raise ValueError(f"{path}: the header says {dims} ({math.prod(dims)} bytes), the file holds {len(body)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def mnist_file(root: str, name: str) -> str | None:
    """The path of MNIST file ``name`` (plain or .gz) in ``root`` or in torchvision's ``root/MNIST/raw``."""
    for folder in (root, os.path.join(root, "MNIST", "raw")):
        for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
            if os.path.isfile(path):
                return path
    return None


def find_mnist(root: str) -> dict[str, str]:
    """Lesson 05: the four MNIST files in ``root``, or a clear error naming those that are missing."""
    root = os.path.expanduser(root)
    found = {name: mnist_file(root, name) for pair in MNIST_FILES.values() for name in pair}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise FileNotFoundError(f"MNIST is not complete in {root}: missing {', '.join(missing)} (plain or .gz). "
                                f"On a machine that is online, load_mnist(root, download=True) fetches them; "
                                f"offline, use dataset 'digits' or 'distorted_digits'")
    return found


def download_mnist(root: str) -> None:
    """Fetch the four gzip'd MNIST files into ``root`` (only when asked: ``download=True``)."""
    import urllib.request

    root = os.path.expanduser(root)
    os.makedirs(root, exist_ok=True)
    for pair in MNIST_FILES.values():
        for name in pair:
            if mnist_file(root, name) is None:
                urllib.request.urlretrieve(MNIST_URL + name + ".gz", os.path.join(root, name + ".gz"))


def load_mnist(root: str = MNIST_ROOT, download: bool = False,
               dtype=torch.float32) -> Digits:
    """Lesson 05: the 28x28 MNIST digits, read from their IDX files in ``root``.

    Offline it reads what is there (the four files, plain or .gz, in ``root`` or in
    torchvision's ``root/MNIST/raw``) and never touches the network; ``download=True`` fetches
    missing files first, on machines that are online.  No torchvision needed.
    """
    if download:
        download_mnist(root)
    files = find_mnist(root)

    def split(part):
        images, labels = (read_idx(files[name]) for name in MNIST_FILES[part])
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"MNIST {part} files do not match: images {tuple(images.shape)}, "
                             f"labels {tuple(labels.shape)}")
        return images.to(dtype).div(255.0).unsqueeze(1), labels.long()

    return Digits(*split("train"), *split("test"), name="mnist-28x28")


DATASETS = ("digits", "distorted_digits", "mnist")


def check_dataset(dataset: str, samples: int | None, root: str | None = None, *, files: bool = True) -> None:
    """Lesson 05: a clear error for a data set that does not exist or a size it cannot give.

    ``files=False`` leaves out whether MNIST's files are in ``root`` (a config written here may
    run on a machine that has them); a launch checks them before any process starts.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    if samples is not None:
        check_int("samples", samples)
    if dataset == "digits" and samples is not None and samples > load_digits().n_train:
        raise ValueError(f"dataset digits has {load_digits().n_train} training samples, not {samples}: "
                         "use dataset distorted_digits for more")
    if dataset == "mnist":
        if files:
            find_mnist(root or MNIST_ROOT)
    elif root is not None:
        raise ValueError(f"data root {root!r} is for dataset mnist (this run reads {dataset})")



def load_dataset(dataset: str = "digits", samples: int | None = None, *, seed: int = 0,
                 root: str | None = None, dtype=torch.float32):
    """Lesson 05: the training and test data a run config names (``data.dataset``, ``data.samples``).

    ``digits``: the real 8x8 digits (the first ``samples`` training ones, if given);
    ``distorted_digits``: ``samples`` (default 100,000) made from them on the rank
    (``distorted.DistortedDigits``, seeded by ``seed``); ``mnist``: the IDX files in ``root``
    (the first ``samples`` training images, if given).  Test sets are never cut or changed.
    """
    check_dataset(dataset, samples, root)
    if dataset == "distorted_digits":
        from .distorted import DistortedDigits

        return DistortedDigits(100_000 if samples is None else samples, seed=seed, dtype=dtype)
    data = load_digits(dtype=dtype) if dataset == "digits" else load_mnist(root or MNIST_ROOT, dtype=dtype)
    if samples is not None and samples < data.n_train:
        data = Digits(data.x_train[:samples], data.y_train[:samples], data.x_test, data.y_test,
                      name=f"{data.name}-first-{samples}")
    return data


def shard_indices(n: int, rank: int, world_size: int, *, shuffle: bool = True,
                  seed: int = 0, epoch: int = 0) -> torch.Tensor:
    """Lesson 01: the sample indices that rank ``rank`` of ``world_size`` trains on.

    Identical to ``torch.utils.data.DistributedSampler(..., drop_last=False)``: every rank
    gets ``ceil(n / world_size)`` indices; when ``n`` does not divide, the first few
    indices are repeated so that all ranks do the same number of steps (a rank that ran
    out early would leave the others waiting forever at the next all-reduce).
    """
    check_world_size(world_size, n)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    order = _epoch_order(n, world_size, shuffle, seed, epoch)
    return order[rank::world_size]


@functools.lru_cache(maxsize=16)   # called every step; the order only changes once an epoch
def _epoch_order(n: int, world_size: int, shuffle: bool, seed: int, epoch: int) -> torch.Tensor:
    """All indices of one epoch, shuffled and padded to a multiple of ``world_size`` (read-only)."""
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    else:
        order = torch.arange(n)
    total = math.ceil(n / world_size) * world_size
    if total > n:  # repeat the start, as DistributedSampler does
        reps = math.ceil((total - n) / n)
        order = torch.cat([order] + [order] * reps)[:total]
    return order


def check_world_size(world_size: int, n: int) -> None:
    """A clear error for a world size that cannot split ``n`` samples."""
    check_int("world_size", world_size)
    if world_size > n:
        raise ValueError(f"world_size {world_size} is larger than the training set ({n} samples): "
                         "some workers would get no data")


def steps_per_epoch(n: int, world_size: int, batch_size: int) -> int:
    """Mini-batches each rank takes from its shard in one epoch (the last partial one is dropped)."""
    return math.ceil(n / world_size) // batch_size


def rank_batch(n: int, rank: int, world_size: int, batch_size: int, step: int, *,
               seed: int = 0) -> torch.Tensor:
    """Lesson 01: the indices of rank ``rank``'s mini-batch at global step ``step``.

    Each rank walks through its own shard in order; a new epoch reshuffles.
    """
    per_epoch = steps_per_epoch(n, world_size, batch_size)
    if per_epoch == 0:
        raise ValueError(f"batch size {batch_size} is larger than a rank's shard "
                         f"({math.ceil(n / world_size)} samples)")
    epoch, k = divmod(step, per_epoch)
    shard = shard_indices(n, rank, world_size, seed=seed, epoch=epoch)
    return shard[k * batch_size:(k + 1) * batch_size]


def global_batch(n: int, world_size: int, batch_size: int, step: int, *, seed: int = 0) -> torch.Tensor:
    """The union of every rank's mini-batch at ``step``: what one process at batch N*B sees.

    Because rank r holds positions r, r+N, r+2N, ... of the epoch order, the N mini-batches
    of one step are exactly ``N * batch_size`` consecutive positions of that order.  This is
    the single-process reference that data parallelism must reproduce.
    """
    per_epoch = steps_per_epoch(n, world_size, batch_size)
    if per_epoch == 0:
        raise ValueError(f"batch size {batch_size} is larger than a rank's shard")
    epoch, k = divmod(step, per_epoch)
    order = _epoch_order(n, world_size, True, seed, epoch)
    g = world_size * batch_size
    return order[k * g:(k + 1) * g]


def as_numpy_grid(x: torch.Tensor) -> np.ndarray:
    """Images as a numpy array (n, side, side) for plotting."""
    return x.squeeze(1).detach().cpu().numpy()
