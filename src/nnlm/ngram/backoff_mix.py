"""Back-off models linearly interpolated into one back-off model, as SRILM's `ngram -mix-lm` does (static mixing).

For parts P_1 .. P_K with weights lambda_k (one global weight each) the merged model lists the union of the
parts' n-grams, and for every listed n-gram (h, w)

    p(w | h) = sum_k lambda_k P_k(w | h),       each P_k by its own back-off rule,

which is exactly the dynamic mixture (nnlm.mixture.Mixture) there. The back-off weight of each listed context c
is then recomputed so that P(. | c) sums to 1 over the vocabulary:

    b(c) = (1 - sum_{w: (c, w) listed} p(w | c)) / (1 - sum_{w: (c, w) listed} P(w | c'))  (c' = c less its 1st word)

so an n-gram absent from the union gets b(h) P(w | h') instead of the mixture's sum_k lambda_k b_k(h) P_k(w | h'):
the only place where the merged model and the dynamic mixture differ.

Vocabularies: the merged one is the union of the parts' words (the first part's in its order, then each new word in
the order of the parts). A part that does not list a word gives it probability 0, as SRILM's mixing does (the word
is in the merged vocabulary, so it is no longer that part's <unk>); each part's mass stays on its own words, so the
merged unigrams still sum to 1. Per-bucket weights have no static form and are refused.

Everything runs over whole orders at once in numpy (sorted packed keys, searchsorted, bincount): no loop per n-gram.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.ngram.arpa import MAX_BACKOFF, MIN_LOG10
from nnlm.ngram.backoff import BackoffModel, BackoffTables
from nnlm.ngram.keys import lookup, search

CHUNK = 1 << 20  # n-grams whose mixed probability is computed at once (bounds the temporaries)
EMPTY_MASS = 1e-12  # a context whose listed continuations leave less than this unlisted keeps back-off 1


def union_vocabulary(vocabs: Sequence[Vocabulary]) -> Vocabulary:
    """The first vocabulary's words in its order, then each other vocabulary's new words in its order."""
    if all(v.fingerprint == vocabs[0].fingerprint for v in vocabs[1:]):
        return vocabs[0]
    tokens = dict.fromkeys(vocabs[0].tokens)
    for v in vocabs[1:]:
        tokens.update(dict.fromkeys(v.tokens))
    return Vocabulary(tuple(tokens), unk=vocabs[0].unk)


def check_mergeable(parts: Sequence[LanguageModel], weights: np.ndarray | Sequence[float]) -> np.ndarray:
    """The weights as float64 [K] after checking that every part is a back-off model and the weights are one
    global set (not per bucket): an NnlmError in one line otherwise."""
    for part in parts:
        if not isinstance(part, BackoffModel):
            raise NnlmError(f"only back-off n-gram models (kn, ARPA files) can be merged into one ARPA file, not "
                            f"{part.kind_name()}: mix it dynamically (nnlm mix --save) instead")
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 1:
        raise NnlmError("per-bucket mixture weights (em-buckets) have no static back-off form: use --weights em or "
                        "fixed weights with --arpa")
    if len(w) != len(parts) or (w < 0).any() or not np.isclose(w.sum(), 1.0, atol=1e-6):
        raise NnlmError(f"a merge needs {len(parts)} non-negative weights summing to 1, got {w.tolist()}")
    return w


def part_log10(tables: BackoffTables, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log10 P(target | context) by the back-off rule of `tables`, for contexts of any width (the last words are
    used, up to the tables' order - 1) whose ids may be -1 (a word the tables do not know: 0 as a target, and no
    context holding it is listed); -inf where the probability is 0."""
    v = tables.vocab_size
    known = targets >= 0
    result = np.where(known, tables.log10_prob[0][np.maximum(targets, 0)], -np.inf)
    width = min(contexts.shape[1], tables.order - 1)
    for m in range(1, width + 1):  # P given the last m context words, from P given m - 1
        suffix = contexts[:, contexts.shape[1] - m:]
        hist = lookup(tables.keys, v, np.maximum(suffix, 0))
        hist = np.where((suffix >= 0).all(axis=1), hist, -1)
        listed = hist >= 0
        backoff = np.where(listed, tables.log10_backoff[m - 1][np.maximum(hist, 0)], 0.0)
        gram, hit = search(tables.keys[m], np.maximum(hist, 0) * v + np.maximum(targets, 0))
        hit &= listed & known
        result = np.where(hit, tables.log10_prob[m][gram], result + backoff)
    return result


class Scorer:
    """log10 P(w | h) of one set of back-off tables for contexts of one width at a time, in the compiled query engine
    of the tables cut at that width's order (built once per width) for rows whose ids the tables know, and by
    `part_log10` for the rest (or for all rows when the tables have no engine)."""

    def __init__(self, tables: BackoffTables) -> None:
        self.tables = tables
        self._cut: dict[int, BackoffTables] = {}

    def _engine(self, width: int):
        if width not in self._cut:
            t, upto = self.tables, width + 1
            self._cut[width] = t if upto == t.order else BackoffTables(t.vocab_size, t.keys[:upto], t.log10_prob[:upto],
                                                                      t.log10_backoff[:upto])
        return self._cut[width].query_engine()

    def log10(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        width = min(contexts.shape[1], self.tables.order - 1)
        engine = self._engine(width) if width else None
        if engine is None:
            return part_log10(self.tables, contexts, targets)
        ctx = np.ascontiguousarray(contexts[:, contexts.shape[1] - width:])
        known = (targets >= 0) & (ctx >= 0).all(axis=1)
        if known.all():
            return engine.log10_prob(ctx, np.ascontiguousarray(targets))
        out = np.empty(len(targets))
        out[known] = engine.log10_prob(ctx[known], targets[known])
        out[~known] = part_log10(self.tables, ctx[~known], targets[~known])
        return out


def _union_keys(parts: Sequence[BackoffModel], to_union: list[np.ndarray], v: int, order: int) -> list[np.ndarray]:
    """Packed keys of the union of the parts' n-grams, order by order (a k-gram's prefix is in the union's
    (k-1)-grams because it is in its part's)."""
    keys = [np.arange(v, dtype=np.int64)]
    for k in range(2, order + 1):
        found = []
        for part, ids in zip(parts, to_union, strict=True):
            if part.order < k:
                continue
            for start in range(0, len(part.tables.keys[k - 1]), CHUNK):
                grams = ids[part.tables.words(k, start, start + CHUNK)]
                prefix = lookup(keys, v, grams[:, :-1])
                if (prefix < 0).any():
                    raise NnlmError(f"a {k}-gram of a part has no listed context: its tables are not a back-off "
                                    "model (every n-gram's first n-1 words must be listed)")
                found.append(prefix * v + grams[:, -1])
        keys.append(np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64))
    return keys


def _mixed_log10(parts: Sequence[Scorer], from_union: list[np.ndarray], weights: np.ndarray,
                 grams: np.ndarray) -> np.ndarray:
    """log10 sum_k lambda_k P_k(w | h) for rows grams [N, k] = (h, w) in union ids."""
    total = np.zeros(len(grams))
    for part, ids, w in zip(parts, from_union, weights, strict=True):
        if w > 0:
            own = ids[grams]
            total += w * np.power(10.0, part.log10(own[:, :-1], own[:, -1]))
    with np.errstate(divide="ignore"):
        return np.maximum(np.log10(total), MIN_LOG10)


def _backoff_weights(tables: BackoffTables, m: int) -> np.ndarray:
    """log10 b(c) of every listed m-gram c, from the (m+1)-gram probabilities and the lower orders' back-offs."""
    v, keys = tables.vocab_size, tables.keys[m]
    merged = Scorer(BackoffTables(v, tables.keys[:m], tables.log10_prob[:m], tables.log10_backoff[:m]))
    listed_hi = np.zeros(len(tables.keys[m - 1]))
    listed_lo = np.zeros(len(tables.keys[m - 1]))
    for start in range(0, len(keys), CHUNK):
        stop = min(start + CHUNK, len(keys))
        context = keys[start:stop] // v
        grams = tables.words(m + 1, start, stop)
        lower = merged.log10(grams[:, 1:-1], grams[:, -1])  # P(w | c') of the merged model
        listed_hi += np.bincount(context, np.power(10.0, tables.log10_prob[m][start:stop]), len(listed_hi))
        listed_lo += np.bincount(context, np.power(10.0, lower), len(listed_lo))
    free_hi, free_lo = 1.0 - listed_hi, 1.0 - listed_lo
    out = np.zeros(len(listed_hi))
    room = (free_lo > EMPTY_MASS) & (free_hi > 0)
    out[room] = np.log10(free_hi[room] / free_lo[room])
    out[(free_lo > EMPTY_MASS) & (free_hi <= 0)] = -MAX_BACKOFF  # rounding: the listed words took all the mass
    return np.clip(out, -MAX_BACKOFF, MAX_BACKOFF)


def merge_backoff(parts: Sequence[LanguageModel], weights: np.ndarray | Sequence[float]) -> BackoffModel:
    """One back-off model equal to sum_k weights[k] parts[k] on every n-gram any part lists (module docstring)."""
    w = check_mergeable(parts, weights)
    backoff_parts: list[BackoffModel] = list(parts)  # type: ignore[arg-type]  (checked above)
    vocab = union_vocabulary([p.vocab for p in backoff_parts])
    v, order = len(vocab), max(p.order for p in backoff_parts)
    to_union = [np.array([vocab.id(t) for t in p.vocab.tokens], dtype=np.int64) for p in backoff_parts]
    from_union = []
    for ids in to_union:
        back = np.full(v, -1, dtype=np.int64)
        back[ids] = np.arange(len(ids))
        from_union.append(back)
    keys = _union_keys(backoff_parts, to_union, v, order)
    probs = [np.empty(len(k)) for k in keys]
    shape = BackoffTables(v, keys, probs, [np.zeros(len(k)) for k in keys])
    scorers = [Scorer(p.tables) for p in backoff_parts]
    for k in range(1, order + 1):
        for start in range(0, len(keys[k - 1]), CHUNK):
            grams = shape.words(k, start, start + CHUNK)
            probs[k - 1][start:start + len(grams)] = _mixed_log10(scorers, from_union, w, grams)
    for m in range(1, order):  # each order's back-offs need those of the orders below it
        shape.log10_backoff[m - 1] = _backoff_weights(shape, m)
    params = {"mixed": [p.params.get("arpa") or p.kind_name() for p in backoff_parts], "weights": w.tolist()}
    return BackoffModel(vocab, BackoffTables(v, keys, probs, shape.log10_backoff), params)
