"""The limits of a numeric option, declared once and applied wherever a value arrives.

A training option's value reaches nnlm three ways: parsed from the command line, passed to the library
(`nnlm.train(..., lr=...)`, `nnlm tune`), and read back from a run's run.json. One `Bounds` per option
(nnlm.neural.run.config declares them beside the option's default and help) checks all three, so a value
the command line refuses is refused by the library and by the run.json reader too, with the same words.
"""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from nnlm.errors import NnlmError

SEED_MAX = 2**63 - 1  # numpy and torch both take seeds in [0, 2^64); one bound for all commands
_INT = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def parse_int(text: str) -> int:
    """An integer written in ASCII digits ('١٢' parses in Python: refused), else argparse's type error."""
    if not _INT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(text)


def parse_float(text: str) -> float:
    """A finite number written in ASCII (never nan or inf), else argparse's type error."""
    if not _FLOAT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


@dataclass(frozen=True)
class Bounds:
    """A number in [lo, hi] (an open end with lo_open / hi_open; hi None: no upper bound); `integer`
    asks for an int (bools are refused either way)."""

    lo: float
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        """'an integer in [1, 16]', 'a finite number in (0, 10]', 'an integer >= 1'."""
        kind = "an integer" if self.integer else "a finite number"
        lo = self._show(self.lo)
        if self.hi is None:
            return f"{kind} {'>' if self.lo_open else '>='} {lo}"
        return f"{kind} in {'(' if self.lo_open else '['}{lo}, {self._show(self.hi)}{')' if self.hi_open else ']'}"

    def _show(self, x: float) -> str:
        return f"{int(x):,}" if self.integer else f"{x:g}"

    def holds(self, value: object) -> bool:
        """Whether `value` is a number of the right kind within the bounds."""
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if not math.isfinite(value) or value < self.lo or (self.lo_open and value == self.lo):
            return False
        return self.hi is None or value < self.hi or (value == self.hi and not self.hi_open)

    def check(self, name: str, value: object) -> None:
        """One-line NnlmError naming the option (`--lr`) unless `value` holds."""
        if not self.holds(value):
            raise NnlmError(f"{name} must be {self.describe()}, got {value!r}")

    def parser(self) -> Callable[[str], int | float]:
        """An argparse `type=`: the text as a number (ASCII digits only, never nan or inf), within the bounds."""
        convert = parse_int if self.integer else parse_float

        def parse(text: str) -> int | float:
            value = convert(text)
            if not self.holds(value):
                raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text}")
            return value
        parse.__name__ = "integer" if self.integer else "number"  # argparse names the type in its message
        return parse
