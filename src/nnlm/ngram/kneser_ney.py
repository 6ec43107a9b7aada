"""Interpolated modified Kneser-Ney (Chen & Goodman 1999), estimated as KenLM's lmplz does.

For an order-N model, with a(g) the adjusted count of the n-gram g:
  a(g) = c(g), its count in train, if g has order N;
  a(g) = the number of distinct words seen right before g (its continuation count), if shorter.
         The stream's start counts as one such word for the k-grams that open train, the way
         lmplz keeps raw counts for n-grams that start with <s>; so every seen k-gram has a >= 1.
Per order, three discounts from that order's counts-of-counts n_j (how many k-grams have a = j):
  Y = n1 / (n1 + 2 n2),  D_j = j - (j + 1) Y n_{j+1} / n_j   for j = 1, 2, 3 (D_3 serves all a >= 3).
Then, for context h (h' = h without its first word) and S(h) = sum over v of a(h v):
  p(w | h) = (a(h w) - D(a(h w))) / S(h) + gamma(h) p(w | h'),
  gamma(h) = (D_1 N_1(h) + D_2 N_2(h) + D_3 N_3+(h)) / S(h),
and the unigram level interpolates with the uniform 1/|V| over the whole vocabulary, so a word of V
never seen in train gets gamma() / |V| like every other unseen word.

In back-off form (what ARPA stores, and what BackoffTables scores) a listed n-gram keeps its
interpolated p and the back-off weight of a context is gamma(h): for an unseen h w the formula
above is exactly gamma(h) p(w | h').

Degenerate counts: on tiny data some n_j is 0, or a D_j falls outside (0, j], so the formula is
undefined or would give a negative probability. That order then uses lmplz's fallback discounts
0.5, 1, 1.5 (lmplz needs --discount_fallback for this; here it is automatic and recorded).
"""
from __future__ import annotations

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.ngram.backoff import BackoffModel, BackoffTables
from nnlm.ngram.counts import NgramCounts, count_ngrams
from nnlm.ngram.kn_discounts import Discounts, checked_ids, discounts_from


def adjusted_counts(counts: NgramCounts, ids: np.ndarray) -> list[np.ndarray]:
    """a(g) for every table entry: raw counts at the highest order, continuation counts below."""
    order = counts.order
    out = []
    for k in range(1, order + 1):
        if k == order:
            out.append(counts.counts[k - 1].copy())
            continue
        a = np.bincount(counts.suffix[k], minlength=len(counts.keys[k - 1])).astype(np.int64)
        opening = counts.index(np.asarray(ids[:k], dtype=np.int64)[None, :])[0]  # preceded by the start
        a[opening] += 1
        out.append(a)
    return out


def kneser_ney_tables(counts: NgramCounts, ids: np.ndarray) -> tuple[BackoffTables, list[Discounts]]:
    """Estimate the interpolated model from counts of `ids` and put it in back-off form.

    Consumes `counts`: the tables an order no longer needs are released as soon as it is done, and
    each order's probabilities become log10 in place once the next order has used them, so the peak
    holds little more than the model (large corpora; the arithmetic is unchanged, bit for bit)."""
    v, order = counts.vocab_size, counts.order
    adjusted = adjusted_counts(counts, ids)
    counts.counts = []  # the adjusted counts replace them
    discounts = [discounts_from(a) for a in adjusted]
    seen_words = counts.keys[0]  # order-1 table index -> word id

    # Unigrams over the whole vocabulary, interpolated with the uniform distribution.
    a1 = np.zeros(v, dtype=np.int64)
    a1[seen_words] = adjusted[0]
    total = float(a1.sum())
    gamma = float(discounts[0].of(a1).sum()) / total
    probs = [(a1 - discounts[0].of(a1)) / total + gamma / v]
    gammas: list[np.ndarray] = []
    empty = np.empty(0, dtype=np.int64)

    for k in range(2, order + 1):
        a, adjusted[k - 1] = adjusted[k - 1], empty
        ctx = counts.prefix[k - 1]  # index of each entry's context in order k-1
        n_ctx = len(counts.keys[k - 2])
        mass = np.bincount(ctx, weights=a, minlength=n_ctx)
        discount = discounts[k - 1].of(a)
        left = np.bincount(ctx, weights=discount, minlength=n_ctx)
        g = np.divide(left, mass, out=np.ones(n_ctx), where=mass > 0)  # contexts never continued: 1
        # p = (a - D(a)) / mass[ctx] + g[ctx] * lower, with one temporary at a time
        p = a - discount
        del a, discount, left
        p /= mass[ctx]
        del mass
        below = counts.suffix[k - 1]
        lower = probs[-1][seen_words[below]] if k == 2 else probs[-1][below]
        del below
        weight = g[ctx]
        counts.prefix[k - 1] = counts.suffix[k - 1] = empty
        del ctx
        weight *= lower
        del lower
        p += weight
        del weight
        np.log10(probs[-1], out=probs[-1])  # order k-1 is final: log10 in place
        probs.append(p)
        gammas.append(g)
    np.log10(probs[-1], out=probs[-1])

    keys = [np.arange(v, dtype=np.int64)]
    if order >= 2:  # bigram keys: re-key the prefix from order-1 table index to word id (order kept)
        bigram = counts.keys[1]
        keys.append(seen_words[bigram // v] * v + bigram % v)
    keys += [counts.keys[k - 1] for k in range(3, order + 1)]
    backoffs = []
    for k in range(1, order + 1):
        if k == order:
            backoffs.append(np.zeros(len(keys[k - 1])))
        elif k == 1:
            b = np.ones(v)
            b[seen_words] = gammas[0]
            backoffs.append(np.log10(b))
        else:
            backoffs.append(np.log10(gammas[k - 1], out=gammas[k - 1]))
    return BackoffTables(v, keys, probs, backoffs), discounts


def fit_kneser_ney(ids: np.ndarray, order: int, vocab_size: int, memory_gb: float | None = None) -> BackoffTables:
    """Modified Kneser-Ney of `order` over an int id stream (ids in 0..vocab_size-1).

    The result scores with `log_prob(contexts, targets)` (natural log) and `distribution(contexts)`
    over all vocab_size ids; no Vocabulary needed (class-based models use it over class ids).
    `memory_gb`: count and estimate out of core within about that much memory (the same model,
    its tables memory-mapped; see nnlm.ngram.kneser_ney_disk)."""
    return _fit(ids, order, vocab_size, memory_gb)[0]


def _fit(ids: np.ndarray, order: int, vocab_size: int,
         memory_gb: float | None = None) -> tuple[BackoffTables, list[Discounts]]:
    ids = checked_ids(ids, order, vocab_size, memory_gb)
    if memory_gb is not None:
        from nnlm.ngram.kneser_ney_disk import fit_kneser_ney_mapped  # it builds on this module

        return fit_kneser_ney_mapped(ids, order, vocab_size, memory_gb)
    return kneser_ney_tables(count_ngrams(ids, order, vocab_size), ids)


class KneserNeyModel(BackoffModel):
    """Interpolated modified Kneser-Ney over a Vocabulary (kind "kn"); saves as back-off tables."""

    kind = "kn"

    @classmethod
    def fit(cls, vocab: Vocabulary, train: np.ndarray, order: int,
            memory_gb: float | None = None) -> KneserNeyModel:
        tables, discounts = _fit(train, order, len(vocab), memory_gb)
        params = {"discounts": [[d.d1, d.d2, d.d3] for d in discounts],
                  "fallback_orders": [k + 1 for k, d in enumerate(discounts) if d.fallback]}
        return cls(vocab, tables, params)
