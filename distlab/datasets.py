"""Which data set a run trains on: the real digits, their distorted copies, or MNIST's files.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``, "More data, more
accuracy"), and named in a run config by ``data.dataset`` and ``data.samples`` (lesson 09).

Kept apart from ``data.py`` (the digits and their partition, lesson 01) because it needs
``distorted.py``, which itself builds on ``data.py``: one direction of imports, no cycle.
``load_mnist`` reads MNIST's own IDX files (plain or gzipped) and never downloads unless asked,
so a machine without internet gets a clear error naming the files, not a hang.
"""
from __future__ import annotations

import math
import os

import torch

from .data import Digits, load_digits
from .distorted import DistortedDigits
from .checks import check_int

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
DISTORTED_SAMPLES = 100_000     # distorted_digits without data.samples


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
        return DistortedDigits(DISTORTED_SAMPLES if samples is None else samples, seed=seed, dtype=dtype)
    data = load_digits(dtype=dtype) if dataset == "digits" else load_mnist(root or MNIST_ROOT, dtype=dtype)
    if samples is not None and samples < data.n_train:
        data = Digits(data.x_train[:samples], data.y_train[:samples], data.x_test, data.y_test,
                      name=f"{data.name}-first-{samples}")
    return data


def train_samples(dataset: str, samples: int | None, root: str | None = None) -> int:
    """Lesson 05: how many training samples ``dataset`` gives, without making or reading them all
    (a launch checks the batch against it before any process starts)."""
    if dataset == "distorted_digits":
        return DISTORTED_SAMPLES if samples is None else samples
    if dataset == "mnist":
        labels = read_idx(find_mnist(root or MNIST_ROOT)[MNIST_FILES["train"][1]])
        return min(len(labels), samples or len(labels))
    return min(load_digits().n_train, samples or load_digits().n_train)
