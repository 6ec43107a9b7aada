"""Lookups in sorted int64 key arrays, shared by every count-based model.

N-gram tables (counts, back-off tables, relative frequencies) keep their entries as sorted
packed keys; these helpers find many keys at once and expand many key ranges at once.
"""
from __future__ import annotations

import numpy as np


def search(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position of each key in `sorted_keys` and whether it is there (position is valid only then)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
    where = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return where, sorted_keys[where] == keys


def value_at(sorted_keys: np.ndarray, values: np.ndarray, keys: np.ndarray, default=0) -> np.ndarray:
    """values[i] where sorted_keys[i] == key, else `default`."""
    where, found = search(sorted_keys, keys)
    if len(values) == 0:
        return np.full(len(keys), default, dtype=values.dtype)
    return np.where(found, values[where], default)


def lookup(keys: list[np.ndarray], vocab_size: int, grams: np.ndarray) -> np.ndarray:
    """Index of each row of grams [N, k] among packed keys[k-1] (-1 if absent).

    keys[j] holds (index of the j-word prefix in keys[j-1]) * vocab_size + last word, sorted;
    keys[0] holds word ids. One searchsorted per word of the n-gram."""
    grams = np.asarray(grams, dtype=np.int64)
    idx, found = search(keys[0], grams[:, 0])
    for j in range(1, grams.shape[1]):
        idx, hit = search(keys[j], np.where(found, idx, 0) * vocab_size + grams[:, j])
        found &= hit
    return np.where(found, idx, -1)


def ranges(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All of arange(starts[i], stops[i]) concatenated, and the row i each element came from."""
    lengths = stops - starts
    rows = np.repeat(np.arange(len(starts)), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, np.repeat(starts, lengths) + offsets
