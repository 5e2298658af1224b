"""Validators for command-line values, shared by argparse (`llmbench ...`) and pytest's
options (the suite's flags), so that one mistake reads the same wherever it is made.

Each returns a callable for `type=`: it converts the text or raises
`argparse.ArgumentTypeError`, whose message argparse prints after the flag's name
(`argument --rounds: must be at least 1, got 0`). pytest parses its options with argparse,
so the same callables serve both.

May import: nothing of ours (like `llmbench.errors`, everything may import it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _named(check: Callable, name: str) -> Callable:
    check.__name__ = name  # argparse names the type in some of its own errors
    return check


def whole_number(minimum: int) -> Callable[[str], int]:
    """An integer >= `minimum`. A negative number or a non-number is not a whole number at
    all; a whole number below the minimum is told what the minimum is."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {minimum}, got {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return _named(check, "whole number")


def number(expected: str, is_valid: Callable[[float], bool], bound: str
           ) -> Callable[[str], float]:
    """A float: `expected` names it when the text is no number, `bound` when it is out of
    range, e.g. number("a number in (0, 1]", lambda v: 0 < v <= 1, "in (0, 1]")."""

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not is_valid(value):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return _named(check, "number")


def one_of(*choices: str) -> Callable[[str], str]:
    """One of fixed names, listed in the error."""

    def check(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of: {', '.join(choices)}")
        return text

    return _named(check, "choice")


def parsed_by(parse: Callable[[str], object], name: str) -> Callable[[str], object]:
    """A library parser that raises ValueError with its own message, as a `type=`."""

    def check(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return _named(check, name)


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text: str) -> float:
    """Seconds from '90s', '10m', '1.5h' or a bare number of seconds; must be > 0."""
    raw = text.strip().lower()
    scale = _DURATION_UNITS.get(raw[-1:], None)
    try:
        value = float(raw[:-1] if scale else raw) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 10m, 90s or 600, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return value


duration.__name__ = "duration"
