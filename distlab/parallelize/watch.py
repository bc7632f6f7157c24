"""What a transformer run writes down besides the loop's records: lessons 12 and 13 draw from it.

Introduced in lesson 12 (and 13 for the experts).  The one loop records every step's loss, times and
accuracy; the lessons about long lines and experts also show what happened *inside* a step, measured
on the ranks: the bytes the split blocks' collectives carried, each message of the ring, each rank's
attention time, the activations its forward kept for backward, the shape of what it holds at each
point of a block, and where the routers sent the tokens.  ``Watch`` takes these while the trainer's
step runs and puts them into the rank's record:

=============================  =====================================================================
``record.traffic``             bytes the latest step's collectives inside the blocks carried
``record.traffic_by_step``     the same, for every step (lesson 13's all-to-all over training)
``record.ring``                context parallelism: the latest step's messages, attention time,
                               blocks of scores, and the attention time of every step
``record.activation_bytes``    what the latest forward kept for backward (``sequence.memory``)
``record.shapes``              the shape this rank holds at each point of the first block
``record.routing``             experts: per step and block, tokens asked of and kept by each expert
``record.router``              experts: the first choice of every token of a few test lines
=============================  =====================================================================
"""
from __future__ import annotations

from ..sequence.memory import SavedTensors

POINTS = {"ln1": "LayerNorm 1", "attn.q": "Q", "attn": "attention out", "ln2": "LayerNorm 2",
          "mlp.fc1": "MLP hidden", "mlp": "MLP out"}
EXAMPLES = 4      # test lines whose tokens' first choices the record keeps (the router's picture)


def watch_shapes(block) -> list:
    """Lesson 12: the shape of the tensor this rank holds at each point of ``block`` (``POINTS``), from its
    first forward pass: which part of the line and of the width each rank keeps where."""
    shapes, hooks = [], []

    def hook(name):
        def note(module, args, out):
            if len(shapes) < len(points):
                shapes.append((POINTS[name], tuple(getattr(out, "_local_tensor", out).shape)))
            if len(shapes) == len(points):
                for h in hooks:
                    h.remove()
        return note

    points = [name for name in POINTS if _has(block, name)]    # (a mixture of experts has no fc1)
    for name in points:
        hooks.append(block.get_submodule(name).register_forward_hook(hook(name)))
    return shapes


def _has(module, name: str) -> bool:
    try:
        module.get_submodule(name)
        return True
    except AttributeError:
        return False


class Watch:
    """Lessons 12-13: the observations of one rank's run of the line reader (see the module's docstring)."""

    def __init__(self, model, layout, record):
        self.model, self.layout, self.record = model, layout, record
        self.experts = [b.mlp for b in model.blocks if hasattr(b.mlp, "last")]
        record.shapes = watch_shapes(model.blocks[0])          # filled by the first forward pass
        self.attention_by_step: list[float] = []

    def before(self) -> None:
        """A new step: forget the previous step's ring messages; note the bytes so far."""
        if self.layout.piece is not None:
            self.layout.piece.new_step()
        self.bytes_before = dict(self.layout.traffic.bytes)

    def forward(self):
        """The context the forward passes run in: it counts what they keep for backward."""
        self.saved = SavedTensors(self.model)
        return self.saved

    def after(self) -> None:
        """The step is done: its bytes, its ring, its activations, its routing."""
        record, piece = self.record, self.layout.piece
        record.traffic = {k: v - self.bytes_before[k] for k, v in self.layout.traffic.bytes.items()}
        record.traffic_by_step.append(dict(record.traffic))
        record.activation_bytes = self.saved.bytes
        if piece is not None:
            self.attention_by_step.append(piece.work)
            record.ring = {"bytes": dict(piece.bytes), "log": list(piece.log), "attention_seconds": piece.work,
                           "hops": list(getattr(piece, "hops", [])),      # lesson 15: each hop's compute and wait
                           "score_blocks": piece.blocks, "attention_seconds_by_step": list(self.attention_by_step),
                           "computed": sorted(piece.computed), "chunks": piece.tokens // piece.chunk}
        if self.experts:
            record.routing.append([{k: v for k, v in moe.last.items() if k != "choice"} for moe in self.experts])

    def finish(self, data) -> None:
        """After the test lines went through: which expert each block's router picked for the first
        ``EXAMPLES`` test lines' tokens (this rank's own tokens, where it holds a piece of the line)."""
        if not self.experts or self.layout.line_piece is not None:
            return
        tokens = EXAMPLES * data.x_test.shape[1]
        choices = [moe.last["choice"][:tokens].view(EXAMPLES, -1).clone() for moe in self.experts]
        self.record.router = {"experts": self.experts[0].cfg.experts, "tokens": data.x_test[:EXAMPLES].clone(),
                              "digits": data.y_test[:EXAMPLES].clone(), "choice": choices}
