"""More handwriting from the same digits: elastic and affine distortions, made on the ranks.

Introduced in lesson 05b ("More data, more accuracy?").  The insurance company wants a more
accurate model *trained on more data*, but offline we cannot collect new writers: we have 5,000
real 28x28 MNIST digits (and 1,797 real 8x8 ones).  Simard, Steinkraus and Platt (2003, "Best
practices for convolutional neural networks applied to visual document analysis") trained on
distorted copies of MNIST's training digits; in their Table 1 elastic distortions took a two-layer
MLP from 1.6% to 0.7% test error.  Their explanation is that the copies teach invariance to small
deformations; the copies are not new writers (they bring no new styles), and lesson 05b treats the
gain as a hypothesis to measure, at the same number of training steps.  Two distortions:

- an **elastic** distortion: a random displacement field (every pixel moves by a uniform random
  amount in x and y), smoothed by a Gaussian of width ``sigma`` so neighbouring pixels move
  together, scaled by ``alpha`` (in pixels); the image is resampled along the moved grid;
- a small **affine** map: rotation, scale, shear and shift.

``DistortedDigits(samples, seed)`` is a training set of ``samples`` digits: sample ``i`` below
1,438 (the real training digits) is that digit itself; every later ``i`` is training digit
``i mod 1438`` distorted with random numbers that depend only on ``(seed, i)``.  With
``real=datasets.load_mnist_5k()`` and ``how=SIMARD_28`` the same is made from 4,000 real 28x28
MNIST digits (lesson 05b, dataset ``distorted_mnist_5k``).  Nothing is
stored: a rank makes the samples of its own mini-batches when it needs them (``train_batch``),
so 100,000 samples cost no memory and no disk, and sample ``i`` is the same image on 1 rank, on
2 ranks, or in the lesson's own process.  The test digits are the real held-out ones of
``real`` (never distorted, never trained on).

Why random numbers from a hash of ``(seed, i)`` rather than a seeded generator: a generator's
numbers depend on how many were drawn before, i.e. on which rank draws them in what order.  A
*counter-based* generator (the idea of Philox and JAX's keys) computes the k-th number of sample
i directly, for a whole mini-batch in a few tensor operations.

Why plain torch and not torchvision's ``transforms.v2`` (``ElasticTransform``, ``RandomAffine``):
the only torchvision 0.28 wheel (the release for torch 2.13) that installs here is PyPI's CUDA
build; it pins ``torch==2.13.0`` without pulling another torch, but its ``_C.so`` needs
``libc10_cuda.so``, which the CPU torch lacks, so ``import torchvision`` fails ("operator
torchvision::nms does not exist").  The CPU build is only on download.pytorch.org.  The two
distortions are a few lines each with ``F.affine_grid`` and ``F.grid_sample``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .data import Digits, load_digits

_M32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Distortion:
    """Lesson 05: how strongly a digit is bent.  Sizes in pixels of the image, angles in degrees.

    Simard et al. used alpha 34 and sigma 4 on 28x28 digits (``SIMARD_28``, lesson 05b): a
    displacement of roughly 5% of the side.  These defaults give about the same on 8x8 digits.
    """

    alpha: float = 3.0          # scale of the smoothed displacement field (pixels)
    sigma: float = 1.0          # width of the Gaussian that smooths it (pixels)
    rotation: float = 12.0      # at most this many degrees either way
    scale: float = 0.1          # size times 1 +- scale
    shear: float = 0.15         # x moves by up to shear * y
    shift: float = 0.6          # at most this many pixels in x and in y

    def __post_init__(self):
        for name in ("alpha", "sigma", "rotation", "scale", "shear", "shift"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 100:
                raise ValueError(f"Distortion.{name} must be a number from 0 to 100, got {value!r}")
        if self.scale >= 1:
            raise ValueError(f"Distortion.scale must be below 1 (a size of 1 - scale > 0), got {self.scale}")


# Simard et al. (2003), section 2: on 28x28 MNIST, a displacement field of uniform numbers in
# [-1, 1], smoothed by a Gaussian of sigma 4 pixels and scaled by alpha 34 (about 1.4 pixels a
# pixel), and no affine map: elastic distortions alone took their MLP from 1.6% to 0.7% error
# (their affine ones to 1.1%).  Lesson 05b.
SIMARD_28 = Distortion(alpha=34.0, sigma=4.0, rotation=0.0, scale=0.0, shear=0.0, shift=0.0)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (int64 tensors holding values below 2**32; products stay below 2**59)."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    return (x >> 16) ^ x


def uniform(seed: int, index: torch.Tensor, count: int) -> torch.Tensor:
    """Lesson 05: ``count`` numbers in [-1, 1) for each sample index: a function of (seed, index) only."""
    key = _mix(torch.tensor(seed & _M32, dtype=torch.int64))
    x = _mix((key ^ (index.to(torch.int64) & _M32)) & _M32)
    k = _mix(torch.arange(count, dtype=torch.int64) + 0x9E3779B9)
    bits = _mix((x[:, None] + k[None, :]) & _M32)
    return bits.to(torch.float64).div(2.0 ** 31).sub(1.0).float()


def _smooth(field: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian smoothing of (n, 2, h, w) fields: ``G @ field @ G.T`` (a 2-D Gaussian separates).

    ``G[i, j]`` is the Gaussian weight of pixel j seen from pixel i (zero beyond the border).  Two
    small matrix products: on 8x8 fields far faster than a convolution with a 7-wide kernel.
    """
    if sigma == 0:
        return field
    h, w = field.shape[-2:]

    def gauss(n):
        t = torch.arange(n, dtype=field.dtype)
        g = torch.exp(-(t[:, None] - t[None, :]) ** 2 / (2 * sigma ** 2))
        return g / g.sum(1, keepdim=True)

    return gauss(h) @ field @ gauss(w).T


@functools.lru_cache(maxsize=8)
def _identity_grid(h: int, w: int, dtype) -> torch.Tensor:
    """Where each output pixel reads when nothing moves (``F.affine_grid`` of the identity), made once."""
    return F.affine_grid(torch.eye(2, 3, dtype=dtype)[None], [1, 1, h, w], align_corners=False)


def distort(images: torch.Tensor, noise: torch.Tensor, how: Distortion = Distortion()) -> torch.Tensor:
    """Lesson 05: bend ``images`` (n, 1, h, w) with the random numbers ``noise`` (n, 2*h*w + 5) in [-1, 1).

    The affine map and the elastic field are both written as a sampling grid: for every output
    pixel, where to read the input (``F.grid_sample``, bilinear, zero outside the image).
    """
    n, _, h, w = images.shape
    field = noise[:, :2 * h * w].reshape(n, 2, h, w)
    if how.rotation == how.scale == how.shear == how.shift == 0:     # elastic only (SIMARD_28): no map to apply
        grid = _identity_grid(h, w, images.dtype).expand(n, h, w, 2)
    else:
        angle, size, shear, sx, sy = noise[:, 2 * h * w:].T
        angle = angle * math.radians(how.rotation)
        size = 1 + size * how.scale
        cos, sin = torch.cos(angle) / size, torch.sin(angle) / size
        # output -> input coordinates: rotate and scale, then shear x by y, then shift (grid units: 2/side per pixel)
        theta = torch.stack([torch.stack([cos, -sin + shear * how.shear * cos, sx * how.shift * 2 / w], 1),
                             torch.stack([sin, cos + shear * how.shear * sin, sy * how.shift * 2 / h], 1)], 1)
        grid = F.affine_grid(theta.to(images.dtype), list(images.shape), align_corners=False)
    moved = _smooth(field.to(images.dtype), how.sigma) * how.alpha          # pixels
    scale = torch.tensor([2 / w, 2 / h], dtype=images.dtype)
    grid = grid + moved.permute(0, 2, 3, 1) * scale                        # (n, h, w, 2): x then y
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False).clamp(0, 1)


class DistortedDigits:
    """Lesson 05: ``samples`` training digits made from the real ones, and the real test digits.

    Quacks like ``data.Digits`` where the training loop needs it (``n_train``, ``side``,
    ``x_test``, ``y_test``, ``name``); the training images come from ``train_batch(indices)``.
    """

    def __init__(self, samples: int = 100_000, seed: int = 0, dtype=torch.float32,
                 how: Distortion = Distortion(), real: Digits | None = None):
        if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 10_000_000:
            raise ValueError(f"samples must be an integer from 1 to 10,000,000, got {samples!r}")
        self.real = real if real is not None else load_digits(dtype=dtype)
        self.samples, self.seed, self.how = samples, seed, how
        self.x_test, self.y_test = self.real.x_test, self.real.y_test
        self.name = f"distorted-digits-{samples}" if real is None else f"distorted-{self.real.name}-{samples}"

    @property
    def n_train(self) -> int:
        return self.samples

    @property
    def side(self) -> int:
        return self.real.side

    def train_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Lesson 05: the images and labels of the samples ``index`` (made now, on this rank)."""
        index = index.to(torch.int64).cpu()
        if len(index) and (index.min() < 0 or index.max() >= self.samples):
            raise IndexError(f"sample indices must be in 0..{self.samples - 1}")
        n_real = self.real.n_train
        source = index % n_real
        x, y = self.real.x_train[source].clone(), self.real.y_train[source]
        bent = index >= n_real                              # the first n_real samples are the real digits
        if bent.any():
            h, w = x.shape[-2:]
            noise = uniform(self.seed, index[bent], 2 * h * w + 5)
            x[bent] = distort(x[bent], noise, self.how)
        return x, y
