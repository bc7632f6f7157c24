"""A small transformer that reads lines of handwriting: each digit, and whether the line checks out.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  The model every
later split is measured against, written plainly: pre-norm blocks (LayerNorm, multi-head
attention, LayerNorm, MLP, each added back to the stream), attention as its three matrix
products (scores, softmax, weighted values) rather than a fused call, so that splitting it by
heads (tensor parallelism) or by the sequence (context parallelism) changes visible lines.

``causal=True`` lets each token see only the tokens before it (a model that reads the line as it is
written); then each digit is read at its last token.  The bidirectional model reads each digit as
the mean of its tokens.  Either way the check digit's reading also says whether the line checks
out: the check digit is where the line's two ends meet.
Sizes scale by ``TransformerConfig``: ``d_model``, ``heads``, ``layers``, ``max_digits``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .lines import PIXELS_PER_TOKEN, TOKENS_PER_DIGIT, Lines, targets


@dataclass(frozen=True)
class TransformerConfig:
    """Lesson 12: one place for the model's sizes (as nanoGPT's ``GPTConfig``)."""

    d_model: int = 64
    heads: int = 4
    layers: int = 2
    mlp_ratio: int = 4
    max_digits: int = 32          # positions: max_digits * 16 tokens
    causal: bool = False

    def __post_init__(self):
        for name in ("d_model", "heads", "layers", "mlp_ratio", "max_digits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} does not divide into {self.heads} heads")

    @property
    def positions(self) -> int:
        return self.max_digits * TOKENS_PER_DIGIT


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Lesson 12: softmax(q kᵀ / √d) v, per head: (batch, heads, tokens, head size) in and out.

    Written out (not ``scaled_dot_product_attention``): the scores are the (tokens x tokens)
    matrix whose size grows with the square of the line, the reason long lines are split."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Attention(nn.Module):
    """Lesson 12: multi-head self-attention with separate Q, K, V projections (split by heads in
    tensor parallelism: each rank keeps whole heads) and an output projection."""

    piece = None     # context parallelism: this rank's piece of the line (context_parallel.Piece)

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.heads, self.causal = cfg.heads, cfg.causal
        # no bias on K: it would add q.b to every score of a query alike, which softmax ignores, so its
        # gradient is zero but for rounding (and Adam would turn that rounding into real steps)
        self.q, self.v = nn.Linear(cfg.d_model, cfg.d_model), nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, heads, d // heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.mix(x))

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        """Every head's attention on ``x``, the heads side by side: all but the output projection.
        A tensor-parallel rank's Q, K and V hold its heads only: the heads are counted from them."""
        size = self.q.in_features // self.heads                      # one head's width
        q, k, v = (proj(x) for proj in (self.q, self.k, self.v))
        q, k, v = (self.split_heads(t, t.shape[-1] // size) for t in (q, k, v))
        return self.attend(q, k, v).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` on the line's keys: here, the keys given; with the line split across
        ranks (``context_parallel.Piece``), every rank's keys, reached as the piece decides."""
        return attention(q, k, v, self.causal) if self.piece is None else self.piece.attend(q, k, v, self.causal)


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.hidden(x))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc1(x))


class Block(nn.Module):
    """Lesson 12: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)) (pre-norm, as GPT-2)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.d_model), Attention(cfg)
        self.ln2, self.mlp = nn.LayerNorm(cfg.d_model), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


# the parameters that see the whole line even when a rank holds a piece of it (the read-out gathers it)
SEES_WHOLE_LINE = ("head.digits.", "head.check.")


class Embed(nn.Module):
    """Lesson 12: each token's pixels to the model's width, plus its position's embedding: the stack's
    first piece.  Split along the line (``piece``: context or sequence parallelism), a rank embeds only
    its own tokens."""

    piece = None

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.positions = cfg.positions
        self.proj = nn.Linear(PIXELS_PER_TOKEN, cfg.d_model)
        self.pos = nn.Embedding(cfg.positions, cfg.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.positions:
            raise ValueError(f"a line of {t} tokens is longer than the model's {self.positions} positions "
                             f"(max_digits={self.positions // TOKENS_PER_DIGIT})")
        if self.piece is not None and t != self.piece.tokens:
            raise ValueError(f"this model was split for lines of {self.piece.tokens} tokens, not {t}")
        where = (torch.arange(t) if self.piece is None else self.piece.mine).to(tokens.device)   # my tokens
        return self.proj(tokens[:, where]) + self.pos(where)


class ReadOut(nn.Module):
    """Lesson 12: the last LayerNorm, then each digit's reading and the line's check: the stack's last
    piece.  It needs the whole line, so a rank holding a piece gathers it first (``piece.whole_line``)."""

    piece = None

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.causal = cfg.causal
        self.ln = nn.LayerNorm(cfg.d_model)
        self.digits = nn.Linear(cfg.d_model, 10)
        self.check = nn.Linear(cfg.d_model, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.ln(x)
        x = x if self.piece is None else self.piece.whole_line(x)
        b, t, d = x.shape
        per_digit = x.view(b, t // TOKENS_PER_DIGIT, TOKENS_PER_DIGIT, d)
        # causal: only a digit's last token has seen all of it
        digits = per_digit[:, :, -1] if self.causal else per_digit.mean(dim=2)
        return self.digits(digits), self.check(digits[:, -1])


class LineReader(nn.Module):
    """Lesson 12: tokens (batch, k * 16, 4) in; each digit's logits (batch, k, 10) and the line's
    valid/invalid logits (batch, 2) out.  A stack of pieces, ``embed``, the blocks, ``head`` (the read-out),
    each taking the previous one's output: what a pipeline cuts into stages (``pieces``)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.head = ReadOut(cfg)

    def pieces(self) -> list[nn.Module]:
        """Lesson 06's view of the model: its pieces in order (a pipeline stage holds a run of them)."""
        return [self.embed, *self.blocks, self.head]

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = tokens
        for piece in self.pieces():
            x = piece(x)
        return x

    @staticmethod
    def loss(out, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Lesson 12: the model's own loss (``line_loss``) and its digit accuracy, for the one micro-step."""
        loss, digits, _ = line_loss(*out, y)
        return loss, digits

    def set_piece(self, piece, attention: bool = True) -> None:
        """Lesson 12: this rank holds ``piece`` of every line from the embedding to the read-out; with
        ``attention`` (context parallelism) its attention reaches the others' keys through it too."""
        self.embed.piece = self.head.piece = piece
        if attention:
            for block in self.blocks:
                block.attn.piece = piece

    @property
    def piece(self):
        return self.embed.piece


def build_transformer(cfg: TransformerConfig = TransformerConfig(), seed: int = 0,
                      dtype=torch.float32) -> LineReader:
    """Lesson 12: the model with weights drawn from ``seed`` (the same seed, the same model on every rank)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LineReader(cfg)
    return model.to(dtype)


def line_loss(digit_logits: torch.Tensor, check_logits: torch.Tensor,
              targets: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Lesson 12: the loss (each digit's cross-entropy plus the line's), the digit accuracy and the
    check accuracy (chance: 0.1 and 0.5); ``targets`` as ``lines.targets`` makes them."""
    digits, valid = targets[:, :-1], targets[:, -1]
    loss = F.cross_entropy(digit_logits.flatten(0, 1), digits.flatten()) + F.cross_entropy(check_logits, valid)
    digit_acc = (digit_logits.argmax(-1) == digits).float().mean().item()
    check_acc = (check_logits.argmax(-1) == valid).float().mean().item()
    return loss, digit_acc, check_acc


def loss_and_accuracy(model: nn.Module, lines: Lines) -> tuple[torch.Tensor, float, float]:
    """Lesson 12: ``line_loss`` of ``model`` on a batch of lines."""
    return line_loss(*model(lines.tokens), targets(lines))


def describe(cfg: TransformerConfig) -> dict:
    """The config as plain values (for records)."""
    return asdict(cfg)
