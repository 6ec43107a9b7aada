"""Word classes for class-based n-grams: the exchange algorithm (Kneser & Ney 1993; Martin,
Liermann & Ney 1998), which maximizes the training likelihood of the class bigram model

    P(w_t | w_{t-1}) = P(c(w_t) | c(w_{t-1})) * P(w_t | c(w_t)),   both by relative frequency.

With N(.) counts over the T-1 bigrams of train, that log-likelihood is

    sum_{g,h} f(N(g, h)) - sum_g f(N(g, .)) - sum_h f(N(., h)) + sum_w f(N(., w)),   f(x) = x log x,

and only the first three terms depend on the classes. The algorithm visits the words, most
frequent first; each word leaves its class and joins the one that gains the most (possibly
the same). The gain of every candidate class is computed at once from the class-bigram count
matrix and the word's counts with each class, so a pass is one Python step per word, each a
few NumPy operations over (classes x classes the word touches). Every move raises the
likelihood, so it never decreases from pass to pass. No randomness: the result is a function
of the corpus and c.

Words of the vocabulary never seen in train have no counts to place them by. A priori such a
word is like any vocabulary word, so they are dealt out to the classes in proportion to the
number of train words each class holds (largest remainders, in id order); the class model then
keeps some probability back for them inside their class.

A `deadline` (time.monotonic() seconds) cuts the passes short: the classes are then those of the
last word visited (every move so far raised the likelihood), `complete` is False, and handing the
result back as `resume_from` continues the passes where they stopped (`nnlm reproduce` does so).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from nnlm.errors import NnlmError

MAX_PASSES = 15
STOP_MOVED_FRACTION = 0.005  # stop once a pass moves fewer than this share of the words
CLOCK_EVERY = 64  # words between two looks at the deadline


def _xlogx(x: np.ndarray) -> np.ndarray:
    """x log x for counts (integers stored as floats), with 0 log 0 = 0."""
    return x * np.log(np.maximum(x, 1.0))


@dataclass
class WordClasses:
    """classes[w] = class id (0 .. n_classes-1) of word w; every class holds at least one train word."""

    classes: np.ndarray
    n_classes: int
    log_likelihood: list[float] = field(default_factory=list)  # mean per train bigram: start, then each pass
    moved: list[int] = field(default_factory=list)  # words that changed class in each pass
    complete: bool = True  # False: a deadline stopped the passes before the algorithm's own rule did

    @property
    def passes(self) -> int:
        return len(self.moved)


class _ClassBigramCounts:
    """Word bigram counts as successor and predecessor lists, and the class bigram matrix."""

    def __init__(self, train: np.ndarray, vocab_size: int) -> None:
        v = vocab_size
        first, second = train[:-1], train[1:]
        keys, counts = np.unique(first * v + second, return_counts=True)
        x, y, counts = keys // v, keys % v, counts.astype(np.float64)
        self.self_count = np.bincount(x[x == y], weights=counts[x == y], minlength=v)
        other = x != y
        x, y, counts = x[other], y[other], counts[other]
        # successors of w: succ_word[succ_ptr[w]:succ_ptr[w+1]] (keys are sorted by first word)
        self.succ_word, self.succ_count = y, counts
        self.succ_ptr = np.searchsorted(x, np.arange(v + 1))
        by_second = np.lexsort((x, y))
        self.pred_word, self.pred_count = x[by_second], counts[by_second]
        self.pred_ptr = np.searchsorted(y[by_second], np.arange(v + 1))
        self.left_total = np.bincount(first, minlength=v).astype(np.float64)  # N(w, .)
        self.right_total = np.bincount(second, minlength=v).astype(np.float64)  # N(., w)
        self.bigrams = len(first)

    def class_matrix(self, classes: np.ndarray, k: int) -> np.ndarray:
        m = np.zeros((k, k))
        x = np.repeat(np.arange(len(self.succ_ptr) - 1), np.diff(self.succ_ptr))
        np.add.at(m, (classes[x], classes[self.succ_word]), self.succ_count)
        words = np.flatnonzero(self.self_count)
        np.add.at(m, (classes[words], classes[words]), self.self_count[words])
        return m

    def neighbours(self, w: int, classes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Counts of w followed by each class, and of each class followed by w (w itself excluded)."""
        s, e = self.succ_ptr[w], self.succ_ptr[w + 1]
        right = np.bincount(classes[self.succ_word[s:e]], weights=self.succ_count[s:e], minlength=k)
        s, e = self.pred_ptr[w], self.pred_ptr[w + 1]
        left = np.bincount(classes[self.pred_word[s:e]], weights=self.pred_count[s:e], minlength=k)
        return right, left


def _initial_classes(freq: np.ndarray, seen: np.ndarray, k: int) -> np.ndarray:
    """Train words dealt out by decreasing frequency: the k most frequent each start a class,
    and every class gets a similar mix of frequent and rare words (-1 for unseen words)."""
    classes = np.full(len(freq), -1, dtype=np.int64)
    by_freq = seen[np.argsort(-freq[seen], kind="stable")]
    classes[by_freq] = np.arange(len(by_freq)) % k
    return classes


def deal_out(words: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """A class for each of `words`, class c getting a share proportional to weight[c] (largest remainders)."""
    share = weight / weight.sum() * len(words)
    n = np.floor(share).astype(np.int64)
    n[np.argsort(-(share - n), kind="stable")[:len(words) - n.sum()]] += 1
    return np.repeat(np.arange(len(weight)), n)


def exchange_clusters(train: np.ndarray, vocab_size: int, n_classes: int, max_passes: int = MAX_PASSES,
                      progress: bool = True, deadline: float | None = None,
                      resume_from: WordClasses | None = None) -> WordClasses:
    """Cluster the words of train into `n_classes` classes (fewer if train has fewer distinct words);
    `resume_from`: an incomplete result for the same train and c, whose passes are continued."""
    if not 1 <= n_classes <= vocab_size:
        raise NnlmError(f"the number of classes must be between 1 and |V| = {vocab_size:,}, got {n_classes:,}")
    train = np.asarray(train, dtype=np.int64)
    if len(train) < 2:
        raise NnlmError("clustering needs at least two training tokens")
    counts = _ClassBigramCounts(train, vocab_size)
    freq = np.bincount(train, minlength=vocab_size)
    seen = np.flatnonzero(freq)
    k = min(n_classes, len(seen))
    if resume_from is None:
        classes = _initial_classes(freq, seen, k)
        history: list[float] = []
        moved_per_pass: list[int] = []
    else:
        if resume_from.n_classes != k or len(resume_from.classes) != vocab_size:
            raise NnlmError(f"cannot continue a clustering into {resume_from.n_classes} classes of "
                            f"{len(resume_from.classes):,} words as one into {k} classes of {vocab_size:,}")
        classes = np.full(vocab_size, -1, dtype=np.int64)
        classes[seen] = resume_from.classes[seen]
        history, moved_per_pass = list(resume_from.log_likelihood[:-1]), list(resume_from.moved)
    m = counts.class_matrix(classes, k)
    left = m.sum(axis=1)  # N(g, .)
    right = m.sum(axis=0)  # N(., h)
    size = np.bincount(classes[seen], minlength=k)
    constant = _xlogx(counts.right_total).sum()

    def mean_log_likelihood() -> float:
        return float((_xlogx(m).sum() - _xlogx(left).sum() - _xlogx(right).sum() + constant) / counts.bigrams)

    history.append(mean_log_likelihood())
    order = seen[np.argsort(-freq[seen], kind="stable")]
    passes_left = max_passes - len(moved_per_pass)
    bar = tqdm(total=passes_left * len(order), desc=f"clustering into {k} classes", unit="word",
               disable=not progress, leave=False)
    complete = True
    for _ in range(passes_left):
        moved = 0
        for i, w in enumerate(order):
            if deadline is not None and i % CLOCK_EVERY == 0 and time.monotonic() >= deadline:
                complete = False
                break
            a = classes[w]
            bar.update(1)
            if size[a] == 1:  # keep every class non-empty
                continue
            r, lc = counts.neighbours(w, classes, k)
            s = counts.self_count[w]
            lw, rw = counts.left_total[w], counts.right_total[w]
            # take w out of its class
            m[a, :] -= r
            m[:, a] -= lc
            m[a, a] -= s
            left[a] -= lw
            right[a] -= rw
            # gain of putting w into each class b, all b at once
            dr, dl = np.flatnonzero(r), np.flatnonzero(lc)
            cols = m[:, dr]
            gain = (_xlogx(cols + r[dr]) - _xlogx(cols)).sum(axis=1)
            rows = m[dl, :]
            gain += (_xlogx(rows + lc[dl, None]) - _xlogx(rows)).sum(axis=0)
            diag = np.diagonal(m)  # the (b, b) cell gets r[b] + lc[b] + s, not the two parts separately
            gain += _xlogx(diag + r + lc + s) - _xlogx(diag + r) - _xlogx(diag + lc) + _xlogx(diag)
            gain -= _xlogx(left + lw) - _xlogx(left) + _xlogx(right + rw) - _xlogx(right)
            b = int(np.argmax(gain))
            if gain[b] <= gain[a] + 1e-9:
                b = a
            # and into its new class
            m[b, :] += r
            m[:, b] += lc
            m[b, b] += s
            left[b] += lw
            right[b] += rw
            if b != a:
                classes[w] = b
                size[a] -= 1
                size[b] += 1
                moved += 1
        if complete or i > 0:  # a pass the deadline cut counts as one if it visited any word
            history.append(mean_log_likelihood())
            moved_per_pass.append(moved)
        bar.set_postfix(moved=moved, log_likelihood=f"{history[-1]:.4f}")
        if not complete or moved < STOP_MOVED_FRACTION * len(order):
            break
    bar.close()

    unseen = np.flatnonzero(classes < 0)
    classes[unseen] = deal_out(unseen, size.astype(np.float64))
    return WordClasses(classes, k, history, moved_per_pass, complete)


def save_word_classes(path: Path | str, found: WordClasses, seconds: float) -> None:
    """Plain arrays in one .npz (written atomically): classes, per-pass history, completeness, and
    the seconds the clustering took so far, so that a later call reuses it or continues it."""
    from nnlm.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, classes=found.classes, n_classes=np.int64(found.n_classes),
                 log_likelihood=np.asarray(found.log_likelihood, dtype=np.float64),
                 moved=np.asarray(found.moved, dtype=np.int64), complete=np.bool_(found.complete),
                 seconds=np.float64(seconds))


def load_word_classes(path: Path | str) -> tuple[WordClasses, float] | None:
    """What `save_word_classes` wrote and its seconds; None if the file is missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            found = WordClasses(npz["classes"].astype(np.int64), int(npz["n_classes"]),
                                npz["log_likelihood"].tolist(), npz["moved"].tolist(), bool(npz["complete"]))
            return found, float(npz["seconds"])
    except (OSError, ValueError, KeyError):
        return None
