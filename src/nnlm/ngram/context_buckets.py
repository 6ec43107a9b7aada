"""Context-frequency buckets: the weights of a mixture chosen by how often its context was seen in train.

A context (u, v) falls in bucket q = ceil(-log((1 + freq(u, v)) / T)) (T training tokens, natural log, freq(u, v) =
how often (u, v) is followed by a word in train), clipped to the seen buckets 0 .. ceil(log T); a context never
followed by a word gets the "no trigram" bucket, and one whose last word was never followed by one the "no bigram"
bucket. The deleted-interpolation trigram (nnlm.ngram.interpolated) weights its components by these buckets, and
so does a model mixture fitted with `em-buckets` (the paper's "weights conditional on the frequency of the
context"); `ContextBuckets` is that rule with only the counts it needs, so that a saved mixture carries it
(nnlm.mixture_store) without the trigram's tables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.keys import value_at

ARRAYS = ("context_keys", "context_totals", "bigram_totals")


def seen_bucket_count(train_tokens: int) -> int:
    """Buckets q = 0 .. ceil(log T) of contexts seen in train."""
    return math.ceil(math.log(train_tokens)) + 1


@dataclass(frozen=True)
class ContextBuckets:
    """The bucket of each context row [N, >= 2] (the last two words count): a Mixture's bucketer."""

    vocab_size: int
    train_tokens: int
    context_keys: np.ndarray    # u * |V| + v of every (u, v) followed by a word in train, sorted
    context_totals: np.ndarray  # how often each was followed by a word
    bigram_totals: np.ndarray   # [|V|]: how often each word was followed by a word

    order = 3  # a context of two words

    def __post_init__(self) -> None:
        if self.train_tokens < 1 or len(self.bigram_totals) != self.vocab_size or \
                len(self.context_keys) != len(self.context_totals):
            raise NnlmError("context-frequency buckets: inconsistent counts (a damaged saved mixture?)")

    @property
    def seen_buckets(self) -> int:
        return seen_bucket_count(self.train_tokens)

    @property
    def n_buckets(self) -> int:
        """Seen-context buckets, then one for contexts without a trigram, one without a bigram."""
        return self.seen_buckets + 2

    @property
    def no_trigram_bucket(self) -> int:
        return self.seen_buckets

    @property
    def no_bigram_bucket(self) -> int:
        return self.seen_buckets + 1

    def context_freq(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """freq(u, v) as a trigram context, and freq(v) as a bigram context, for each row."""
        u, prev = contexts[:, -2].astype(np.int64), contexts[:, -1].astype(np.int64)
        tri = value_at(self.context_keys, self.context_totals, u * self.vocab_size + prev)
        return tri, self.bigram_totals[prev]

    def __call__(self, contexts: np.ndarray) -> np.ndarray:
        tri, bi = self.context_freq(contexts)
        q = np.ceil(-np.log((1.0 + tri) / self.train_tokens)).astype(np.int64)
        q = np.clip(q, 0, self.seen_buckets - 1)
        q = np.where(tri > 0, q, self.no_trigram_bucket)
        return np.where(bi > 0, q, self.no_bigram_bucket)

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(getattr(self, name)) for name in ARRAYS}

    @classmethod
    def from_arrays(cls, vocab_size: int, train_tokens: int, arrays: dict[str, np.ndarray]) -> ContextBuckets:
        missing = [name for name in ARRAYS if name not in arrays]
        if missing:
            raise NnlmError(f"context-frequency buckets: {', '.join(missing)} missing (a damaged saved mixture?)")
        return cls(vocab_size, train_tokens, *(arrays[name].astype(np.int64) for name in ARRAYS))
