"""What both Kneser-Ney estimators share (in memory: kneser_ney; out of core: kneser_ney_disk): the
modified discounts of one order from its counts-of-counts, and the check of the id stream they take.
Apart from both so that each can import it without importing the other."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.counts import MAX_ORDER

FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


@dataclass(frozen=True)
class Discounts:
    """D_1, D_2, D_3+ of one order, and whether they are the fallback values."""

    d1: float
    d2: float
    d3: float
    fallback: bool = False

    def of(self, adjusted: np.ndarray) -> np.ndarray:
        """The discount taken from each adjusted count (0 for a count of 0)."""
        table = np.array([0.0, self.d1, self.d2, self.d3])
        return table[np.minimum(adjusted, 3)]


def discounts_from(adjusted: np.ndarray) -> Discounts:
    """Chen & Goodman's estimates from counts-of-counts of the (positive) adjusted counts."""
    return discounts_from_counts_of_counts(np.bincount(np.minimum(adjusted[adjusted > 0], 5), minlength=6))


def discounts_from_counts_of_counts(counts_of_counts: np.ndarray) -> Discounts:
    """The same, from n_0..n_5 (how many adjusted counts are 0, 1, .., 4, and 5 or more)."""
    n = np.asarray(counts_of_counts)[1:5].astype(np.float64)
    if np.all(n > 0):
        y = n[0] / (n[0] + 2.0 * n[1])
        d = [j - (j + 1) * y * n[j] / n[j - 1] for j in (1, 2, 3)]
        if all(0.0 < d[j - 1] <= j for j in (1, 2, 3)):
            return Discounts(*d)
    return Discounts(*FALLBACK_DISCOUNTS, fallback=True)


def checked_ids(ids: np.ndarray, order: int, vocab_size: int, memory_gb: float | None) -> np.ndarray:
    """The id stream as the estimators take it, or an NnlmError saying what is wrong."""
    if not 1 <= order <= MAX_ORDER:
        raise NnlmError(f"n-gram order must be between 1 and {MAX_ORDER}, got {order}")
    if memory_gb is not None and not memory_gb > 0:
        raise NnlmError(f"--memory must be a positive number of GB, got {memory_gb}")
    ids = np.asarray(ids) if memory_gb is not None else np.asarray(ids, dtype=np.int64)  # int32 ids stay as they are
    if ids.dtype.kind not in "iu":
        raise NnlmError("token ids must be integers")
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise NnlmError(f"token ids must lie in 0..{vocab_size - 1}")
    return ids
