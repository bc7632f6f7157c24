"""Small models for the handwritten digits.

Introduced in lesson 01.  Both models are plain ``nn.Sequential`` stacks of named layers:
a reader sees every layer by name, and a model can be cut into consecutive pieces with
ordinary slicing (``model[:2]``, ``model[2:]``).

Every model distlab trains owns its loss (``Classifier.loss``; the line transformer of lesson 12 has
its own), so that the one micro-step (``train.step``) never names a loss function: a pipeline stage,
a data-parallel rank and one process all ask the model, as nanoGPT's model returns its own loss.

``width`` is the knob that changes how much compute each step does per byte of gradient,
which decides whether distributing pays (lesson "Does distributing pay?").
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Sequential):
    """Lesson 01: a stack of layers that reads a digit, and the loss it is trained on.  Slicing it
    (``model[2:5]``, a pipeline stage) gives a ``Classifier`` too, whose ``loss`` is the same."""

    @staticmethod
    def loss(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Lesson 01: the cross-entropy of the logits ``out`` against the labels ``y``, and the accuracy.
        (A plain function of the outputs: a pipeline's last stage uses it without holding the model.)"""
        return F.cross_entropy(out, y), (out.argmax(1) == y).double().mean().item()

    def pieces(self) -> list[nn.Module]:
        """Lesson 06: the layers in order, what a pipeline cuts into stages."""
        return list(self)


def mlp(width: int = 64, depth: int = 2, side: int = 8, classes: int = 10) -> Classifier:
    """Lesson 01: a multi-layer perceptron, ``depth`` hidden layers of ``width`` units."""
    layers: list[tuple[str, nn.Module]] = [("flatten", nn.Flatten())]
    fan_in = side * side
    for i in range(depth):
        layers += [(f"fc{i + 1}", nn.Linear(fan_in, width)), (f"relu{i + 1}", nn.ReLU())]
        fan_in = width
    layers.append(("out", nn.Linear(fan_in, classes)))
    return Classifier(OrderedDict(layers))


def cnn(width: int = 16, side: int = 8, classes: int = 10) -> Classifier:
    """Lesson 01: a small convolutional network (two 3x3 convolutions, one pooling)."""
    pooled = side // 2
    return Classifier(OrderedDict([
        ("conv1", nn.Conv2d(1, width, 3, padding=1)), ("relu1", nn.ReLU()),
        ("conv2", nn.Conv2d(width, 2 * width, 3, padding=1)), ("relu2", nn.ReLU()),
        ("pool", nn.MaxPool2d(2)), ("flatten", nn.Flatten()),
        ("out", nn.Linear(2 * width * pooled * pooled, classes)),
    ]))


MODELS = {"mlp": mlp, "cnn": cnn}
DTYPES = {"float32": torch.float32, "float64": torch.float64}   # the precisions a model is built in


def build_model(name: str = "mlp", width: int = 64, *, seed: int = 0, side: int = 8,
                dtype=torch.float32, depth: int = 2) -> Classifier:
    """Build a model with weights drawn from ``seed``: the same seed gives the same model.

    ``depth`` (the MLP's number of hidden layers) matters when the model is cut into
    pipeline stages (lesson 06): each stage needs at least one layer with weights.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    if name != "mlp" and depth != 2:
        raise ValueError(f"depth sets the MLP's hidden layers; the {name} has a fixed depth")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MODELS[name](width=width, side=side, **({"depth": depth} if name == "mlp" else {}))
    return model.to(dtype)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
