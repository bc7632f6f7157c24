"""Handwritten digits, and how a data set is split across workers.

Introduced in lesson 01 (``notebooks/01_data_parallelism.ipynb``).

The insurance company of the course wants to read handwritten forms.  Offline we use
the 1,797 real 8x8 handwritten digits that scikit-learn ships (``load_digits``); lesson 05
makes 100,000 and more from them (``distorted.py``), and ``datasets.py`` reads the 28x28 MNIST
digits from their files where a machine has them and picks a data set by name.

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

from .checks import check_int

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
