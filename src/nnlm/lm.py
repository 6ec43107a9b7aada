"""The one interface every language model implements, and the one perplexity function.

A model of order n conditions on the n-1 previous tokens. Contexts are int arrays of shape
[N, n-1], oldest token first (column -1 is the word right before the target). Everything else
in nnlm -- perplexity, mixtures, scoring, generation, the Table 1 report -- uses only
`order`, `vocab`, `log_prob` and `distribution`, so a new model kind is one new class.
Using a model on text (scoring lines, next words, generation) lives in nnlm.use: those
functions take a model, and this module knows nothing of them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from nnlm.data.corpus import Corpus
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError

EVAL_CHUNK = 1 << 15  # positions scored per call when walking a split


class LanguageModel(ABC):
    """P(w_t | w_{t-n+1..t-1}) over a fixed vocabulary."""

    order: int
    vocab: Vocabulary
    kind: str = ""  # the short name reports and saved files use (kn, interpolated, ...)

    @abstractmethod
    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Natural-log probabilities, float64 [N], of targets [N] given contexts [N, order-1]."""

    @abstractmethod
    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        """Next-token probabilities, float64 [N, |V|], each row summing to 1."""

    @property
    def context_size(self) -> int:
        return self.order - 1

    def parameter_count(self) -> int:
        """Free parameters: numbers estimated from data (weights, stored probabilities, mixture weights)."""
        return 0

    def kind_name(self) -> str:
        """`kind`, or the class name for a model that has none."""
        return self.kind or type(self).__name__

    @contextmanager
    def long_pass(self, tokens: int) -> Iterator[None]:
        """Around the log_prob calls of one pass over `tokens` tokens: a model may precompute what
        pays only on long passes, and free it afterwards (NeuralLM: its direct connections'
        per-position tables). Scores are the same either way, up to floating-point rounding."""
        yield


def contexts(stream: np.ndarray, positions: np.ndarray, context_size: int, pad_id: int) -> np.ndarray:
    """Rows stream[p-k .. p-1] for each position p, with `pad_id` before the stream's start."""
    positions = np.asarray(positions, dtype=np.int64)
    if context_size == 0:
        return np.zeros((len(positions), 0), dtype=np.int64)
    offsets = np.arange(-context_size, 0, dtype=np.int64)
    index = positions[:, None] + offsets[None, :]
    padded = np.where(index >= 0, stream[np.maximum(index, 0)], pad_id)
    return padded.astype(np.int64, copy=False)


def split_log_probs(model: LanguageModel, corpus: Corpus, split: str, chunk: int = EVAL_CHUNK) -> np.ndarray:
    """log P of every token of `split`, each predicted from the tokens before it in the stream."""
    if model.vocab.fingerprint != corpus.vocab.fingerprint:
        raise NnlmError(f"the model's vocabulary ({len(model.vocab)} words) is not the corpus "
                        f"{corpus.name}'s ({len(corpus.vocab)} words): give the corpus it was built on "
                        "(--corpus and the same --min-count/--max-vocab/--vocab-from)")
    ids = corpus.split(split)
    if len(ids) < model.order:
        raise NnlmError(f"the {split} split has {len(ids)} tokens, fewer than the model's order {model.order}")
    stream = corpus.stream()
    start = corpus.split_offset(split)
    out = np.empty(len(ids), dtype=np.float64)
    with model.long_pass(len(ids)):
        for lo in range(0, len(ids), chunk):
            positions = np.arange(start + lo, start + min(lo + chunk, len(ids)))
            ctx = contexts(stream, positions, model.context_size, corpus.pad_id)
            out[lo:lo + len(positions)] = model.log_prob(ctx, stream[positions].astype(np.int64))
    return out


def perplexity_from_log_probs(log_probs: np.ndarray) -> float:
    """exp(-mean natural-log probability): the definition used for every model and split."""
    return float(np.exp(-np.mean(log_probs)))


def perplexity(model: LanguageModel, corpus: Corpus, split: str) -> float:
    """Perplexity of `model` on a split of `corpus`, every token counted (markers and `<unk>` too)."""
    return perplexity_from_log_probs(split_log_probs(model, corpus, split))
