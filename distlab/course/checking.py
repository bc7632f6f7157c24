"""How every exercise answers: not yet, right, or not quite and why (lesson 00; used by every checker).

A checker given the placeholder ``...`` prints "not answered yet" and returns None, so a lesson runs
from top to bottom before anyone has answered; a wrong answer is told what to look at (False); a
right one is confirmed (True).  Kept apart from ``exercises.py`` so that modules which check answers
by running them (``commands``, ``build``) can use it without importing every lesson's checkers.
"""
from __future__ import annotations

import math

import torch


def plain(text: str) -> str:
    """Lesson 00: a typed answer as the checkers compare it: lower case, hyphens and spaces alike."""
    return " ".join(text.lower().replace("-", " ").replace("_", " ").split())


def _canonical(answer, synonyms: dict | None):
    """Lesson 11: another name for the same answer ("data parallelism" for "data") becomes the answer."""
    if synonyms and isinstance(answer, str):
        return synonyms.get(plain(answer), answer)
    return answer


def check(exercise: str, answer, expected, *, hints=(), otherwise: str = "",
          tolerance: float = 0.0, synonyms: dict | None = None) -> bool | None:
    """Lesson 00: compare ``answer`` with ``expected`` and say so.

    ``hints`` pairs typical wrong answers with what they suggest went wrong (a dict or a list
    of pairs); ``otherwise`` is said for any other wrong answer.  Numbers agree within
    ``tolerance`` (relative); a string agrees whatever its spacing.
    """
    if answer is ...:
        print(f"{exercise}: not answered yet. Replace the ... with your answer and run the cell again.")
        return None
    answer = _canonical(answer, synonyms)
    if same(answer, expected, tolerance):
        print(f"{exercise}: correct.")
        return True
    for wrong, why in (hints.items() if isinstance(hints, dict) else hints):
        if same(answer, wrong, tolerance):
            print(f"{exercise}: not quite. {why}")
            return False
    print(f"{exercise}: not quite{': ' + otherwise if otherwise else '.'}")
    return False


def check_each(exercise: str, answers: dict, expected: dict, hints: dict[str, str],
               synonyms: dict | None = None) -> bool | None:
    """Lesson 01: ``check`` for answers with several parts (a dict); says which parts are wrong.
    An expected part may be a tuple: any of its answers is right."""
    if answers is not ... and not isinstance(answers, dict):
        print(f"{exercise}: not quite: answer with a dict, one entry for each of: {', '.join(expected)}.")
        return False
    if answers is ... or any(answers.get(k, ...) is ... for k in expected):
        missing = list(expected) if answers is ... else [k for k in expected if answers.get(k, ...) is ...]
        print(f"{exercise}: not answered yet ({', '.join(missing)}). Replace each ... with your answer.")
        return None
    wrong = [k for k in expected if not any(same(_canonical(answers[k], synonyms), e, 0.0) for e in
                                            (expected[k] if isinstance(expected[k], tuple) else (expected[k],)))]
    if not wrong:
        print(f"{exercise}: correct.")
        return True
    for k in wrong:
        print(f"{exercise}: {k} = {answers[k]!r} is not quite. {hints.get(k, '')}".rstrip())
    return False


def same(answer, expected, tolerance: float) -> bool:
    """Lesson 00: does ``answer`` say what ``expected`` says, in any form a learner may type it?

    Words agree whatever their case and spacing ("ZeRO" is "zero"); a whole number agrees whatever
    its type (NumPy's ``int64``, a float with no fraction); an array agrees with a tensor of the same
    values.  Anything else must be of the expected type."""
    import numbers

    import numpy as np

    if isinstance(expected, torch.Tensor):
        if isinstance(answer, np.ndarray):
            answer = torch.from_numpy(answer)
        return (isinstance(answer, torch.Tensor) and answer.shape == expected.shape
                and bool((answer.to(expected.dtype) - expected).abs().max()
                         <= 1e-6 + tolerance * expected.abs().max()))
    if isinstance(expected, bool) or isinstance(answer, bool):
        return isinstance(answer, (bool, np.bool_)) and isinstance(expected, bool) and bool(answer) == expected
    if isinstance(expected, numbers.Real) and isinstance(answer, numbers.Real):
        if isinstance(expected, numbers.Integral) and isinstance(answer, numbers.Integral):
            return int(answer) == int(expected)
        return math.isclose(float(answer), float(expected), rel_tol=tolerance or 1e-9)
    if isinstance(expected, str) and isinstance(answer, str):
        return plain(answer) == plain(expected)
    return type(answer) is type(expected) and answer == expected
