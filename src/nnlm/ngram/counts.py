"""N-gram counting in bulk with NumPy: every order up to `order` from one array of ids.

Each distinct k-gram gets an index in a table sorted lexicographically. A k-gram is packed into
one int64 key, (index of its (k-1)-gram prefix) * |V| + (its last word), so the keys of order k
are small whatever k and |V| are (they never overflow, unlike packing k words of log2|V| bits),
and sorting the keys sorts the k-grams lexicographically. Counting is np.unique over those keys:
no Python loop over tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.keys import lookup

MAX_ORDER = 6


@dataclass
class NgramCounts:
    """Distinct k-grams of train for k = 1..order, their counts, and links between orders.

    Tables are 0-based lists indexed by k-1:
      keys[k-1]    sorted int64 keys of the distinct k-grams (k = 1: the word ids themselves)
      counts[k-1]  how many times each occurs
      prefix[k-1]  index in order k-1 of the k-gram without its last word   (k >= 2)
      suffix[k-1]  index in order k-1 of the k-gram without its first word  (k >= 2)
    """

    vocab_size: int
    keys: list[np.ndarray]
    counts: list[np.ndarray]
    prefix: list[np.ndarray]
    suffix: list[np.ndarray]

    @property
    def order(self) -> int:
        return len(self.keys)

    def words(self, k: int) -> np.ndarray:
        """The distinct k-grams as an int64 array [U_k, k], in table order."""
        out = np.empty((len(self.keys[k - 1]), k), dtype=np.int64)
        rows = np.arange(len(self.keys[k - 1]))
        for j in range(k, 0, -1):  # walk prefixes back to the first word
            out[:, j - 1] = self.keys[j - 1][rows] % self.vocab_size
            if j > 1:
                rows = self.prefix[j - 1][rows]
        return out

    def index(self, grams: np.ndarray) -> np.ndarray:
        """Table index of each row of grams [N, k] in order k; -1 where the k-gram was never seen."""
        k = np.asarray(grams).shape[1]
        if not 1 <= k <= self.order:
            raise ValueError(f"can look up orders 1..{self.order}, not {k}")
        return lookup(self.keys, self.vocab_size, grams)

    def count(self, grams: np.ndarray) -> np.ndarray:
        """Occurrence count of each row of grams [N, k] (0 if unseen)."""
        idx = self.index(grams)
        k = np.asarray(grams).shape[1]
        return np.where(idx >= 0, self.counts[k - 1][np.maximum(idx, 0)], 0)


def count_ngrams(ids: np.ndarray, order: int, vocab_size: int) -> NgramCounts:
    """Count all k-grams (k = 1..order) of the id stream `ids`."""
    if not 1 <= order <= MAX_ORDER:
        raise NnlmError(f"n-gram order must be between 1 and {MAX_ORDER}, got {order}")
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) < order:
        raise NnlmError(f"cannot count {order}-grams in {len(ids)} tokens")
    keys, counts, prefix, suffix = [], [], [], []
    position_index = np.empty(0, dtype=np.int64)  # index of the (k-1)-gram starting at each position
    for k in range(1, order + 1):
        starts = len(ids) - k + 1
        key = ids[:starts] if k == 1 else position_index[:starts] * vocab_size + ids[k - 1:]
        uniq, first, inverse, cnt = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        keys.append(uniq)
        counts.append(cnt.astype(np.int64))
        if k == 1:
            prefix.append(np.empty(0, dtype=np.int64))
            suffix.append(np.empty(0, dtype=np.int64))
        else:
            prefix.append(uniq // vocab_size)
            suffix.append(position_index[first + 1])
        position_index = inverse.astype(np.int64).ravel()
    return NgramCounts(vocab_size, keys, counts, prefix, suffix)
