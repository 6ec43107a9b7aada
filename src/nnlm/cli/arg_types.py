"""argparse `type=` functions that range-check numbers as they are parsed, so a bad value is a
one-line usage error (exit 2) before any work starts instead of a traceback (or a million
processes) later. Every check refuses nan and inf and non-ASCII digits ('١٢' parses in Python).
"""
from __future__ import annotations

from collections.abc import Callable

from nnlm.bounds import SEED_MAX, Bounds, parse_float


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An integer in [lo, hi] (hi None: no upper bound): nnlm.bounds.Bounds' parser, the wording of every limit."""
    return Bounds(lo, hi, integer=True).parser()


def float_range(lo: float, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """A finite number in [lo, hi] ((lo, hi] with lo_open)."""
    return Bounds(lo, hi, lo_open=lo_open).parser()


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
finite_float = parse_float
