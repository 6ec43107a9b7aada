"""Back-off n-gram tables and the model that scores with them (the form ARPA files hold).

P(w | h) = p(h w)                       if the n-gram h w is listed,
         = b(h) * P(w | h without its first word)   otherwise (b(h) = 1 if h is not listed).

Tables use the packed keys of nnlm.ngram.counts: entry keys of order k are
(index of the (k-1)-gram prefix in order k-1) * |V| + last word, sorted, so one searchsorted per
word looks an n-gram up and the n-grams sharing a context are one contiguous slice. The unigram
table lists every word of V (key = word id), so every word has a probability.

This is both the scorer of the Kneser-Ney estimator and the model an ARPA file is read into.
Probabilities are kept as log10, like ARPA.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.ngram.keys import lookup, ranges, search
from nnlm.ngram.store import load_arrays, save_arrays

LN10 = float(np.log(10.0))


@dataclass
class BackoffTables:
    """Per-order n-gram tables over int ids 0..vocab_size-1 (lists indexed by order - 1).

    keys[k-1]           sorted int64 packed keys of the listed k-grams (k = 1: arange(vocab_size))
    log10_prob[k-1]     log10 P(last word | the rest) of each listed k-gram
    log10_backoff[k-1]  log10 b(k-gram) used when it is a context (0 for the highest order)
    """

    vocab_size: int
    keys: list[np.ndarray]
    log10_prob: list[np.ndarray]
    log10_backoff: list[np.ndarray]

    def __post_init__(self) -> None:
        if not (len(self.keys) == len(self.log10_prob) == len(self.log10_backoff) >= 1):
            raise ValueError("back-off tables need one keys/prob/backoff array per order")
        if not np.array_equal(self.keys[0], np.arange(self.vocab_size)):
            raise ValueError("the unigram table must list every word id exactly once")

    @property
    def order(self) -> int:
        return len(self.keys)

    def sizes(self) -> list[int]:
        return [len(k) for k in self.keys]

    def parameter_count(self) -> int:
        """A probability per listed n-gram, plus a back-off weight per n-gram below the top order."""
        return sum(self.sizes()) + sum(self.sizes()[:-1])

    def index(self, grams: np.ndarray) -> np.ndarray:
        """Table index of each row of grams [N, k] in order k; -1 where it is not listed."""
        return lookup(self.keys, self.vocab_size, grams)

    def words(self, k: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The listed k-grams (entries start..stop of order k) as an int64 array [rows, k], in table order."""
        rows = np.arange(start, len(self.keys[k - 1]) if stop is None else min(stop, len(self.keys[k - 1])))
        out = np.empty((len(rows), k), dtype=np.int64)
        for j in range(k, 0, -1):
            key = self.keys[j - 1][rows]
            out[:, j - 1] = key % self.vocab_size
            rows = key // self.vocab_size
        return out

    def _context(self, contexts: np.ndarray) -> np.ndarray:
        contexts = np.asarray(contexts, dtype=np.int64)
        need = self.order - 1
        if contexts.ndim != 2 or contexts.shape[1] < need:
            raise ValueError(f"contexts must be [N, >= {need}], got shape {contexts.shape}")
        return contexts[:, contexts.shape[1] - need:]

    def log10_prob_of(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log10 P(target | context) for each row, by the back-off rule, all rows at once."""
        ctx = self._context(contexts)
        targets = np.asarray(targets, dtype=np.int64)
        v = self.vocab_size
        result = self.log10_prob[0][targets]
        for m in range(1, self.order):  # P given the last m context words, from P given m-1
            hist = self.index(ctx[:, ctx.shape[1] - m:])
            listed = hist >= 0
            backoff = np.where(listed, self.log10_backoff[m - 1][np.maximum(hist, 0)], 0.0)
            gram, hit = search(self.keys[m], np.maximum(hist, 0) * v + targets)
            hit &= listed
            result = np.where(hit, self.log10_prob[m][gram], result + backoff)
        return result

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Natural-log probabilities, float64 [N]."""
        return self.log10_prob_of(contexts, targets) * LN10

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        """P(. | context) over all ids, float64 [N, vocab_size]: unigrams, then per context length
        scale by the back-off weight and overwrite the listed continuations (all rows in bulk)."""
        ctx = self._context(contexts)
        n, v = len(ctx), self.vocab_size
        out = np.tile(np.power(10.0, self.log10_prob[0]), (n, 1))
        for m in range(1, self.order):
            hist = self.index(ctx[:, ctx.shape[1] - m:])
            rows = np.flatnonzero(hist >= 0)
            if len(rows) == 0:
                continue
            h = hist[rows]
            out[rows] *= np.power(10.0, self.log10_backoff[m - 1][h])[:, None]
            lo = np.searchsorted(self.keys[m], h * v)
            hi = np.searchsorted(self.keys[m], (h + 1) * v)
            _, entries = ranges(lo, hi)
            out[np.repeat(rows, hi - lo), self.keys[m][entries] % v] = np.power(10.0, self.log10_prob[m][entries])
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for k in range(1, self.order + 1):
            out[f"keys_{k}"] = self.keys[k - 1]
            out[f"log10_prob_{k}"] = self.log10_prob[k - 1]
            out[f"log10_backoff_{k}"] = self.log10_backoff[k - 1]
        return out

    @classmethod
    def from_arrays(cls, vocab_size: int, order: int, arrays: dict[str, np.ndarray]) -> BackoffTables:
        try:
            return cls(vocab_size,
                       [arrays[f"keys_{k}"].astype(np.int64) for k in range(1, order + 1)],
                       [arrays[f"log10_prob_{k}"].astype(np.float64) for k in range(1, order + 1)],
                       [arrays[f"log10_backoff_{k}"].astype(np.float64) for k in range(1, order + 1)])
        except (KeyError, ValueError) as exc:
            raise NnlmError(f"saved back-off tables are incomplete or inconsistent ({exc})") from None


class BackoffModel(LanguageModel):
    """A LanguageModel over a Vocabulary backed by BackoffTables (e.g. read from an ARPA file)."""

    kind = "backoff"

    def __init__(self, vocab: Vocabulary, tables: BackoffTables, params: dict[str, Any] | None = None) -> None:
        if tables.vocab_size != len(vocab):
            raise ValueError("tables and vocabulary disagree on |V|")
        self.vocab = vocab
        self.tables = tables
        self.order = tables.order
        self.params = params or {}

    def parameter_count(self) -> int:
        return self.tables.parameter_count()

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return self.tables.log_prob(contexts, targets)

    def log10_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return self.tables.log10_prob_of(contexts, targets)

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        return self.tables.distribution(contexts)

    def save(self, directory: Path) -> None:
        save_arrays(directory, self.kind, self.order, self.vocab, self.tables.arrays(), self.params)

    @classmethod
    def load(cls, directory: Path) -> BackoffModel:
        config, vocab, arrays = load_arrays(directory)
        order = config.get("order")
        if not isinstance(order, int) or not 1 <= order <= 6:
            raise NnlmError(f"{directory}: config.json has no valid order")
        return cls(vocab, BackoffTables.from_arrays(len(vocab), order, arrays), config.get("params"))
