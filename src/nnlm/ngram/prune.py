"""Relative-entropy pruning of a back-off n-gram model (Stolcke 1998; SRILM's -prune).

Why: a Kneser-Ney model lists every n-gram seen in train, and most of them (the 4- and 5-grams seen
once) move its predictions very little; removing those keeps a fraction of the model for a small
loss in perplexity. KenLM prunes only by counts while it estimates; this prunes a finished model.

The criterion, for a listed n-gram (h, w), h' = h without its oldest word: once it is removed,
P'(w | h) = b'(h) P(w | h'), with the context's back-off weight recomputed so that P'(. | h) still sums to 1:

    b'(h) = (N(h) + P(w | h)) / (L(h) + P(w | h')),   N(h) = 1 - sum over listed (h, v) of P(v | h),
                                                       L(h) = 1 - sum over listed (h, v) of P(v | h'),
and the model's relative entropy grows by

    D = -P(h) [ P(w | h) (log P'(w | h) - log P(w | h)) + N(h) (log b'(h) - log b(h)) ].

P(h) is the product of the model's own probabilities of the history's words, each given the ones before
it (SRILM's default), or of a separate history model's (SRILM's -prune-history-lm; see `history_log10`).
An n-gram goes when exp(D) - 1, the relative growth of the training-set perplexity, is below the
threshold (SRILM's semantics: its typical thresholds are 1e-9 .. 1e-6). Every D of an order is
computed at once in numpy against the model as it is before that order is pruned (removals within
one context do not see each other, as in SRILM).

Orders are pruned from the highest down and unigrams never: an n-gram that is the context (prefix) or
the suffix of a kept higher-order n-gram is kept, so the result stays prefix- and suffix-closed like
every model nnlm estimates (packed keys need the prefixes; the compiled query engine and KenLM's
lookups stop at the first missing suffix). Then every back-off weight whose context lost a
continuation, or whose lower-order distribution changed, is recomputed from its definition, lowest
order first, so every context's distribution sums to 1; all other numbers are kept bit for bit.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.ngram.backoff import LN10, BackoffModel, BackoffTables

THRESHOLD_HINT = "SRILM's typical values are 1e-9 .. 1e-6"


@dataclass(frozen=True)
class Pruned:
    """A pruning's result: the model, the n-grams per order before and after, and its time."""

    model: BackoffModel
    before: list[int]
    after: list[int]
    seconds: float


def check_threshold(threshold: object) -> float:
    """The threshold as a float, or an NnlmError: it must be a finite number above 0."""
    try:
        value = float(threshold)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0.0):
        raise NnlmError(f"the pruning threshold must be a finite number above 0 ({THRESHOLD_HINT}), got {threshold!r}")
    return value


def cut(tables: BackoffTables, order: int) -> BackoffTables:
    """The model made of orders 1..order of `tables` (arrays shared, no engine)."""
    return BackoffTables(tables.vocab_size, tables.keys[:order], tables.log10_prob[:order],
                         tables.log10_backoff[:order])


def lower_log10(tables: BackoffTables, grams: np.ndarray) -> np.ndarray:
    """log10 P(w | h') of each row (h, w) of grams [N, k]: the back-off rule over orders 1..k-1."""
    k = grams.shape[1]
    return cut(tables, k - 1).reference_log10_prob_of(grams[:, 1:k - 1], grams[:, k - 1])


def own_history_log10(tables: BackoffTables, k: int) -> np.ndarray:
    """log10 P(h) of every listed (k-1)-gram h under the model itself: each factor P(h_i | h_1..h_i-1) is
    the probability of a listed entry (every prefix of a listed n-gram is listed), summed along the chain."""
    out = tables.log10_prob[0]
    for j in range(2, k):
        out = out[tables.keys[j - 1] // tables.vocab_size] + tables.log10_prob[j - 1]
    return out


def history_log10(history: BackoffModel, tables: BackoffTables, k: int) -> np.ndarray:
    """log10 P(h) of every listed (k-1)-gram h under another back-off model over the same ids (SRILM's
    -prune-history-lm): the sum of log10 P(h_i | h_1..h_i-1), each by the history model cut to order i,
    so that P(h_1) is its unigram marginal and not a probability after some start of text."""
    words = tables.words(k - 1)
    total = np.zeros(len(words))
    for i in range(k - 1):
        upto = min(i + 1, history.order)
        total += cut(history.tables, upto).reference_log10_prob_of(words[:, i + 1 - upto:i], words[:, i])
    return total


def removal_cost(tables: BackoffTables, k: int, context_log10: np.ndarray) -> np.ndarray:
    """exp(D) - 1 of each listed k-gram (k >= 2): the relative perplexity growth of removing it alone.
    `context_log10`: log10 P(h) of every listed (k-1)-gram. NaN (kept) where a context has no mass left."""
    v = tables.vocab_size
    context = tables.keys[k - 1] // v
    contexts = len(tables.keys[k - 2])
    log_p = tables.log10_prob[k - 1]
    log_q = lower_log10(tables, tables.words(k))
    p, q = np.power(10.0, log_p), np.power(10.0, log_q)
    left = 1.0 - np.bincount(context, weights=p, minlength=contexts)       # N(h)
    lower_left = 1.0 - np.bincount(context, weights=q, minlength=contexts)  # L(h)
    with np.errstate(divide="ignore", invalid="ignore"):
        new_backoff = np.log10(left[context] + p) - np.log10(lower_left[context] + q)
        change = (p * (log_q + new_backoff - log_p)
                  + left[context] * (new_backoff - tables.log10_backoff[k - 2][context]))
        return np.expm1(-np.power(10.0, context_log10[context]) * change * LN10)


def suffix_index(tables: BackoffTables, k: int) -> np.ndarray:
    """Index among the (k-1)-grams of each listed k-gram's suffix (its newest k-1 words); -1 if not listed."""
    return tables.index(tables.words(k)[:, 1:])


def choose(tables: BackoffTables, threshold: float, history: BackoffModel | None = None) -> list[np.ndarray]:
    """Which entries of each order stay (bool masks), deciding the highest order first."""
    v, order = tables.vocab_size, tables.order
    keep = [np.ones(n, dtype=bool) for n in tables.sizes()]
    for k in range(order, 1, -1):
        context_log10 = (own_history_log10(tables, k) if history is None
                         else history_log10(history, tables, k))
        prunable = removal_cost(tables, k, context_log10) < threshold  # NaN compares False: kept
        if k < order:  # the context and the suffix of every kept (k+1)-gram stay
            above = np.flatnonzero(keep[k])
            prunable[tables.keys[k][above] // v] = False
            suffixes = suffix_index(tables, k + 1)[above]
            prunable[suffixes[suffixes >= 0]] = False
        keep[k - 1] = ~prunable
    return keep


def compact(tables: BackoffTables, keep: list[np.ndarray]) -> BackoffTables:
    """The kept entries, their packed keys renumbered to the kept contexts' new indices (order preserved)."""
    v = tables.vocab_size
    keys, probs, backoffs = [tables.keys[0]], [tables.log10_prob[0]], [tables.log10_backoff[0].copy()]
    for k in range(2, tables.order + 1):
        renumber = np.cumsum(keep[k - 2]) - 1
        old = tables.keys[k - 1][keep[k - 1]]
        keys.append(renumber[old // v] * v + old % v)
        probs.append(tables.log10_prob[k - 1][keep[k - 1]])
        backoffs.append(tables.log10_backoff[k - 1][keep[k - 1]])
    return BackoffTables(v, keys, probs, backoffs)


def changed_contexts(tables: BackoffTables, keep: list[np.ndarray], pruned: BackoffTables) -> list[np.ndarray]:
    """For each context order m = 1..order-1, which kept m-grams of `pruned` need their back-off weight
    recomputed: those that lost a continuation, and those whose suffix's distribution changed."""
    v = tables.vocab_size
    changed = []
    for m in range(1, tables.order):
        removed = tables.keys[m][~keep[m]] // v
        lost = np.zeros(len(tables.keys[m - 1]), dtype=bool)
        lost[removed] = True
        mask = lost[keep[m - 1]]
        if m > 1:
            suffix = suffix_index(pruned, m)
            below = changed[-1]
            # a suffix that is not listed (an input that was not suffix-closed): recomputed to be safe
            mask |= np.where(suffix >= 0, below[np.maximum(suffix, 0)], bool(below.any() or mask.any()))
        changed.append(mask)
    return changed


def renormalize(pruned: BackoffTables, changed: list[np.ndarray]) -> None:
    """Recompute, lowest order first, the back-off weight b(h) = N(h) / L(h) of every changed context in place,
    so that its distribution sums to 1 (a context whose listed words take all the mass keeps b = 1)."""
    v = pruned.vocab_size
    for m, mask in enumerate(changed, start=1):
        rows = np.flatnonzero(mask)
        if len(rows) == 0:
            continue
        entries = np.flatnonzero(mask[pruned.keys[m] // v])
        context = pruned.keys[m][entries] // v
        p = np.power(10.0, pruned.log10_prob[m][entries])
        q = np.power(10.0, lower_log10(pruned, pruned.words(m + 1)[entries]))
        contexts = len(pruned.keys[m - 1])
        left = 1.0 - np.bincount(context, weights=p, minlength=contexts)[rows]
        lower_left = 1.0 - np.bincount(context, weights=q, minlength=contexts)[rows]
        usable = (left > 0) & (lower_left > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            pruned.log10_backoff[m - 1][rows] = np.where(usable, np.log10(left / lower_left), 0.0)


def prune_tables(tables: BackoffTables, threshold: float,
                 history: BackoffModel | None = None) -> BackoffTables:
    """The pruned tables (see the module docstring); `tables` itself is not changed."""
    threshold = check_threshold(threshold)
    keep = choose(tables, threshold, history)
    if all(mask.all() for mask in keep):
        return BackoffTables(tables.vocab_size, list(tables.keys), list(tables.log10_prob),
                             list(tables.log10_backoff))
    pruned = compact(tables, keep)
    renormalize(pruned, changed_contexts(tables, keep, pruned))
    return pruned


def prune_model(model: LanguageModel, threshold: float, history: LanguageModel | None = None) -> Pruned:
    """Prune a back-off model (Kneser-Ney, an ARPA file) into a BackoffModel over the same vocabulary.
    `history`: a back-off model over the same vocabulary whose probabilities give P(h) (default: the model's own)."""
    threshold = check_threshold(threshold)
    if not isinstance(model, BackoffModel):
        raise NnlmError(f"only back-off n-gram models (kind kn, or an ARPA file) can be pruned, not a "
                        f"{model.kind_name()} model")
    if history is not None and not isinstance(history, BackoffModel):
        raise NnlmError(f"the history model must be a back-off n-gram model (kind kn, or an ARPA file), not a "
                        f"{history.kind_name()} model")
    if history is not None and history.vocab.fingerprint != model.vocab.fingerprint:
        raise NnlmError("the history model's vocabulary is not the pruned model's: give one built on the same corpus")
    started = time.perf_counter()
    tables = prune_tables(model.tables, threshold, history)
    seconds = time.perf_counter() - started
    params = {"pruned": {"threshold": threshold, "from_kind": model.kind_name(), "before": model.tables.sizes(),
                         "history": history is not None}}
    return Pruned(BackoffModel(model.vocab, tables, params), model.tables.sizes(), tables.sizes(), seconds)
