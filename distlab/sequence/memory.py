"""Activation memory, counted: the bytes a rank's forward pass keeps for its backward pass.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  Between forward and
backward, every operation keeps what its gradient will need (a matrix product its inputs, softmax
its output, ...): the *activations*.  For long lines they, not the parameters, fill a rank's
memory, and the scores of attention grow with the square of the line.

``SavedTensors`` counts them as PyTorch itself sees them: ``torch.autograd.graph.saved_tensors_hooks``
is called for every tensor saved for backward, including those a hand-written
``autograd.Function`` saves (ring attention's).  A tensor saved twice, or a view of one already
counted, is counted once (by its storage), and the parameters are not activations, so they are left out.
``predict.activations.transformer_activation_bytes`` predicts the same count from the model's shapes.
"""
from __future__ import annotations

import torch


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's (PyTorch's tensor parallelism) own piece; any other tensor itself."""
    return getattr(t, "_local_tensor", t)


class SavedTensors:
    """Lesson 12: ``with SavedTensors(model) as saved: loss = ...`` then ``saved.bytes``: the bytes of
    distinct storages saved for backward during the block, parameters excluded."""

    def __init__(self, model: torch.nn.Module | None = None):
        self.skip = {_local(p).untyped_storage().data_ptr() for p in model.parameters()} if model else set()
        self.seen, self.bytes = set(), 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = _local(t).untyped_storage()
        key = storage.data_ptr()
        if key not in self.skip and key not in self.seen:
            self.seen.add(key)
            self.bytes += storage.nbytes()
        return t

    def __enter__(self) -> "SavedTensors":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
