"""Word classes by the exchange algorithm (Kneser & Ney 1993; Martin, Liermann & Ney 1998), for the class
n-gram, the class-factored output layer and the class-tied feature rows alike: it maximizes the training
likelihood of the class bigram model

    P(w_t | w_{t-1}) = P(c(w_t) | c(w_{t-1})) * P(w_t | c(w_t)),   both by relative frequency.

With N(.) counts over the T-1 bigrams of train, that log-likelihood is

    sum_{g,h} f(N(g, h)) - sum_g f(N(g, .)) - sum_h f(N(., h)) + sum_w f(N(., w)),   f(x) = x log x,

and only the first three terms depend on the classes. The algorithm visits the words, most
frequent first; each word leaves its class and joins the one that gains the most (possibly
the same; the first of equals; another class only if it gains more than 1e-9). The gain of every
candidate class comes from the class-bigram count matrix and the word's counts with each class.
Every move raises the likelihood, so it never decreases from pass to pass. No randomness: the
result is a function of the corpus and c.

Two paths compute the moves. `exchange_clusters_reference` is one Python step per word, a few
NumPy operations over (classes x classes the word touches); `exchange_clusters` does the same
in compiled loops (exchange_kernels.py; Brown into 150 .. 2000 classes in 40 s, not 7 min: docs/performance.md)
and gives the same classes: the counts are integers in both, and a word whose decision float
rounding could change (a near tie, bounded rigorously) is decided by the reference's formula.

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

from nnlm.errors import NnlmError
from nnlm.progress import show_progress
from nnlm.wordclasses import exchange_kernels as kernels

MAX_PASSES = 15
STOP_MOVED_FRACTION = 0.005  # stop once a pass moves fewer than this share of the words
CLOCK_EVERY = 64  # words between two looks at the deadline
THRESHOLD = kernels.THRESHOLD  # a word moves only if its best class gains more than this over staying


def xlogx(x: np.ndarray) -> np.ndarray:
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


@dataclass
class _Start:
    """What both paths start from: the counts, the classes, the history so far and the visiting order."""

    counts: _ClassBigramCounts
    classes: np.ndarray  # -1 for words never seen in train
    k: int
    seen: np.ndarray
    order: np.ndarray  # the train words, most frequent first
    history: list[float]
    moved: list[int]


def _start(train: np.ndarray, vocab_size: int, n_classes: int, resume_from: WordClasses | None) -> _Start:
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
    order = seen[np.argsort(-freq[seen], kind="stable")]
    return _Start(counts, classes, k, seen, order, history, moved_per_pass)


def _mean_log_likelihood(m: np.ndarray, left: np.ndarray, right: np.ndarray, counts: _ClassBigramCounts) -> float:
    """The mean log-likelihood per train bigram (module docstring), from the class counts as floats."""
    constant = xlogx(counts.right_total).sum()
    return float((xlogx(m).sum() - xlogx(left).sum() - xlogx(right).sum() + constant) / counts.bigrams)


def _reference_gain(m: np.ndarray, left: np.ndarray, right: np.ndarray, r: np.ndarray, lc: np.ndarray,
                    s: float, lw: float, rw: float) -> np.ndarray:
    """The gain of putting a word (out of its class in m, left, right) into each class, all at once
    with NumPy: the reference formula, whose decisions the compiled path takes (exchange_kernels.py).
    r, lc: the word's counts followed by / following each class (floats); s, lw, rw: its count after
    itself and its totals. m, left, right may hold the counts as integers: they are read as floats."""
    dr, dl = np.flatnonzero(r), np.flatnonzero(lc)
    cols = m[:, dr].astype(np.float64, copy=False)
    gain = (xlogx(cols + r[dr]) - xlogx(cols)).sum(axis=1)
    rows = m[dl, :].astype(np.float64, copy=False)
    gain += (xlogx(rows + lc[dl, None]) - xlogx(rows)).sum(axis=0)
    diag = np.diagonal(m).astype(np.float64)  # the (b, b) cell gets r[b] + lc[b] + s, not the two parts separately
    gain += xlogx(diag + r + lc + s) - xlogx(diag + r) - xlogx(diag + lc) + xlogx(diag)
    left, right = left.astype(np.float64, copy=False), right.astype(np.float64, copy=False)
    gain -= xlogx(left + lw) - xlogx(left) + xlogx(right + rw) - xlogx(right)
    return gain


def choose_class(gain: np.ndarray, a: int) -> int:
    """The best class, the first of equals; the word's own class a unless another gains more than 1e-9 over it
    (the exchange algorithm's rule; nnlm.wordclasses.trigram moves by it too)."""
    b = int(np.argmax(gain))
    return a if gain[b] <= gain[a] + THRESHOLD else b


def exchange_clusters_reference(train: np.ndarray, vocab_size: int, n_classes: int,
                                max_passes: int = MAX_PASSES) -> WordClasses:
    """The exchange algorithm one word at a time in NumPy (the path before the compiled one, kept as
    the reference it must match: tests, benchmarks/cluster_speed.py). No deadline, no progress."""
    st = _start(train, vocab_size, n_classes, None)
    counts, classes, k, seen, order = st.counts, st.classes, st.k, st.seen, st.order
    m = counts.class_matrix(classes, k)
    left = m.sum(axis=1)  # N(g, .)
    right = m.sum(axis=0)  # N(., h)
    size = np.bincount(classes[seen], minlength=k)
    history, moved_per_pass = [_mean_log_likelihood(m, left, right, counts)], []
    for _ in range(max_passes):
        moved = 0
        for w in order:
            a = classes[w]
            if size[a] == 1:
                continue
            r, lc = counts.neighbours(w, classes, k)
            s = counts.self_count[w]
            lw, rw = counts.left_total[w], counts.right_total[w]
            m[a, :] -= r
            m[:, a] -= lc
            m[a, a] -= s
            left[a] -= lw
            right[a] -= rw
            b = choose_class(_reference_gain(m, left, right, r, lc, s, lw, rw), a)
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
        history.append(_mean_log_likelihood(m, left, right, counts))
        moved_per_pass.append(moved)
        if moved < STOP_MOVED_FRACTION * len(order):
            break
    unseen = np.flatnonzero(classes < 0)
    classes[unseen] = deal_out(unseen, size.astype(np.float64))
    return WordClasses(classes, k, history, moved_per_pass, True)


class _CompiledExchange:
    """The state the kernels of exchange_kernels.py work on: integer counts (the class-bigram matrix and
    its transpose, class totals and sizes), the word bigrams as CSR arrays, the f table and scratch."""

    def __init__(self, counts: _ClassBigramCounts, classes: np.ndarray, k: int, seen: np.ndarray) -> None:
        self.counts = counts
        self.classes = classes
        as_int = lambda x: np.rint(x).astype(np.int64)  # noqa: E731  (counts held as floats by _ClassBigramCounts)
        self.succ_count, self.pred_count = as_int(counts.succ_count), as_int(counts.pred_count)
        self.self_count = as_int(counts.self_count)
        self.left_total, self.right_total = as_int(counts.left_total), as_int(counts.right_total)
        # the kernels scan rows of m and mt: in 4-byte cells when every count fits (half the memory traffic)
        cell = np.int32 if counts.bigrams < 2**31 else np.int64
        self.m = as_int(counts.class_matrix(classes, k)).astype(cell)
        self.mt = np.ascontiguousarray(self.m.T)
        self.left, self.right = self.m.sum(axis=1, dtype=np.int64), self.m.sum(axis=0, dtype=np.int64)
        self.size = np.bincount(classes[seen], minlength=k)
        self.xl = kernels.xlogx_table(counts.bigrams)
        self.log_largest = max(float(np.log(max(counts.bigrams, 2))), 1.0)
        self.r, self.lc = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
        self.dr, self.dl = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
        self.gain, self.bound = np.zeros(k), np.zeros(k)
        self.state = np.zeros(3, dtype=np.int64)  # words moved, then the touched classes of a word handed back
        self.referred = 0  # words whose decision rounding could change, decided by _reference_gain

    def visit(self, order: np.ndarray, start: int, stop: int) -> None:
        """Visit order[start:stop], the words rounding could decide taken by the reference formula."""
        c = self.counts
        while start < stop:
            start = kernels.exchange_words(
                order, start, stop, self.classes, self.size, self.m, self.mt, self.left, self.right,
                c.succ_ptr, c.succ_word, self.succ_count, c.pred_ptr, c.pred_word, self.pred_count,
                self.self_count, self.left_total, self.right_total, self.xl, c.bigrams, self.log_largest,
                self.r, self.lc, self.dr, self.dl, self.gain, self.bound, self.state)
            if start < stop:
                w = int(order[start])
                gain = _reference_gain(self.m, self.left, self.right, self.r.astype(np.float64),
                                       self.lc.astype(np.float64), c.self_count[w], c.left_total[w],
                                       c.right_total[w])
                b = choose_class(gain, int(self.classes[w]))
                kernels.place_word(w, b, self.classes, self.size, self.m, self.mt, self.left, self.right,
                                   self.self_count, self.left_total, self.right_total, self.r, self.lc,
                                   self.dr, self.dl, self.state)
                self.referred += 1
                start += 1

    def mean_log_likelihood(self) -> float:
        return _mean_log_likelihood(self.m.astype(np.float64), self.left.astype(np.float64),
                                    self.right.astype(np.float64), self.counts)


def exchange_clusters(train: np.ndarray, vocab_size: int, n_classes: int, max_passes: int = MAX_PASSES,
                      progress: bool = True, deadline: float | None = None,
                      resume_from: WordClasses | None = None) -> WordClasses:
    """Cluster the words of train into `n_classes` classes (fewer if train has fewer distinct words);
    `resume_from`: an incomplete result for the same train and c, whose passes are continued.
    The moves run compiled (exchange_kernels.py) and give the classes of `exchange_clusters_reference`."""
    st = _start(train, vocab_size, n_classes, resume_from)
    classes, k, order, history, moved_per_pass = st.classes, st.k, st.order, st.history, st.moved
    ex = _CompiledExchange(st.counts, classes, k, st.seen)
    history.append(ex.mean_log_likelihood())
    passes_left = max_passes - len(moved_per_pass)
    bar = show_progress(passes_left * len(order), f"clustering into {k} classes", "word", enabled=progress)
    complete = True
    for _ in range(passes_left):
        ex.state[0] = 0
        i = 0
        while i < len(order):
            if deadline is not None and time.monotonic() >= deadline:
                complete = False
                break
            stop = min(i + CLOCK_EVERY, len(order))
            ex.visit(order, i, stop)
            bar.update(stop - i)
            i = stop
        moved = int(ex.state[0])
        if complete or i > 0:  # a pass the deadline cut counts as one if it visited any word
            history.append(ex.mean_log_likelihood())
            moved_per_pass.append(moved)
        bar.note(f"pass {len(moved_per_pass)}: {moved:,} moved, log-likelihood {history[-1]:.4f}")
        if not complete or moved < STOP_MOVED_FRACTION * len(order):
            break
    bar.close()

    unseen = np.flatnonzero(classes < 0)
    classes[unseen] = deal_out(unseen, ex.size.astype(np.float64))
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
