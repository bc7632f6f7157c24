"""What the one trainer trains: lesson 01's digits with the MLP or CNN, or lesson 12's lines with the transformer.

Introduced in lesson 12 (and used for lesson 01's models since issue 36).  The trainer, the transforms, the
loop and the micro-step are the same for every model; what differs is written here, once per workload:

===================  ============================================  ===========================================
                     ``Digits`` (model kind mlp, cnn)              ``Lines`` (model kind transformer)
===================  ============================================  ===========================================
the model            ``models.build_model``: a stack of layers     ``sequence.transformer``: embedding, blocks
                                                                   (experts in them when asked), read-out
the data             the 8x8 digits, held by every rank            lines of digits, made on the rank by number
a step's batch       its share of the step's shuffled batch        its share of the step's line numbers
the test             accuracy on the test digits                   digit accuracy (and the check's) on test lines
how a split joins    ``tensor.tensor_parallel.SPLIT``              ``tensor.heads_split.SPLIT``
===================  ============================================  ===========================================
"""
from __future__ import annotations

import torch

from ..data import global_batch, load_digits
from ..experts.moe import MoEConfig, add_experts
from ..models import build_model
from ..sequence.lines import LineData
from ..sequence.transformer import TransformerConfig, build_transformer, line_loss
from ..tensor import heads_split, tensor_parallel


class Digits:
    """Lesson 01: the MLP or the CNN reading single 8x8 digits."""

    split = tensor_parallel.SPLIT

    def __init__(self, spec):
        self.spec = spec
        self.data = load_digits()

    def build(self, device="cpu"):
        m = self.spec.model
        return build_model(m.kind, m.width, seed=self.spec.data.seed, depth=m.depth).to(device)

    def tensors(self, device):
        """The training images and labels (every rank holds them all: ``Run.x``, ``Run.y``)."""
        return self.data.x_train.to(device), self.data.y_train.to(device)

    def batches(self, share: tuple[int, int]):
        """Lesson 01: the sample numbers this rank trains at each step: its share of the step's global batch
        (the same shuffled batch one process takes, ``data.global_batch``)."""
        g, seed, (index, count) = self.spec.training.global_batch_size, self.spec.data.seed, share
        b, n = g // count, self.data.n_train
        return lambda step: global_batch(n, 1, g, step, seed=seed)[index * b:(index + 1) * b]

    def evaluate(self, model, device) -> tuple[float, dict]:
        out = model(self.data.x_test.to(device))
        return type(model).loss(out, self.data.y_test.to(device))[1], {}


class Lines:
    """Lesson 12: the transformer reading lines of digits, with experts when the spec has them (lesson 13)."""

    split = heads_split.SPLIT

    def __init__(self, spec):
        self.spec = spec
        self.data = LineData(load_digits(), spec.model.digits, spec.data.seed, test_size=spec.data.test_lines)

    def config(self) -> TransformerConfig:
        """Lesson 12: the transformer's own config (its width is d_model, its depth the blocks)."""
        m = self.spec.model
        return TransformerConfig(d_model=m.width, heads=m.heads, layers=m.depth, max_digits=m.digits, causal=m.causal)

    def build(self, device="cpu"):
        m = self.spec.model
        model = build_transformer(self.config(), seed=self.spec.data.seed)
        if m.experts:
            add_experts(model, MoEConfig(m.experts, m.top_k, m.capacity_factor, m.aux_weight, m.z_weight),
                        self.spec.data.seed)
        return model.to(device)

    def tensors(self, device):
        return None, None                  # lines are made batch by batch (``LineData.train_batch``)

    def batches(self, share: tuple[int, int]):
        """Lesson 12: the line numbers this rank trains at each step: its share of the step's global batch."""
        g, (index, count) = self.spec.training.global_batch_size, share
        b = g // count
        return lambda step: torch.arange(step * g + index * b, step * g + (index + 1) * b)

    def evaluate(self, model, device) -> tuple[float, dict]:
        _, digits, check = line_loss(*model(self.data.x_test.to(device)), self.data.y_test.to(device))
        return digits, {"test_check_accuracy": check}


def workload(spec):
    """Lesson 12: the workload of ``spec.model.kind``."""
    return Lines(spec) if spec.model.kind == "transformer" else Digits(spec)
