"""Building the back-off query engine's hash tables (nnlm.ngram.query_engine) from BackoffTables, in one
compiled pass per order.

Why a pass of its own: every face (`nnlm score`, the server, rescoring, `nnlm.use.score_lines`) now builds the
engine at a model's first query, so its build is part of the time to a first score. The build it replaced
found each k-gram's suffix by a binary search (numpy's searchsorted, ~1 s on Brown KN5) and checked the
keys for collisions by sorting them (np.unique, ~0.4 s); here, order by order:

- each k-gram's words are read from the (k-1)-gram it extends (its packed key's prefix) and its own last
  word: the entries are sorted by prefix, so this gather walks the table below in order;
- its key, KenLM-style (nnlm.ngram.hash_table: newest word first), and its suffix's key come from its
  words; the suffix w_2 .. w_k must be listed one order below (the tables must be suffix-closed for the
  lookups to stop at their first miss), which is one probe of the table already built there;
- it is inserted with its two values; a slot holding the same key means two listed k-grams share a
  64-bit hash (odds about n^2 / 2^65), and the build refuses, as it does for a table not suffix-closed:
  the model keeps its numpy path.

The probes and inserts are prefetched a few entries ahead, as the queries' are. Brown KN5: 2.4M n-grams,
110 MiB of tables, in ~0.2-0.3 s (docs/query-engine.md).
"""
from __future__ import annotations

import time

import numba
import numpy as np

from nnlm.ngram.hash_table import (
    EMPTY,
    KERNEL,
    _extend,
    _home_hashed,
    _prefetch_slot,
    _word_hash,
    capacity,
    huge_page_array,
    within_budget,
)

AHEAD = 8  # entries whose slots are prefetched ahead of the one being probed or inserted


def build_backoff_tables(vocab_size: int, keys: list[np.ndarray], log10_prob: list[np.ndarray],
                         log10_backoff: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """(table [slots, 3], offsets, caps, seconds) of back-off tables in BackoffTables' packed form, or None if
    they are not suffix-closed, two listed n-grams of one order share a key, or the tables would not fit the
    engine's memory budget (the caller keeps its numpy path)."""
    t0 = time.perf_counter()
    order, v = len(keys), vocab_size
    sizes = [len(k) for k in keys]
    if not within_budget(keys + log10_prob + log10_backoff, sizes):
        return None
    caps = np.asarray([0, 0] + [capacity(n) for n in sizes[1:]], dtype=np.int64)
    offsets = np.zeros(order + 1, dtype=np.int64)
    for k in range(2, order + 1):
        offsets[k] = offsets[k - 1] + caps[k - 1]
    table = huge_page_array((int(offsets[order]) + int(caps[order]) if order > 1 else 0, 3), np.int64, EMPTY)
    words = np.arange(v, dtype=np.int32)[:, None]  # the words of each entry of the order below, oldest first
    for k in range(2, order + 1):
        n = sizes[k - 1]
        grams = np.empty((n, k), dtype=np.int32)
        scratch = np.empty((2, n), dtype=np.int64)
        probs = np.ascontiguousarray(log10_prob[k - 1], dtype=np.float64).view(np.int64)
        backoffs = np.ascontiguousarray(log10_backoff[k - 1], dtype=np.float64).view(np.int64)
        if not _build_order(table, offsets, caps, k, v, np.ascontiguousarray(keys[k - 1], dtype=np.int64), words,
                            grams, scratch, probs, backoffs):
            return None
        words = grams
    return table, offsets, caps, time.perf_counter() - t0


@numba.njit(**KERNEL)
def _build_order(table, offsets, caps, k, v, keys, below, grams, scratch, probs, backoffs):
    """Order k's entries into its slots (see the module docstring); False if the tables are not suffix-closed
    or two of its keys are equal. `below`: the words of order k-1's entries; `grams` gets order k's."""
    n = len(keys)
    suffix_keys, full_keys = scratch[0], scratch[1]
    for i in range(n):
        prefix, last = keys[i] // v, keys[i] % v
        if prefix < 0 or prefix >= len(below) or last < 0:
            return False
        for j in range(k - 1):
            grams[i, j] = below[prefix, j]
        grams[i, k - 1] = last
        h = _word_hash(last)
        for j in range(k - 2, 0, -1):
            h = _extend(h, grams[i, j])
        suffix_keys[i] = np.int64(h)
        full_keys[i] = np.int64(_extend(h, grams[i, 0]))
    if k >= 3:  # the suffix w_2 .. w_k must be listed at order k-1 (a bigram's suffix is a word: always listed)
        lo, cap = offsets[k - 1], caps[k - 1]
        for i in range(n):
            if i + AHEAD < n:
                _prefetch_slot(table, _home_hashed(suffix_keys[i + AHEAD], lo, cap))
            s = _home_hashed(suffix_keys[i], lo, cap)
            while table[s, 0] != suffix_keys[i]:
                if table[s, 0] == EMPTY:
                    return False
                s = s + 1 if s + 1 < lo + cap else lo
    lo, cap = offsets[k], caps[k]
    for i in range(n):
        if i + AHEAD < n:
            _prefetch_slot(table, _home_hashed(full_keys[i + AHEAD], lo, cap))
        key = full_keys[i]
        if key == EMPTY:
            return False
        s = _home_hashed(key, lo, cap)
        while table[s, 0] != EMPTY:
            if table[s, 0] == key:
                return False
            s = s + 1 if s + 1 < lo + cap else lo
        table[s, 0] = key
        table[s, 1] = probs[i]
        table[s, 2] = backoffs[i]
    return True
