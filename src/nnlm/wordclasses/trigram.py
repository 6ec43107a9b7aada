"""Word classes refined by the class *trigram*'s likelihood (the trigram exchange of Martin, Liermann & Ney
1998), starting from the exchange algorithm's classes (nnlm.wordclasses.exchange, which sees class bigrams only).

Where the text's classes act through pairs of classes -- the next class depends on the classes of the two
words before, as in nnlm.data.synthetic's sources -- the bigram objective places many words by weak evidence:
on gen-2k (2,000 words, 40 classes, 240k tokens) the class trigram on exchange classes reaches valid 130, on
the source's true classes 110. This pass moves words to raise

    L = sum_{g1,g2,g3} f(N(g1, g2, g3)) - sum_{g1,g2} f(N(g1, g2, .)) - sum_g f(N(., ., g)),   f(x) = x log x,

the training log-likelihood (up to terms the classes do not change) of P(w_t | w_{t-2}, w_{t-1}) =
P(c(w_t) | c(w_{t-2}), c(w_{t-1})) P(w_t | c(w_t)) by relative frequency, counted over the T-2 trigrams of
train. Like the exchange algorithm it visits the words most frequent first; a word leaves its class (never
emptying it) and joins the class that gains the most, another class only if it gains more than 1e-9, so L
never decreases; no randomness. A word's gain for every candidate class at once comes from the trigrams
it touches (up to three per occurrence): one NumPy pass over [classes x those trigrams], the cells each
candidate would fill found by one sort. A loop over words, not tokens: about 2 s a pass on gen-2k.

Relative frequencies over K^3 cells overfit sparse real text (Brown's news texts: valid 166 -> 222), so a
caller keeps the refined classes only where they do better on held-out text (nnlm.neural.net.feature_init).
"""
from __future__ import annotations

import numpy as np

from nnlm.errors import NnlmError
from nnlm.wordclasses.exchange import STOP_MOVED_FRACTION, choose_class, xlogx

MAX_PASSES = 10
MAX_CLASSES = 400  # the K^3 trigram counts are one dense float64 table: 400 classes are 512 MB
BLOCK_CELLS = 1 << 22  # candidate classes x trigrams per sort (a frequent word touches many trigrams)


class _TrigramCounts:
    """N(g1, g2, g3), N(g1, g2, .), N(., ., g3) over the trigrams of train (indexed by their last position)."""

    def __init__(self, train: np.ndarray, classes: np.ndarray, k: int) -> None:
        self.train, self.classes, self.k = train, classes, k
        self.n3 = np.zeros(k ** 3)
        self.n2 = np.zeros(k * k)
        self.n1 = np.zeros(k)
        self.add(np.arange(2, len(train)), 1.0)

    def add(self, ends: np.ndarray, sign: float) -> None:
        """Count (sign 1) or uncount (-1) the trigrams ending at `ends` under the current classes."""
        k, tr, g = self.k, self.train, self.classes
        c1, c2, c3 = g[tr[ends - 2]], g[tr[ends - 1]], g[tr[ends]]
        np.add.at(self.n3, (c1 * k + c2) * k + c3, sign)
        np.add.at(self.n2, c1 * k + c2, sign)
        np.add.at(self.n1, c3, sign)

    def log_likelihood(self) -> float:
        """L of the module docstring."""
        return float(xlogx(self.n3).sum() - xlogx(self.n2).sum() - xlogx(self.n1).sum())

    def gains(self, word: int, ends: np.ndarray) -> np.ndarray:
        """L after putting `word` (already uncounted from the trigrams `ends`) in each class, minus L now:
        the candidate classes in blocks of at most BLOCK_CELLS (class, trigram) pairs."""
        k, tr, g = self.k, self.train, self.classes
        x1, x2, x3 = tr[ends - 2], tr[ends - 1], tr[ends]
        step = max(1, BLOCK_CELLS // max(1, len(ends)))
        out = np.empty(k)
        for lo in range(0, k, step):
            candidates = np.arange(lo, min(k, lo + step))[:, None]
            c1 = np.where(x1 == word, candidates, g[x1])
            c2 = np.where(x2 == word, candidates, g[x2])
            c3 = np.where(x3 == word, candidates, g[x3])
            out[lo:lo + len(candidates)] = (_cell_gains((c1 * k + c2) * k + c3, self.n3)
                                            - _cell_gains(c1 * k + c2, self.n2) - _cell_gains(c3, self.n1))
        return out


def _cell_gains(cells: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """sum over the distinct cells of each row of f(N + added) - f(N): [rows] for cells [rows, trigrams]."""
    rows, size = cells.shape[0], len(counts)
    keyed = (np.arange(rows)[:, None] * size + cells).ravel()
    distinct, added = np.unique(keyed, return_counts=True)
    cell = distinct % size
    return np.bincount(distinct // size, weights=xlogx(counts[cell] + added) - xlogx(counts[cell]), minlength=rows)


def refine_by_trigrams(train: np.ndarray, classes: np.ndarray, n_classes: int,
                       max_passes: int = MAX_PASSES) -> tuple[np.ndarray, list[float]]:
    """(classes, L before and after each pass): `classes` (every vocabulary word's, 0 .. K-1) with the words
    seen in train moved to raise the class trigram's training likelihood L; words unseen in train keep theirs."""
    train = np.asarray(train, dtype=np.int64)
    classes = np.array(classes, dtype=np.int64)
    if len(train) < 3:
        raise NnlmError("refining classes by trigrams needs at least three training tokens")
    if classes.min() < 0 or classes.max() >= n_classes:
        raise NnlmError(f"the classes to refine must be ids from 0 to {n_classes - 1}")
    if n_classes > MAX_CLASSES:
        raise NnlmError(f"refining {n_classes} classes by trigrams needs a table of {n_classes}^3 counts; it refines "
                        f"at most {MAX_CLASSES} classes")
    counts = _TrigramCounts(train, classes, n_classes)
    freq = np.bincount(train, minlength=len(classes))
    words = np.argsort(-freq, kind="stable")[: np.count_nonzero(freq)]
    by_word = np.argsort(train, kind="stable")
    starts = np.searchsorted(train[by_word], np.arange(len(classes) + 1))
    size = np.bincount(classes[freq > 0], minlength=n_classes)
    history = [counts.log_likelihood()]
    for _ in range(max_passes):
        moved = 0
        for word in words:
            a = classes[word]
            if size[a] == 1:
                continue
            at = by_word[starts[word]:starts[word + 1]]
            ends = np.unique(np.concatenate([at, at + 1, at + 2]))
            ends = ends[(ends >= 2) & (ends < len(train))]
            counts.add(ends, -1.0)
            b = choose_class(counts.gains(word, ends), a)
            classes[word] = b
            counts.add(ends, 1.0)
            if b != a:
                size[a] -= 1
                size[b] += 1
                moved += 1
        history.append(counts.log_likelihood())
        if moved < STOP_MOVED_FRACTION * len(words):
            break
    return classes, history
