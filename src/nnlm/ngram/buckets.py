"""The paper's context-frequency buckets: q = ceil(-ln((1 + freq(w_{t-2}, w_{t-1})) / T)).

Frequent contexts get small q, unseen ones the largest (ceil(ln T)). The deleted-interpolation
trigram and the bucketed mixtures fit one set of weights per bucket.
"""
from __future__ import annotations

import numpy as np

from nnlm.ngram.counts import NgramCounts, count_ngrams


class ContextFrequencyBuckets:
    """Maps bigram contexts [N, >=2] to bucket ids 0..n_buckets-1 from training counts."""

    order = 3  # it reads the two previous words

    def __init__(self, counts: NgramCounts, train_size: int) -> None:
        if counts.order < 2:
            raise ValueError("context-frequency buckets need bigram counts")
        self.counts = counts
        self.train_size = train_size
        self.n_buckets = int(np.ceil(np.log(train_size))) + 1

    @classmethod
    def from_train(cls, train: np.ndarray, vocab_size: int) -> "ContextFrequencyBuckets":
        return cls(count_ngrams(train, 2, vocab_size), len(train))

    def __call__(self, contexts: np.ndarray) -> np.ndarray:
        freq = self.counts.count(np.asarray(contexts)[:, -2:])
        q = np.ceil(-np.log((1.0 + freq) / self.train_size))
        return np.clip(q, 0, self.n_buckets - 1).astype(np.int64)
