"""The compiled query engine of the deleted-interpolation trigram (nnlm.ngram.interpolated).

The numpy path finds each row's bigram, trigram and context counts by searchsorted in sorted key
arrays (three binary searches, each ~20 dependent cache misses on Brown), then mixes the four
components with the bucket weights in a dozen temporaries. Here the three count tables are exact
hash maps (nnlm.ngram.hash_table.HashMap: one probe each, and the three probes are independent, so
their memory loads overlap) and one compiled loop computes the bucket and the mixture per row,
with the numpy path's formulas in its order of operations.

Built lazily at the first query; tables memory-mapped out of core (`--memory`) get an engine only
within engine_tables.MAPPED_MEMORY_BUDGET_BYTES, else they keep the numpy path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from nnlm.ngram.hash_table import KERNEL, PREFETCH_AHEAD, HashMap, _find, _home, _prefetch_slot, within_budget


@dataclass
class InterpolatedEngine:
    vocab_size: int
    train_tokens: int
    seen_buckets: int
    unigram: np.ndarray        # int64 [V] train counts
    bigram_totals: np.ndarray  # int64 [V]
    bigrams: HashMap           # prev * V + w -> count
    trigrams: HashMap          # (u * V + prev) * V + w -> count
    contexts: HashMap          # u * V + prev -> freq(u, prev) as a trigram context

    @property
    def nbytes(self) -> int:
        return self.bigrams.nbytes + self.trigrams.nbytes + self.contexts.nbytes

    def log_prob(self, weights: np.ndarray, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Natural-log probabilities of targets [N] given contexts [N, >= 2] (ids checked by the caller), with
        the model's bucket weights [buckets, 4] (given each call: EM may change them after the build)."""
        out = np.empty(len(targets), dtype=np.float64)
        _mixture_rows(self.vocab_size, float(self.train_tokens), self.seen_buckets, weights, self.unigram,
                      self.bigram_totals, self.bigrams.table, self.bigrams.cap, self.trigrams.table, self.trigrams.cap,
                      self.contexts.table, self.contexts.cap, np.ascontiguousarray(contexts[:, -2:], dtype=np.int64),
                      np.ascontiguousarray(targets, dtype=np.int64), out)
        return out

    def stream_log_prob(self, weights: np.ndarray, stream: np.ndarray, first: int, count: int, pad: int,
                        since_start: np.ndarray | None) -> np.ndarray:
        """Natural-log P of each token stream[first : first + count] (int64; IndexError if an id is outside V) given the
        two ids before it, `pad` before the stream's start and, with `since_start` (tokens of its own text before
        each token), before its text's start: `log_prob` of `contexts()` rows, without making the rows."""
        out = np.empty(count, dtype=np.float64)
        since = np.zeros(1, dtype=np.int64) if since_start is None else np.ascontiguousarray(since_start, np.int64)
        if not _stream_rows(self.vocab_size, float(self.train_tokens), self.seen_buckets, weights, self.unigram,
                            self.bigram_totals, self.bigrams.table, self.bigrams.cap, self.trigrams.table,
                            self.trigrams.cap, self.contexts.table, self.contexts.cap, stream, first, pad, since,
                            since_start is not None, out):
            raise IndexError(f"token ids must be in 0 .. {self.vocab_size - 1}")
        return out

    def texts_log_prob(self, weights: np.ndarray, start: np.ndarray, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """Natural-log P of each text ids[bounds[i] : bounds[i+1]], each after the context `start` [2]."""
        out = np.empty(len(bounds) - 1, dtype=np.float64)
        _texts_sums(self.vocab_size, float(self.train_tokens), self.seen_buckets, weights, self.unigram,
                    self.bigram_totals, self.bigrams.table, self.bigrams.cap, self.trigrams.table, self.trigrams.cap,
                    self.contexts.table, self.contexts.cap, start, ids, bounds, out)
        return out

    def text_log_prob(self, weights: np.ndarray, start: np.ndarray, ids: np.ndarray) -> float:
        """Sum of natural-log P of the stream `ids` after the context `start` [2]."""
        return _stream_sum(self.vocab_size, float(self.train_tokens), self.seen_buckets, weights, self.unigram,
                           self.bigram_totals, self.bigrams.table, self.bigrams.cap, self.trigrams.table,
                           self.trigrams.cap, self.contexts.table, self.contexts.cap, start, ids)


@numba.njit(inline="always")
def _get(table, cap, key):
    s = _find(table, 0, cap, key)
    return table[s, 1] if s >= 0 else 0


@numba.njit(inline="always")
def _mixture(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams, trigram_cap,
             context_map, context_cap, u, prev, w):
    """P(w | u, prev): InterpolatedTrigram.buckets and .components, row by row, in the same order."""
    context = u * v + prev
    tri_total = _get(context_map, context_cap, context)
    tri = _get(trigrams, trigram_cap, context * v + w)
    bi = _get(bigrams, bigram_cap, prev * v + w)
    bi_total = bigram_totals[prev]
    if bi_total <= 0:
        bucket = seen_buckets + 1
    elif tri_total <= 0:
        bucket = seen_buckets
    else:
        q = math.ceil(-math.log((1.0 + tri_total) / train_tokens))
        bucket = min(max(q, 0), seen_buckets - 1)
    a = weights[bucket]
    p = a[0] * (1.0 / v)
    p += a[1] * (unigram[w] / train_tokens)
    p += a[2] * (bi / max(bi_total, 1))
    p += a[3] * (tri / max(tri_total, 1))
    return p


@numba.njit(inline="always")
def _prefetch_counts(v, bigrams, bigram_cap, trigrams, trigram_cap, context_map, context_cap, u, prev, w):
    """Start loading the three slots `_mixture` will probe for P(w | u, prev) (the probes of a few rows
    ahead then overlap this row's work)."""
    context = u * v + prev
    _prefetch_slot(context_map, _home(context, 0, context_cap))
    _prefetch_slot(trigrams, _home(context * v + w, 0, trigram_cap))
    _prefetch_slot(bigrams, _home(prev * v + w, 0, bigram_cap))


@numba.njit(**KERNEL)
def _mixture_rows(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams,
                  trigram_cap, context_map, context_cap, contexts, targets, out):
    for i in range(len(targets)):
        ahead = i + PREFETCH_AHEAD
        if ahead < len(targets):
            _prefetch_counts(v, bigrams, bigram_cap, trigrams, trigram_cap, context_map, context_cap,
                             contexts[ahead, 0], contexts[ahead, 1], targets[ahead])
        out[i] = math.log(_mixture(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap,
                                   trigrams, trigram_cap, context_map, context_cap, contexts[i, 0], contexts[i, 1],
                                   targets[i]))


@numba.njit(inline="always")
def _before(stream, t, back, pad, since, i, use_since):
    """The id `back` tokens before stream[t]: `pad` before the stream's start or (use_since) its text's start."""
    if t - back < 0 or (use_since and since[i] < back):
        return pad
    return stream[t - back]


@numba.njit(**KERNEL)
def _stream_rows(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams,
                 trigram_cap, context_map, context_cap, stream, first, pad, since, use_since, out):
    if pad < 0 or pad >= v:
        return False
    for t in range(max(first - 2, 0), first + len(out)):
        if stream[t] < 0 or stream[t] >= v:
            return False
    for i in range(len(out)):
        ahead = i + PREFETCH_AHEAD
        if ahead < len(out):
            t = first + ahead
            _prefetch_counts(v, bigrams, bigram_cap, trigrams, trigram_cap, context_map, context_cap,
                             _before(stream, t, 2, pad, since, ahead, use_since),
                             _before(stream, t, 1, pad, since, ahead, use_since), stream[t])
        t = first + i
        out[i] = math.log(_mixture(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap,
                                   trigrams, trigram_cap, context_map, context_cap,
                                   _before(stream, t, 2, pad, since, i, use_since),
                                   _before(stream, t, 1, pad, since, i, use_since), stream[t]))
    return True


@numba.njit(inline="always")
def _text_sum(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams,
                trigram_cap, context_map, context_cap, start, ids):
    u, prev = start[0], start[1]
    total = 0.0
    for t in range(len(ids)):
        ahead = t + PREFETCH_AHEAD
        if ahead < len(ids):  # (its context, ahead-2 and ahead-1, is inside the text: PREFETCH_AHEAD >= 2)
            _prefetch_counts(v, bigrams, bigram_cap, trigrams, trigram_cap, context_map, context_cap, ids[ahead - 2],
                             ids[ahead - 1], ids[ahead])
        total += math.log(_mixture(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap,
                                   trigrams, trigram_cap, context_map, context_cap, u, prev, ids[t]))
        u, prev = prev, ids[t]
    return total


@numba.njit(**KERNEL)
def _stream_sum(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams,
                trigram_cap, context_map, context_cap, start, ids):
    return _text_sum(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams,
                     trigram_cap, context_map, context_cap, start, ids)


@numba.njit(**KERNEL)
def _texts_sums(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap, trigrams,
                trigram_cap, context_map, context_cap, start, ids, bounds, out):
    for i in range(len(bounds) - 1):
        out[i] = _text_sum(v, train_tokens, seen_buckets, weights, unigram, bigram_totals, bigrams, bigram_cap,
                             trigrams, trigram_cap, context_map, context_cap, start, ids[bounds[i]:bounds[i + 1]])


def build_interpolated_engine(vocab_size: int, train_tokens: int, seen_buckets: int,
                              tables: dict[str, np.ndarray]) -> InterpolatedEngine | None:
    """The engine of an InterpolatedTrigram's tables, or None if it would not fit its memory budget."""
    sizes = [vocab_size, len(tables["bigram_keys"]), len(tables["trigram_keys"]), len(tables["context_keys"])]
    if not within_budget(list(tables.values()), sizes):
        return None
    return InterpolatedEngine(
        vocab_size, int(train_tokens), int(seen_buckets),
        np.ascontiguousarray(tables["unigram"], dtype=np.int64),
        np.ascontiguousarray(tables["bigram_totals"], dtype=np.int64),
        HashMap(tables["bigram_keys"], tables["bigram_counts"]),
        HashMap(tables["trigram_keys"], tables["trigram_counts"]),
        HashMap(tables["context_keys"], tables["context_totals"]))
