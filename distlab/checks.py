"""The checks every setting gets before anything runs: a count is a whole number, a rate a positive one.

Introduced in lesson 01.  The core (the digits, the models) and every package that trains check their
settings the same way, with messages that name the setting; the checks of a whole job, against its
training function, are ``processes.arguments``'.
"""
from __future__ import annotations


def check_int(name: str, value, minimum: int = 1) -> None:
    """Lesson 01: ``value`` must be a whole number (not a bool, not 2.0) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what}, got {value!r}")


def check_positive(name: str, value, unit: str = "") -> None:
    """Lesson 01: ``value`` must be a number above zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number{unit}, got {value!r}")
