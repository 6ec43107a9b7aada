"""Deleted-interpolation trigram (Jelinek & Mercer), as the Bengio et al. (2003) baseline.

    P(w | u, v) = a0 / |V| + a1 p1(w) + a2 p2(w | v) + a3 p3(w | u, v)

p1, p2, p3 are relative frequencies from train. The weights a depend on the context's bucket
q = ceil(-log((1 + freq(u, v)) / T)), T = number of training tokens, natural log, freq(u, v) =
how often (u, v) is followed by a word in train. They are fitted by EM on the validation split.

Unseen contexts: p3 is undefined when (u, v) was never followed by a word in train, and p2 when
v never was. Such contexts get buckets of their own whose weights cover only the defined
components ("no trigram": uniform, unigram, bigram; "no bigram": uniform, unigram). Every
bucket is then an ordinary mixture of proper distributions, so each row sums to 1 and EM keeps
its guarantee that the validation likelihood never decreases.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.corpus import Corpus
from nnlm.data.vocab import Vocabulary
from nnlm.em import fit_weights_em
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LMState, contexts
from nnlm.ngram.backoff import KeptStateOwner, quick_step_words, start_context
from nnlm.ngram.context_buckets import ContextBuckets
from nnlm.ngram.counts import count_ngrams
from nnlm.ngram.keys import ranges, value_at
from nnlm.ngram.store import load_arrays, save_arrays

COMPONENTS = 4  # uniform, unigram, bigram, trigram
EM_ITERATIONS = 5
MAX_VOCAB = 2_000_000  # trigram keys u*V*V + v*V + w must fit in int64


class InterpolatedTrigram(KeptStateOwner):
    """Trigram relative frequencies mixed with lower orders, weights per context-frequency bucket."""

    order = 3
    kind = "interpolated"

    def __init__(self, vocab: Vocabulary, tables: dict[str, np.ndarray], weights: np.ndarray,
                 train_tokens: int, em_history: list[float] | None = None) -> None:
        self.vocab = vocab
        self.tables = tables  # see `fit` for what each array holds
        self.weights = weights  # [buckets, COMPONENTS], rows sum to 1
        self.train_tokens = train_tokens
        self.em_history = em_history or []  # mean validation log-likelihood, before and after each EM step
        self._engine: Any = None  # the compiled query engine, built at the first query (False: none)
        self._bucketer: ContextBuckets | None = None  # built at the first use (bucketer)

    # ---- counting -------------------------------------------------------------------------
    @classmethod
    def fit(cls, vocab: Vocabulary, train: np.ndarray, memory_gb: float | None = None) -> InterpolatedTrigram:
        """Relative-frequency tables from train, weights at their EM starting point. `memory_gb`: count
        and build the tables out of core within about that much memory, memory-mapped (the same model;
        nnlm.ngram.interpolated_disk)."""
        v = len(vocab)
        if v > MAX_VOCAB:
            raise NnlmError(f"the interpolated trigram supports at most {MAX_VOCAB:,} words, not {v:,}")
        if memory_gb is not None:
            from nnlm.ngram.interpolated_disk import fit_trigram_tables_mapped
            from nnlm.ngram.kn_discounts import checked_ids

            train = checked_ids(train, 3, v, memory_gb)
            if len(train) < 3:
                raise NnlmError(f"cannot count 3-grams in {len(train)} tokens")
            model = cls(vocab, fit_trigram_tables_mapped(train, v, memory_gb), np.zeros((0, COMPONENTS)), len(train))
            model.weights = model._initial_weights()
            return model
        counts = count_ngrams(train, 3, v)
        bigrams, trigrams = counts.words(2), counts.words(3)
        bigram_keys = bigrams[:, 0] * v + bigrams[:, 1]  # sorted, like the table
        trigram_keys = (trigrams[:, 0] * v + trigrams[:, 1]) * v + trigrams[:, 2]
        # freq(u, v) as a trigram context = the sum of its trigram counts (keys are sorted by context)
        context_keys, starts = np.unique(trigram_keys // v, return_index=True)
        context_totals = np.add.reduceat(counts.counts[2], starts)
        tables = {
            "unigram": np.bincount(train, minlength=v).astype(np.int64),
            "bigram_keys": bigram_keys,
            "bigram_counts": counts.counts[1],
            "bigram_totals": np.bincount(bigrams[:, 0], weights=counts.counts[1], minlength=v).astype(np.int64),
            "trigram_keys": trigram_keys,
            "trigram_counts": counts.counts[2],
            "context_keys": context_keys,
            "context_totals": context_totals.astype(np.int64),
        }
        model = cls(vocab, tables, np.zeros((0, COMPONENTS)), len(train))
        model.weights = model._initial_weights()
        return model

    @classmethod
    def fit_corpus(cls, corpus: Corpus, iterations: int = EM_ITERATIONS,
                   memory_gb: float | None = None) -> InterpolatedTrigram:
        """Counts from train (out of core within `memory_gb`, if given), mixture weights by EM on the
        validation split."""
        model = cls.fit(corpus.vocab, corpus.train, memory_gb)
        positions = np.arange(len(corpus.valid)) + corpus.split_offset("valid")
        stream = corpus.stream()
        model.fit_weights(contexts(stream, positions, 2, corpus.pad_id), stream[positions].astype(np.int64),
                          iterations)
        return model

    # ---- buckets (the rule is nnlm.ngram.context_buckets') ----------------------------------
    def bucketer(self) -> ContextBuckets:
        """The bucket rule of this trigram with only the counts it reads (also a mixture's bucketer),
        built at the first use."""
        if self._bucketer is None:
            t = self.tables
            self._bucketer = ContextBuckets(len(self.vocab), self.train_tokens, t["context_keys"],
                                            t["context_totals"], t["bigram_totals"])
        return self._bucketer

    @property
    def seen_buckets(self) -> int:
        return self.bucketer().seen_buckets

    @property
    def n_buckets(self) -> int:
        return self.bucketer().n_buckets

    @property
    def no_trigram_bucket(self) -> int:
        return self.bucketer().no_trigram_bucket

    @property
    def no_bigram_bucket(self) -> int:
        return self.bucketer().no_bigram_bucket

    def _initial_weights(self) -> np.ndarray:
        """Equal weights over the components each bucket can use."""
        w = np.full((self.n_buckets, COMPONENTS), 1.0 / COMPONENTS)
        w[self.no_trigram_bucket] = [1 / 3, 1 / 3, 1 / 3, 0]
        w[self.no_bigram_bucket] = [1 / 2, 1 / 2, 0, 0]
        return w

    def buckets(self, contexts: np.ndarray) -> np.ndarray:
        """Mixture-weight bucket of each context row."""
        return self.bucketer()(contexts)

    # ---- the four components -------------------------------------------------------------
    def components(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """[N, 4]: p0, p1(w), p2(w|v), p3(w|u,v); 0 where a component is undefined."""
        v = len(self.vocab)
        t = self.tables
        contexts = np.asarray(contexts, dtype=np.int64)
        targets = np.asarray(targets, dtype=np.int64)
        u, prev = contexts[:, -2], contexts[:, -1]
        tri_total, bi_total = self.bucketer().context_freq(contexts)
        out = np.empty((len(targets), COMPONENTS))
        out[:, 0] = 1.0 / v
        out[:, 1] = t["unigram"][targets] / self.train_tokens
        out[:, 2] = value_at(t["bigram_keys"], t["bigram_counts"], prev * v + targets) / np.maximum(bi_total, 1)
        tri = value_at(t["trigram_keys"], t["trigram_counts"], (u * v + prev) * v + targets)
        out[:, 3] = tri / np.maximum(tri_total, 1)
        return out

    # ---- EM on held-out data -------------------------------------------------------------
    def fit_weights(self, contexts: np.ndarray, targets: np.ndarray, iterations: int = EM_ITERATIONS) -> list[float]:
        """EM for the bucket weights on held-out (contexts, targets); returns the mean
        log-likelihood before the first step and after each step (never decreasing)."""
        with np.errstate(divide="ignore"):  # undefined components: log 0 = -inf, weight 0
            log_probs = np.log(self.components(contexts, targets).T)
        fit = fit_weights_em(log_probs, self.buckets(contexts), self.n_buckets, iterations, tol=None,
                             initial=self._initial_weights())
        self.weights, self.em_history = fit.weights, fit.log_likelihood
        return fit.log_likelihood

    # ---- the interface -------------------------------------------------------------------
    def parameter_count(self) -> int:
        """Stored relative-frequency counts (unigram, bigram, trigram) and the bucket weights."""
        t = self.tables
        return len(t["unigram"]) + len(t["bigram_counts"]) + len(t["trigram_counts"]) + self.weights.size

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the engine (rebuilt at the first query where it is unpickled)."""
        return {**self.__dict__, "_engine": None}

    def query_engine(self) -> Any:
        """The compiled engine (nnlm.ngram.interpolated_engine), built at the first query; None if the tables
        keep the numpy path (memory-mapped beyond the engine's budget, or NNLM_QUERY_ENGINE=0)."""
        if self._engine is None:
            from nnlm.ngram import engine_tables
            from nnlm.ngram.interpolated_engine import build_interpolated_engine

            engine = None
            if engine_tables.ENABLED:
                engine = build_interpolated_engine(len(self.vocab), self.train_tokens, self.seen_buckets, self.tables)
            self._engine = engine if engine is not None else False
        return self._engine or None

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        engine = self.query_engine()
        if engine is None:
            return self.reference_log_prob(contexts, targets)
        contexts = np.asarray(contexts, dtype=np.int64)
        targets = np.asarray(targets, dtype=np.int64)
        if contexts.ndim != 2 or contexts.shape[1] < 2 or targets.shape != (len(contexts),):
            raise ValueError(f"contexts must be [N, >= 2] and targets [N], got {contexts.shape} and {targets.shape}")
        for ids in (targets, contexts[:, -2:]):  # the compiled loop does not check bounds
            self._check_ids(ids)
        return engine.log_prob(self.weights, contexts, targets)

    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.vocab)):
            raise IndexError(f"token ids must be in 0 .. {len(self.vocab) - 1}")

    def stream_log_prob(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                        since_start: np.ndarray | None = None) -> np.ndarray | None:
        """ln P of the tokens stream[first : first + count] as `nnlm.lm.chunked_log_probs` gives them (`log_prob`'s
        numbers), in one compiled call over the stream; None without the engine."""
        engine = self.query_engine()
        if engine is None:
            return None
        lo = max(first - 2, 0)
        part = np.ascontiguousarray(stream[lo:first + count], dtype=np.int64)
        return engine.stream_log_prob(self.weights, part, first - lo, count, pad_id, since_start)

    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        """A step in one compiled call (the trigram needs nothing beyond the two context ids)."""
        engine = self.query_engine()
        if engine is None:
            return super().advance(state, words, log10)
        words = quick_step_words(self, state, words)
        if words.min() < 0 or words.max() >= len(self.vocab):
            self.check_step(state, words)  # raises, saying which id
        log_probs = engine.log_prob(self.weights, state.context, words)
        return (log_probs * LOG10_E if log10 else log_probs), self.shift_state(state, words)

    def text_log10(self, ids: np.ndarray) -> float | None:
        """Sum of log10 P of the token ids `ids` from the start of a text, in one compiled call
        (nnlm.score_sentence); None without the engine."""
        engine = self.query_engine()
        return None if engine is None else engine.text_log_prob(self.weights, start_context(self), ids) * LOG10_E

    def texts_log10(self, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray | None:
        """log10 P of each text ids[bounds[i]:bounds[i+1]], each from the start of a text (nnlm.score_sentences)."""
        engine = self.query_engine()
        if engine is None:
            return None
        return engine.texts_log_prob(self.weights, start_context(self), ids, bounds) * LOG10_E

    def reference_log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log_prob in numpy: the reference the compiled engine is tested against."""
        contexts = np.asarray(contexts, dtype=np.int64)
        mix = (self.weights[self.buckets(contexts)] * self.components(contexts, targets)).sum(axis=1)
        return np.log(mix)

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        v = len(self.vocab)
        t = self.tables
        contexts = np.asarray(contexts, dtype=np.int64)
        u, prev = contexts[:, -2], contexts[:, -1]
        a = self.weights[self.buckets(contexts)]  # [N, 4]
        tri_total, bi_total = self.bucketer().context_freq(contexts)
        out = a[:, :1] / v + a[:, 1:2] * (t["unigram"] / self.train_tokens)[None, :]
        # bigram rows: the slice of bigram_keys in [prev*V, (prev+1)*V)
        rows, idx = ranges(np.searchsorted(t["bigram_keys"], prev * v),
                            np.searchsorted(t["bigram_keys"], (prev + 1) * v))
        out[rows, t["bigram_keys"][idx] % v] += a[rows, 2] * t["bigram_counts"][idx] / bi_total[rows]
        ctx = u * v + prev
        rows, idx = ranges(np.searchsorted(t["trigram_keys"], ctx * v),
                            np.searchsorted(t["trigram_keys"], (ctx + 1) * v))
        out[rows, t["trigram_keys"][idx] % v] += a[rows, 3] * t["trigram_counts"][idx] / tri_total[rows]
        return out

    def details(self) -> tuple[dict, str]:
        """The EM trace on validation, for reports."""
        steps = " ".join(f"{h:.4f}" for h in self.em_history)
        return ({"em_valid_log_likelihood": self.em_history},
                f"EM on valid, mean log-likelihood at start and after each step: {steps}")

    # ---- saving --------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        save_arrays(directory, self.kind, self.order, self.vocab, {**self.tables, "weights": self.weights},
                    {"train_tokens": self.train_tokens, "em_history": self.em_history})

    @classmethod
    def load(cls, directory: Path) -> InterpolatedTrigram:
        config, vocab, arrays = load_arrays(directory)
        weights = arrays.pop("weights")
        params = config["params"]
        return cls(vocab, arrays, weights, int(params["train_tokens"]), list(params.get("em_history", [])))
