"""Lines of handwritten digits: the insurance company's policy numbers, made from the real digits.

Introduced in lesson 12 (long lines: splitting the heads and the sequence).  The company reads
whole lines of handwriting, not single digits: a policy number is a line of ``k`` digits whose
last one is a *check digit*, written by the customer and so sometimes wrong.  Real schemes add
the digits up with weights (Luhn's, ISO 7064's); this company's is the simplest that still spans
the line: the check digit repeats the first.  Saying whether a line checks out means comparing
its two ends, as far apart as the line is long: what attention does, and, once lines grow long,
what makes a sequence split across ranks exchange its pieces (the first digit on the first rank,
the check digit on the last).

A line is read as tokens: each 8x8 digit is cut into 2x2 patches, 16 tokens of 4 pixels, left
to right along the line (a line of 32 digits is 512 tokens).  Lines are made on each rank, from
the *training* digits only, by a generator seeded with ``(seed, step)``: a line of any length
costs nothing to store, every rank can make the same batch without talking, and the test digits
are kept for ``test_lines``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data import Digits

PATCH = 2                                  # a token is a PATCH x PATCH square of pixels
SIDE = 8
TOKENS_PER_DIGIT = (SIDE // PATCH) ** 2    # 16
PIXELS_PER_TOKEN = PATCH * PATCH           # 4


@dataclass
class Lines:
    """A batch of lines: ``tokens`` (batch, k * 16, 4), each digit's label (batch, k), and whether the
    check digit is right (batch,): 1 where it is."""

    tokens: torch.Tensor
    digits: torch.Tensor
    valid: torch.Tensor

    @property
    def k(self) -> int:
        return self.digits.shape[1]


def check_digit(digits: torch.Tensor) -> torch.Tensor:
    """Lesson 12: the company's rule, given the line's other digits: the check digit repeats the first."""
    return digits[..., 0]


def to_tokens(images: torch.Tensor) -> torch.Tensor:
    """(batch, k, 8, 8) images as (batch, k * 16, 4) tokens: each digit's 2x2 patches row by row,
    digit after digit along the line."""
    b, k = images.shape[:2]
    n = SIDE // PATCH
    patches = images.reshape(b, k, n, PATCH, n, PATCH).permute(0, 1, 2, 4, 3, 5)
    return patches.reshape(b, k * TOKENS_PER_DIGIT, PIXELS_PER_TOKEN)


def make_lines(images: torch.Tensor, labels: torch.Tensor, idx: torch.Tensor, k: int, *, seed: int,
               invalid_fraction: float = 0.5) -> Lines:
    """Lesson 12: lines number ``idx`` of ``k`` digits, drawn from ``images`` (n, 1, 8, 8) with ``labels``.

    Line ``i`` is made by a generator seeded with ``(seed, i)`` alone: the first ``k - 1`` digits at
    random, then an image of the right check digit or, for ``invalid_fraction`` of the lines, of any
    other digit.  So a line is known by its number, as a sample is by its index: ranks that share
    out the numbers of a batch train on exactly the lines one process would."""
    if k < 2:
        raise ValueError(f"a line needs at least 2 digits (k - 1 digits and a check digit), got k={k}")
    by_label = [torch.nonzero(labels == d).flatten() for d in range(10)]
    chosen, valid = [], []
    for i in idx.tolist():
        g = torch.Generator().manual_seed(seed * 1_000_003 + i)
        first = torch.randint(len(labels), (k - 1,), generator=g)
        right = int(check_digit(labels[first]))
        ok = bool(torch.rand((), generator=g) >= invalid_fraction)
        want = right if ok else (right + int(torch.randint(1, 10, (), generator=g))) % 10   # any other digit
        pool = by_label[want]
        chosen.append(torch.cat([first, pool[torch.randint(len(pool), (1,), generator=g)]]))
        valid.append(int(ok))
    chosen = torch.stack(chosen)
    return Lines(to_tokens(images[chosen].squeeze(2)), labels[chosen], torch.tensor(valid))


def train_lines(data: Digits, batch: int, k: int, *, seed: int, step: int) -> Lines:
    """Lesson 12: step ``step``'s batch of lines (numbers ``step * batch`` onwards), from the training digits."""
    return make_lines(data.x_train, data.y_train, torch.arange(step * batch, (step + 1) * batch), k, seed=seed)


def test_lines(data: Digits, batch: int, k: int, seed: int = 0) -> Lines:
    """Lesson 12: a fixed batch of lines made from the test digits (never seen in training)."""
    return make_lines(data.x_test, data.y_test, torch.arange(batch), k, seed=seed + 7919)


def targets(lines: Lines) -> torch.Tensor:
    """Each line's digits and, last, whether it checks out: (batch, k + 1), one tensor to move about."""
    return torch.cat([lines.digits, lines.valid[:, None]], dim=1)


class LineData:
    """Lesson 12: the lines as the one loop's data (``loop.Run.batch`` asks ``train_batch(idx)``).

    The training set has no end: ``idx`` are line numbers.  The test lines are made once, from
    the test digits."""

    def __init__(self, digits: Digits, k: int, seed: int, test_size: int = 256):
        self.digits, self.k, self.seed = digits, k, seed
        test = test_lines(digits, test_size, k, seed)
        self.x_test, self.y_test = test.tokens, targets(test)

    def train_batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lines = make_lines(self.digits.x_train, self.digits.y_train, idx.cpu(), self.k, seed=self.seed)
        return lines.tokens, targets(lines)
