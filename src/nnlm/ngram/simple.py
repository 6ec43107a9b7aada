"""The two simplest models: uniform, and the add-one (Laplace) bigram. Sanity baselines."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.lm import LanguageModel
from nnlm.ngram.keys import ranges, value_at
from nnlm.ngram.store import load_arrays, save_arrays


class UniformModel(LanguageModel):
    """P(w) = 1/|V| whatever the context: its perplexity is exactly |V|."""

    order = 1

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return np.full(len(targets), -np.log(len(self.vocab)), dtype=np.float64)

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        return np.full((len(contexts), len(self.vocab)), 1.0 / len(self.vocab), dtype=np.float64)


class AddOneBigram(LanguageModel):
    """P(w | v) = (c(v, w) + 1) / (c(v) + |V|), c counted over the training ids."""

    order = 2
    kind = "addone"

    def __init__(self, vocab: Vocabulary, pair_keys: np.ndarray, pair_counts: np.ndarray,
                 context_counts: np.ndarray) -> None:
        self.vocab = vocab
        self._pair_keys, self._pair_counts, self._context_counts = pair_keys, pair_counts, context_counts

    @classmethod
    def fit(cls, vocab: Vocabulary, train: np.ndarray) -> AddOneBigram:
        v = len(vocab)
        train = np.asarray(train, dtype=np.int64)
        pair_keys, pair_counts = np.unique(train[:-1] * v + train[1:], return_counts=True)
        context_counts = np.bincount(train[:-1], minlength=v).astype(np.float64)
        return cls(vocab, pair_keys, pair_counts, context_counts)

    def save(self, directory: Path) -> None:
        save_arrays(directory, self.kind, self.order, self.vocab,
                    {"pair_keys": self._pair_keys, "pair_counts": self._pair_counts,
                     "context_counts": self._context_counts})

    @classmethod
    def load(cls, directory: Path) -> AddOneBigram:
        _, vocab, a = load_arrays(directory)
        return cls(vocab, a["pair_keys"], a["pair_counts"], a["context_counts"])

    def parameter_count(self) -> int:
        return len(self._pair_counts)

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        v = len(self.vocab)
        prev = np.asarray(contexts[:, -1], dtype=np.int64)
        pairs = prev * v + np.asarray(targets, dtype=np.int64)
        counts = value_at(self._pair_keys, self._pair_counts, pairs).astype(np.float64)
        return np.log(counts + 1.0) - np.log(self._context_counts[prev] + v)

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        v = len(self.vocab)
        prev = np.asarray(contexts[:, -1], dtype=np.int64)
        out = np.ones((len(prev), v), dtype=np.float64)
        rows, entries = ranges(np.searchsorted(self._pair_keys, prev * v),
                               np.searchsorted(self._pair_keys, (prev + 1) * v))
        out[rows, self._pair_keys[entries] % v] += self._pair_counts[entries]
        out /= (self._context_counts[prev] + v)[:, None]
        return out
