"""The word classes of the class-factored output layer (nnlm.neural.net.class_output), chosen once from
the training text when a run is created.

- `exchange` (the default): the exchange algorithm of the class-based n-gram (nnlm.wordclasses.exchange),
  which groups words that follow the same words: P(class | h) then carries most of the prediction and
  each within-class softmax separates near-synonyms.
- `frequency`: words sorted by training count cut into K bins of about equal token mass (frequent
  words get small classes, rare words share large ones), as Mikolov et al. (2011) did for RNN LMs:
  no clustering pass, but classes that say less about the context.

Both are functions of the training text and K alone (no randomness), and both give exactly K
non-empty classes. The default K is about sqrt(|V|), which minimises K + |V|/K, the cost per word.
"""
from __future__ import annotations

import math

import numpy as np

from nnlm.errors import NnlmError

CLUSTERINGS = ("exchange", "frequency")


def default_class_count(vocab_size: int) -> int:
    """round(sqrt(|V|)), at least 2 and at most |V|."""
    return min(vocab_size, max(2, round(math.sqrt(vocab_size))))


def class_count_limit(clustering: str, train: np.ndarray, vocab_size: int) -> int:
    """The most classes `clustering` can make: the exchange algorithm places each word seen in train
    in a class of its own at most, frequency bins every vocabulary word."""
    if clustering == "exchange":
        return max(2, int(np.count_nonzero(np.bincount(train, minlength=vocab_size))))
    return vocab_size


def frequency_classes(train: np.ndarray, vocab_size: int, n_classes: int) -> np.ndarray:
    """classes[w] for words ranked by count (ties by id): class = floor(K x the token share of the
    words ranked before w), held to at most one class more than the word before (so no class is empty:
    a word above 1/K of the tokens only happens among the first ranks, which get one class each) and to
    at least enough classes that the remaining words fill the rest."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64)
    ranked = np.argsort(-counts, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(counts[ranked])[:-1]]) / max(counts.sum(), 1.0)
    rank = np.arange(vocab_size)
    cls = np.minimum(np.minimum(np.floor(n_classes * before).astype(np.int64), rank), n_classes - 1)
    cls = np.maximum(cls, n_classes - vocab_size + rank)
    classes = np.empty(vocab_size, dtype=np.int64)
    classes[ranked] = cls
    return classes


def output_classes(clustering: str, train: np.ndarray, vocab_size: int, n_classes: int,
                   progress: bool = False) -> np.ndarray:
    """classes[w] in 0 .. K-1 for every word of the vocabulary, every class non-empty."""
    if clustering not in CLUSTERINGS:
        raise NnlmError(f"unknown --output-clustering {clustering!r}; choose from {', '.join(CLUSTERINGS)}")
    if not 2 <= n_classes <= class_count_limit(clustering, train, vocab_size):
        raise NnlmError(f"--output-classes {n_classes}: the {clustering} clustering can make from 2 to "
                        f"{class_count_limit(clustering, train, vocab_size)} classes of this corpus")
    if clustering == "frequency":
        return frequency_classes(train, vocab_size, n_classes)
    from nnlm.wordclasses.exchange import exchange_clusters

    found = exchange_clusters(np.asarray(train, dtype=np.int64), vocab_size, n_classes, progress=progress)
    if found.n_classes != n_classes or np.bincount(found.classes, minlength=n_classes).min() == 0:
        raise NnlmError(f"the exchange clustering made {found.n_classes} classes, not {n_classes}")
    return found.classes.astype(np.int64)
