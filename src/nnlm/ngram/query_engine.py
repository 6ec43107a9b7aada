"""The compiled query engine of the back-off models (Kneser-Ney, ARPA files, the class model's class n-gram).

Why: BackoffTables looks an n-gram up with one searchsorted per word per order over the whole batch,
so a 5-gram query is ~15 binary searches and a dozen temporary arrays; KenLM does the same work with
about one hash probe per matched word. This module builds KenLM-like tables from BackoffTables once
(lazily) and scores in numba-compiled loops (docs/query-engine.md: why numba,
the measurements).

The tables: one open-addressing (linear probing) hash table per order k >= 2, all in one int64
array [slots, 3] of (key, log10 p as float64 bits, log10 back-off as float64 bits); the unigrams are
plain arrays indexed by word id. A k-gram's key is a 64-bit hash of its words built newest word first,
as KenLM's are:

    key(w_k) = mix(w_k),   key(w_j .. w_k) = extend(key(w_{j+1} .. w_k), w_j)

so extending a lookup by one older word is one multiply-xorshift step, and the keys of every order a
token needs are known before any probe: they are prefetched a few tokens ahead. The build refuses
(keeps the numpy path) if two listed n-grams of one order share a key; a query absent from the tables
matching a listed key has odds of about 2^-64 per probe (KenLM accepts the same). Lookups may stop at
their first miss only if every listed k-gram's suffix w_2..w_k is listed: `build_backoff_engine`
checks that the tables are suffix-closed (vectorized), as every model nnlm estimates is; a table that
is not (a pruned ARPA file from another tool) keeps the numpy path.

Scoring a stream carries state as KenLM does: the grams matched at position t (w_t, w_{t-1} w_t, ...)
are exactly the contexts whose back-offs position t+1 needs, so `score_rows` reuses them whenever a
row's context is the previous row's context shifted by the previous target (the rows `contexts()` makes
from a stream), and `advance` keeps them in the state. The log10 sums are added in the numpy path's
order, so both paths give the same log10 per row (Brown KN5 test: bit for bit).
"""
from __future__ import annotations

from dataclasses import fields

import numba
import numpy as np

from nnlm.ngram.engine_tables import EngineTables
from nnlm.ngram.hash_table import EMPTY, KERNEL, PREFETCH_AHEAD, _extend, _home_hashed, _prefetch_slot, _word_hash

# ---- the back-off engine -------------------------------------------------------------------------

class BackoffEngine(EngineTables):
    """The tables (nnlm.ngram.engine_tables.EngineTables) with the compiled queries on them."""

    def log10_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log10 P(target | context) for each row; contexts [N, >= order-1], oldest word first."""
        contexts = np.ascontiguousarray(contexts, dtype=np.int64)
        targets = np.ascontiguousarray(targets, dtype=np.int64)
        out = np.empty(len(targets), dtype=np.float64)
        _score_rows(*self._kernel_tables(), contexts, targets, out, self.fscratch, self.iscratch)
        return out

    def context_state(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What a state keeps so that its next step needs only the new word's lookups: log10 b of each row's
        context suffixes of length 1 .. order-1, float64 [N, order-1] (0 if not listed), and how many of
        them are listed, int64 [N]."""
        contexts = np.ascontiguousarray(contexts, dtype=np.int64)
        backoffs = np.zeros((len(contexts), self.order - 1), dtype=np.float64)
        lengths = np.zeros(len(contexts), dtype=np.int64)
        _context_backoffs(self.table, self.ftable, self.offsets, self.caps, self.unigram_backoff, self.order,
                          contexts, backoffs, lengths, self.fscratch, self.iscratch)
        return backoffs, lengths

    def advance(self, contexts: np.ndarray, backoffs: np.ndarray, lengths: np.ndarray,
                words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One step of B states: log10 P(words[i] | row i), and the rows' next contexts, back-offs and lengths
        (contexts int64 [B, order-1], back-offs float64 [B, order-1], lengths and words int64 [B], all
        C-contiguous). Raises IndexError if a word id is outside the vocabulary."""
        out = np.empty(len(words))
        next_contexts, next_backoffs, next_lengths = np.empty_like(contexts), np.empty_like(backoffs), \
            np.empty_like(lengths)
        if not _advance(*self._kernel_tables(), contexts, backoffs, lengths, words, out, next_contexts,
                                   next_backoffs,
                        next_lengths, self.fscratch, self.iscratch):
            raise IndexError(f"word ids must be in 0 .. {self.vocab_size - 1}")
        return out, next_contexts, next_backoffs, next_lengths

    def _start(self, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """The start context as [1, order-1], its back-offs and listed length (kept: a model has one start)."""
        key = start.tobytes()
        kept = self._starts.get(key)
        if kept is None:
            start2d = np.ascontiguousarray(start, dtype=np.int64).reshape(1, -1)
            backoffs, lengths = self.context_state(start2d)
            kept = self._starts[key] = (start2d, np.ascontiguousarray(backoffs[0]), int(lengths[0]))
        return kept

    def texts_log10(self, start: np.ndarray, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """log10 P of each text ids[bounds[i] : bounds[i+1]], each from the context `start` [order-1]."""
        out = np.empty(len(bounds) - 1, dtype=np.float64)
        ids = np.ascontiguousarray(ids, dtype=np.int64)[None, :]
        _texts_sums(*self._kernel_tables(), *self._start(start), ids,
                               np.ascontiguousarray(bounds, dtype=np.int64), out, self.fscratch, self.iscratch)
        return out

    def stream_log10(self, start: np.ndarray, ids: np.ndarray) -> float:
        """Sum of log10 P over the stream `ids` (int64) after the context `start` [order-1]: one text."""
        return _stream_sum(*self._kernel_tables(), *self._start(start), ids.reshape(1, -1), self.fscratch,
                           self.iscratch)


def with_kernels(tables: EngineTables) -> BackoffEngine:
    """The engine of tables loaded without numba (nnlm.ngram.engine_file), with the compiled queries: the same
    arrays and counters, in the class that has them."""
    if isinstance(tables, BackoffEngine):
        return tables
    return BackoffEngine(**{f.name: getattr(tables, f.name) for f in fields(tables)})


@numba.njit(inline="always")
def _prefetch_grams(table, offsets, caps, order, word, ctx, row, width):
    """Prefetch the first probe of every gram `_match` may look up for (word, ctx[row])."""
    h = _word_hash(word)
    for j in range(2, min(order, width + 1) + 1):
        h = _extend(h, ctx[row, width - (j - 1)])
        _prefetch_slot(table, _home_hashed(np.int64(h), offsets[j], caps[j]))


@numba.njit(inline="always")
def _match(table, ftable, offsets, caps, top, word, ctx, row, width, keys, homes):
    """Slots of word, ctx[row, width-1] word, ctx[row, width-2] ctx[row, width-1] word, ... up to `top` words
    into homes[j]; returns the length matched (the lookups stop at the first miss)."""
    top = min(top, width + 1)
    h = _word_hash(word)
    for j in range(2, top + 1):
        h = _extend(h, ctx[row, width - (j - 1)])
        keys[j] = np.int64(h)
        homes[j] = _home_hashed(keys[j], offsets[j], caps[j])
    matched = 1
    for j in range(2, top + 1):
        s = homes[j]
        end = offsets[j] + caps[j]
        while True:
            k = table[s, 0]
            if k == keys[j]:
                break
            if k == EMPTY:
                s = -1
                break
            s += 1
            if s == end:
                s = offsets[j]
        if s < 0:
            break
        homes[j] = s
        matched = j
    return matched


@numba.njit(inline="always")
def _gram_chain(table, ftable, offsets, caps, uprob, uback, order, word, ctx, row, width, known, chain, keys, homes):
    """Match word, ctx[row, width-1] word, ... (stopping at the first miss): returns (log10 p of the longest
    match, its length m). `known`: how many of the context's suffixes are listed; a longer gram cannot be
    (a listed gram's context is listed), so at most known + 1 words are looked up. chain[j-1] gets the
    back-off of the matched j-gram for j < order, 0 beyond the match: the next position's context back-offs."""
    m = _match(table, ftable, offsets, caps, min(order, known + 1), word, ctx, row, width, keys, homes)
    if order > 1:
        chain[0] = uback[word]
    for j in range(2, min(m, order - 1) + 1):
        chain[j - 1] = ftable[homes[j], 2]
    for j in range(m, order - 1):
        chain[j] = 0.0
    return (uprob[word] if m == 1 else ftable[homes[m], 1]), m


@numba.njit(inline="always")
def _context_row(table, ftable, offsets, caps, uback, order, ctx, row, width, backoffs, keys, homes):
    """backoffs[j-1] = log10 b(last j words of ctx[row]) for j = 1 .. order-1 (0 where not listed); returns
    how many of those suffixes are listed."""
    n1 = order - 1
    if n1 == 0:
        return 0
    word = ctx[row, width - 1]
    m = _match(table, ftable, offsets, caps, n1, word, ctx, row, width - 1, keys, homes)
    backoffs[0] = uback[word]
    for j in range(2, m + 1):
        backoffs[j - 1] = ftable[homes[j], 2]
    for j in range(m, n1):
        backoffs[j] = 0.0
    return m


@numba.njit(inline="always")
def _with_backoffs(p, m, backoffs, n1):
    """p plus the back-offs of the contexts longer than the match, added shortest first (the numpy order)."""
    for j in range(m, n1 + 1):
        p += backoffs[j - 1]
    return p


@numba.njit(**KERNEL)
def _score_rows(table, ftable, offsets, caps, uprob, uback, order, contexts, targets, out, fscratch, iscratch):
    n = len(targets)
    width = contexts.shape[1]
    n1 = order - 1
    backoffs, chain, keys, homes = fscratch[0], fscratch[1], iscratch[0], iscratch[1]
    m = 0
    for i in range(n):
        ahead = i + PREFETCH_AHEAD
        if ahead < n:
            _prefetch_grams(table, offsets, caps, order, targets[ahead], contexts, ahead, width)
            if n1 > 1 and contexts[ahead, width - 1] != targets[ahead - 1]:  # not carried: its context too
                _prefetch_grams(table, offsets, caps, n1, contexts[ahead, width - 1], contexts, ahead, width - 1)
        carried = i > 0 and n1 > 0 and contexts[i, width - 1] == targets[i - 1]
        if carried:
            for j in range(width - n1, width - 1):
                if contexts[i, j] != contexts[i - 1, j + 1]:
                    carried = False
                    break
        if carried:  # this row's context is the previous row's gram: its matches are this context's
            for j in range(n1):
                backoffs[j] = chain[j]
            known = min(m, n1)
        else:
            known = _context_row(table, ftable, offsets, caps, uback, order, contexts, i, width, backoffs, keys, homes)
        p, m = _gram_chain(table, ftable, offsets, caps, uprob, uback, order, targets[i], contexts, i, width, known,
                           chain, keys, homes)
        out[i] = _with_backoffs(p, m, backoffs, n1)


@numba.njit(**KERNEL)
def _context_backoffs(table, ftable, offsets, caps, uback, order, contexts, out, lengths, fscratch, iscratch):
    width = contexts.shape[1]
    row_out, keys, homes = fscratch[0], iscratch[0], iscratch[1]
    for i in range(len(contexts)):
        lengths[i] = _context_row(table, ftable, offsets, caps, uback, order, contexts, i, width, row_out, keys, homes)
        for j in range(order - 1):
            out[i, j] = row_out[j]


@numba.njit(**KERNEL)
def _advance(table, ftable, offsets, caps, uprob, uback, order, contexts, backoffs, lengths, words, out,
             next_contexts, next_backoffs, next_lengths, fscratch, iscratch):
    """One step of every row into the output arrays; False (nothing done) if a word id is outside the vocabulary."""
    n, width = contexts.shape
    n1 = order - 1
    for i in range(n):
        if words[i] < 0 or words[i] >= len(uprob):
            return False
    chain, keys, homes = fscratch[1], iscratch[0], iscratch[1]
    for i in range(n):
        ahead = i + PREFETCH_AHEAD
        if ahead < n:
            _prefetch_grams(table, offsets, caps, min(order, lengths[ahead] + 1), words[ahead], contexts, ahead, width)
        p, m = _gram_chain(table, ftable, offsets, caps, uprob, uback, order, words[i], contexts, i, width,
                           lengths[i], chain, keys, homes)
        for j in range(m, n1 + 1):
            p += backoffs[i, j - 1]
        out[i] = p
        for j in range(n1):
            next_backoffs[i, j] = chain[j]
        next_lengths[i] = min(m, n1)
        for j in range(width - 1):
            next_contexts[i, j] = contexts[i, j + 1]
        if width > 0:
            next_contexts[i, width - 1] = words[i]
    return True


@numba.njit(inline="always")
def _text_sum(table, ftable, offsets, caps, uprob, uback, order, start, start_backoffs, start_known, ids, lo, hi,
              fscratch, iscratch):
    """Sum of log10 P of the text ids[0, lo:hi] (ids is [1, N]) after the context start[0] ([1, order-1]), whose
    back-offs and listed length are start_backoffs and start_known. A position's context is read from `ids`
    itself once it has order-1 words there, else gathered into iscratch[2] from the start and the text."""
    n1 = order - 1
    backoffs, chain, keys, homes, window = fscratch[0], fscratch[1], iscratch[0], iscratch[1], iscratch[2:3]
    for j in range(n1):
        backoffs[j] = start_backoffs[j]
    known = start_known
    total = 0.0
    for t in range(lo, hi):
        ahead = t + PREFETCH_AHEAD
        if ahead < hi and ahead - lo >= n1:
            _prefetch_grams(table, offsets, caps, order, ids[0, ahead], ids, 0, ahead)
        if t - lo >= n1:
            p, m = _gram_chain(table, ftable, offsets, caps, uprob, uback, order, ids[0, t], ids, 0, t, known, chain,
                               keys, homes)
        else:
            for j in range(n1):  # the n1 words before t: the start's last ones, then the text's first
                k = t - n1 + j
                window[0, j] = ids[0, k] if k >= lo else start[0, n1 + k - lo]
            p, m = _gram_chain(table, ftable, offsets, caps, uprob, uback, order, ids[0, t], window, 0, n1, known,
                               chain, keys, homes)
        total += _with_backoffs(p, m, backoffs, n1)
        for j in range(n1):
            backoffs[j] = chain[j]
        known = min(m, n1)
    return total


@numba.njit(**KERNEL)
def _stream_sum(table, ftable, offsets, caps, uprob, uback, order, start, start_backoffs, start_known, ids,
                fscratch, iscratch):
    return _text_sum(table, ftable, offsets, caps, uprob, uback, order, start, start_backoffs, start_known, ids, 0,
                     ids.shape[1], fscratch, iscratch)


@numba.njit(**KERNEL)
def _texts_sums(table, ftable, offsets, caps, uprob, uback, order, start, start_backoffs, start_known, ids, bounds,
                out, fscratch, iscratch):
    for i in range(len(bounds) - 1):
        out[i] = _text_sum(table, ftable, offsets, caps, uprob, uback, order, start, start_backoffs, start_known, ids,
                           bounds[i], bounds[i + 1], fscratch, iscratch)


def build_backoff_engine(vocab_size: int, keys: list[np.ndarray], log10_prob: list[np.ndarray],
                         log10_backoff: list[np.ndarray]) -> BackoffEngine | None:
    """The engine of back-off tables in BackoffTables' packed form, or None if they are not suffix-closed
    or the engine would not fit its memory budget (the caller keeps its numpy path; nnlm.ngram.engine_build)."""
    from nnlm.ngram.engine_build import build_backoff_tables

    built = build_backoff_tables(vocab_size, keys, log10_prob, log10_backoff)
    if built is None:
        return None
    table, offsets, caps, seconds = built
    return BackoffEngine(len(keys), vocab_size, table, table.view(np.float64), offsets, caps,
                         np.ascontiguousarray(log10_prob[0], dtype=np.float64),
                         np.ascontiguousarray(log10_backoff[0], dtype=np.float64), seconds)
