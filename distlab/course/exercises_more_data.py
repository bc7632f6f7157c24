"""Lesson 05b exercise: the learner writes Simard's elastic distortion, checked on real MNIST digits.

The checker runs the learner's function on 64 real held-out 28x28 digits with the same random
numbers the library uses, and compares the images with ``distorted.distort(..., SIMARD_28)``
through ``distlab.compare`` (which names where they part and a constant factor).  A wrong answer
is matched against the usual slips, each made by the library itself with one part changed, so the
hint names the part: nothing moved, no smoothing, no alpha, x and y swapped.
"""
from __future__ import annotations

import dataclasses

import torch

from ..stepwise import compare
from .checking import check

TOLERANCE = 1e-5


def _slips(images, noise, how):
    """What the usual mistakes give, each the library's distortion with one part changed."""
    from ..distorted import distort

    n, _, h, w = images.shape
    swapped = noise.clone()
    swapped[:, :2 * h * w] = noise[:, :2 * h * w].reshape(n, 2, h, w).flip(1).reshape(n, -1)
    return [(images.clamp(0, 1), "nothing moved: add alpha x the smoothed field to where each pixel reads"),
            (distort(images, noise, dataclasses.replace(how, sigma=0.0)),
             "the field was not smoothed: every pixel moved on its own (smooth it with a Gaussian of width sigma)"),
            (distort(images, noise, dataclasses.replace(how, alpha=1.0)),
             "the field was not scaled: multiply the smoothed field by alpha (pixels)"),
            (distort(images, swapped, how), "x and y are swapped: channel 0 of the field moves x (the grid's last "
                                            "axis is x, then y)")]


def elastic(fn) -> bool | None:
    """Lesson 05b exercise: ``fn(images, noise, alpha, sigma)`` against the library's elastic distortion."""
    if fn is ...:
        return check("the elastic distortion", ..., None)
    from ..datasets import load_dataset
    from ..distorted import SIMARD_28, distort, uniform

    images = load_dataset("mnist_5k").x_test[:64]
    noise = uniform(2003, torch.arange(64), 2 * 28 * 28 + 5)
    reference = distort(images, noise, SIMARD_28)
    mine = fn(images.clone(), noise.clone(), alpha=SIMARD_28.alpha, sigma=SIMARD_28.sigma)
    if mine is None:                            # the body is still the placeholder ...
        return check("the elastic distortion", ..., None)
    if not isinstance(mine, torch.Tensor) or mine.shape != reference.shape:
        print(f"the elastic distortion: not quite: return a tensor of shape {tuple(reference.shape)} "
              f"(got {type(mine).__name__} {tuple(getattr(mine, 'shape', ()))})")
        return False
    said = compare([{"distorted digits": mine}], [{"distorted digits": reference}], names=("yours", "the library's"),
                   tolerance=TOLERANCE)
    if said.same:
        print(f"the elastic distortion: correct. {said}")
        return True
    for wrong, why in _slips(images, noise, SIMARD_28):
        if (mine - wrong).abs().max() <= TOLERANCE:
            print(f"the elastic distortion: not quite. {why}. ({said})")
            return False
    print(f"the elastic distortion: not quite. {said}")
    return False
