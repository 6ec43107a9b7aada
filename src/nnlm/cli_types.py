"""argparse `type=` functions that range-check numbers as they are parsed, so a bad value is a
one-line usage error (exit 2) before any work starts instead of a traceback (or a million
processes) later. Every check refuses nan and inf and non-ASCII digits ('١٢' parses in Python).
"""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

_INT = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
SEED_MAX = 2**63 - 1  # numpy and torch both take seeds in [0, 2^64); one bound for all commands


def _int(text: str) -> int:
    if not _INT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(text)


def _float(text: str) -> float:
    if not _FLOAT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


parse_int = _int  # the number parsers, for nnlm.bounds (which checks the limits itself)
parse_float = _float


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An integer in [lo, hi] (hi None: no upper bound)."""
    def parse(text: str) -> int:
        value = _int(text)
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {_span(lo, hi)}, got {text}")
        return value
    parse.__name__ = "integer"  # argparse names the type in its message
    return parse


def float_range(lo: float, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """A finite number in [lo, hi] ((lo, hi] with lo_open)."""
    def parse(text: str) -> float:
        value = _float(text)
        if value < lo or (lo_open and value == lo) or (hi is not None and value > hi):
            low = f"> {lo:g}" if lo_open else f">= {lo:g}"
            raise argparse.ArgumentTypeError(f"must be {low}" + (f" and <= {hi:g}" if hi is not None else "")
                                             + f", got {text}")
        return value
    parse.__name__ = "number"
    return parse


def _span(lo: int, hi: int | None) -> str:
    return f"at least {lo:,}" if hi is None else f"between {lo:,} and {hi:,}"


positive_int = int_range(1)
seed = int_range(0, SEED_MAX)
threads = int_range(1, 1024)
procs = int_range(1, 256)         # local processes (--workers, --hogwild): a typo must not fork a million
ngram_order = int_range(1, 6)     # nnlm.ngram.counts.MAX_ORDER (not imported: parsing stays numpy-free)
count = positive_int              # a size or a number of things: 1 or more
positive_float = float_range(0.0, lo_open=True)
learning_rate = float_range(0.0, 1e6, lo_open=True)
seconds = float_range(0.0, 1e7, lo_open=True)
minutes = float_range(0.0, 60.0 * 24 * 365, lo_open=True)  # at most a year
finite_float = float_range(-math.inf)
