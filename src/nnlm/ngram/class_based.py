"""Class-based back-off n-gram (Brown et al. 1992), the third baseline of Bengio et al. (2003):

    P(w | h) = P(c(w) | c(h))  *  P(w | c(w))

The words of train are put in c classes by the exchange algorithm (nnlm.wordclasses.exchange); the
class of each history word gives a stream of class ids, modelled by modified Kneser-Ney of the
same order. P(w | c) is the word's share of its class's training count.

Words of V never seen in train are dealt out to the classes (nnlm.wordclasses.exchange.deal_out). A class that
holds some keeps back a discount D from each of its train words' counts (absolute discounting,
D = n1 / (n1 + 2 n2) from the counts-of-counts of the train words) and shares it equally among
its unseen words. So every word of V has a probability > 0 and each P(. | c) sums to 1. (Giving
the unseen words one class of their own instead leaves them only Kneser-Ney's uniform floor over
classes, and costs about 10% perplexity on Brown, all of it on those words.)
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.corpus import Corpus
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LMState
from nnlm.ngram.backoff import LN10, BackoffTables, KeptStateOwner, quick_step_words, start_context
from nnlm.ngram.kneser_ney import fit_kneser_ney
from nnlm.ngram.store import load_arrays, save_arrays
from nnlm.wordclasses.exchange import WordClasses, exchange_clusters

DEFAULT_CLASSES = 500
FALLBACK_DISCOUNT = 0.5  # when train has no words seen once or none seen twice


def unseen_word_discount(freq: np.ndarray) -> float:
    """D = n1 / (n1 + 2 n2) over the train counts of the words, kept strictly inside (0, 1)."""
    n1, n2 = int(np.sum(freq == 1)), int(np.sum(freq == 2))
    return n1 / (n1 + 2 * n2) if n1 > 0 and n2 > 0 else FALLBACK_DISCOUNT


def word_given_class(classes: np.ndarray, freq: np.ndarray) -> np.ndarray:
    """P(w | c(w)) for every word: relative frequency in its class, minus D in classes that
    also hold unseen words, whose share is then D * (train words of the class) / count of the class."""
    n_classes = int(classes.max()) + 1
    seen = freq > 0
    total = np.bincount(classes, weights=freq, minlength=n_classes)
    n_seen = np.bincount(classes[seen], minlength=n_classes)
    n_unseen = np.bincount(classes[~seen], minlength=n_classes)
    d = np.where(n_unseen > 0, unseen_word_discount(freq), 0.0)[classes]
    return np.where(seen, (freq - d) / total[classes],
                    d * n_seen[classes] / total[classes] / np.maximum(n_unseen[classes], 1))


class ClassNgram(KeptStateOwner):
    """Kneser-Ney over word classes times the word's probability within its class."""

    kind = "class"

    def __init__(self, vocab: Vocabulary, classes: np.ndarray, word_prob: np.ndarray, tables: BackoffTables,
                 params: dict[str, Any] | None = None) -> None:
        if len(classes) != len(vocab) or len(word_prob) != len(vocab):
            raise NnlmError("class assignments and word probabilities must cover the vocabulary")
        self.vocab = vocab
        self.classes = classes.astype(np.int64)
        self.word_prob = word_prob.astype(np.float64)
        self.tables = tables
        self.order = tables.order
        self.params = params or {}

    @classmethod
    def fit(cls, vocab: Vocabulary, train: np.ndarray, order: int, n_classes: int = DEFAULT_CLASSES,
            progress: bool = True, clusters: WordClasses | None = None) -> ClassNgram:
        """`clusters`: word classes already found for this train and c (the clustering does not
        depend on the order, so the orders of one c can share it); otherwise clustered here."""
        v = len(vocab)
        if not 1 <= n_classes <= v:
            raise NnlmError(f"--classes must be between 1 and |V| = {v:,}, got {n_classes:,}")
        train = np.asarray(train, dtype=np.int64)
        timing = {}
        if clusters is None:
            t0 = time.perf_counter()
            clusters = exchange_clusters(train, v, n_classes, progress=progress)
            timing = {"cluster_seconds": time.perf_counter() - t0}
        elif len(clusters.classes) != v:
            raise NnlmError(f"word classes for {len(clusters.classes):,} words given for a vocabulary of {v:,}")
        tables = fit_kneser_ney(clusters.classes[train], order, clusters.n_classes)
        word_prob = word_given_class(clusters.classes, np.bincount(train, minlength=v).astype(np.float64))
        params = {"requested_classes": n_classes, "classes": clusters.n_classes, **timing,
                  "cluster_passes": len(clusters.moved), "cluster_moved": clusters.moved,
                  "cluster_log_likelihood": clusters.log_likelihood, "cluster_complete": clusters.complete}
        return cls(vocab, clusters.classes, word_prob, tables, params)

    @classmethod
    def fit_corpus(cls, corpus: Corpus, order: int, n_classes: int = DEFAULT_CLASSES) -> ClassNgram:
        return cls.fit(corpus.vocab, corpus.train, order, n_classes)

    @property
    def n_classes(self) -> int:
        return self.tables.vocab_size

    def details(self) -> tuple[dict, str]:
        """Clustering facts, for reports."""
        p = self.params
        text = f"{self.n_classes} classes"
        if "cluster_seconds" in p:
            text += f", clustered in {p['cluster_seconds']:.1f} s ({p['cluster_passes']} passes)"
        elif "cluster_passes" in p:
            text += f", clustered beforehand ({p['cluster_passes']} passes)"
        return {"classes": self.n_classes, **{k: p[k] for k in ("cluster_seconds", "cluster_passes") if k in p}}, text

    def parameter_count(self) -> int:
        """The class n-gram's tables, plus P(w | class(w)) for every word."""
        return self.tables.parameter_count() + len(self.word_prob)

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        contexts = np.asarray(contexts, dtype=np.int64)
        targets = np.asarray(targets, dtype=np.int64)
        return self.tables.log_prob(self.classes[contexts], self.classes[targets]) + np.log(self.word_prob[targets])

    # the stateful API in one compiled call per step: the class n-gram's query engine on the class ids
    def begin_state(self, batch: int = 1, history: Sequence[int] | np.ndarray | None = None) -> LMState:
        state = super().begin_state(batch, history)
        state.extra.update(self.tables.state_extra(self.classes[state.context]))
        return state

    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        words = quick_step_words(self, state, words)
        if words.min() < 0 or words.max() >= len(self.vocab):
            self.check_step(state, words)  # raises, saying which id
        stepped = self.tables.step(self.classes[state.context], state.extra, self.classes[words])
        if stepped is None:
            return super().advance(state, words, log10)
        class_log10, _, extra = stepped
        if log10:
            log_probs = class_log10 + self._log10_word_prob()[words]
        else:
            log_probs = class_log10 * LN10 + np.log(self.word_prob[words])
        return log_probs, LMState(self.shift_state(state, words).context, state.owner, extra)

    def stream_log_prob(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                        since_start: np.ndarray | None = None) -> np.ndarray | None:
        """ln P of the tokens stream[first : first + count] as `nnlm.lm.chunked_log_probs` gives them (`log_prob`'s
        numbers), the class n-gram in one compiled call over the class ids; None without the engine."""
        lo = max(first - (self.order - 1), 0)
        part = np.asarray(stream[lo:first + count], dtype=np.int64)
        if part.size and part.min() < 0 or not 0 <= pad_id < len(self.vocab):  # (numpy refuses ids >= |V| below)
            raise IndexError(f"token ids must be in 0 .. {len(self.vocab) - 1}")
        scored = self.tables.token_log10(self.classes[part], first - lo, count, int(self.classes[pad_id]), since_start,
                                         LN10)  # the class n-gram's log10 * LN10, as tables.log_prob
        if scored is None:
            return None
        return scored[0] + np.log(self.word_prob[part[first - lo:]])

    def text_log10(self, ids: np.ndarray) -> float | None:
        """Sum of log10 P of the token ids `ids` from the start of a text, in one compiled call over the class
        ids (nnlm.score_sentence); None without the engine."""
        class_log10 = self.tables.text_log10(self.classes[start_context(self)], self.classes[ids])
        return None if class_log10 is None else class_log10 + float(self._log10_word_prob()[ids].sum())

    def texts_log10(self, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray | None:
        """log10 P of each text ids[bounds[i]:bounds[i+1]], each from the start of a text (nnlm.score_sentences)."""
        class_log10 = self.tables.texts_log10(self.classes[start_context(self)], self.classes[ids], bounds)
        if class_log10 is None:
            return None
        word = np.concatenate([[0.0], np.cumsum(self._log10_word_prob()[ids])])
        return class_log10 + (word[bounds[1:]] - word[bounds[:-1]])

    def _log10_word_prob(self) -> np.ndarray:
        if getattr(self, "_word_log10", None) is None:
            self._word_log10 = np.log10(self.word_prob)
        return self._word_log10

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        class_dist = self.tables.distribution(self.classes[np.asarray(contexts, dtype=np.int64)])  # [N, c]
        return class_dist[:, self.classes] * self.word_prob[None, :]

    def save(self, directory: Path) -> None:
        arrays = {"classes": self.classes, "word_prob": self.word_prob, **self.tables.arrays()}
        from nnlm.ngram.engine_file import save_engine

        save_arrays(directory, self.kind, self.order, self.vocab, arrays, {**self.params, "classes": self.n_classes},
                    beside=lambda tmp: save_engine(tmp, self.tables))

    @classmethod
    def load(cls, directory: Path) -> ClassNgram:
        config, vocab, arrays = load_arrays(directory)
        params = config.get("params") or {}
        order, n_classes = config.get("order"), params.get("classes")
        if not isinstance(order, int) or not isinstance(n_classes, int):
            raise NnlmError(f"{directory}: config.json lacks the order or the number of classes")
        classes = arrays.get("classes")
        if classes is None or "word_prob" not in arrays or classes.min() < 0 or classes.max() >= n_classes:
            raise NnlmError(f"{directory}: class assignments missing or out of range")
        tables = BackoffTables.from_arrays(n_classes, order, arrays)
        from nnlm.ngram.engine_file import attach

        attach(tables, Path(directory))  # its engine tables are mapped from there, where they check out
        return cls(vocab, classes, arrays["word_prob"], tables, params)
