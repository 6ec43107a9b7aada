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

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.vocab import Vocabulary, start_token
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, LMState
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
    # the compiled query engine (nnlm.ngram.query_engine), built at the first query, whatever asks it; False: none (the
    # tables are not suffix-closed, or it would not fit its memory budget), so the numpy path serves
    _engine: Any = field(default=None, init=False, repr=False, compare=False)
    # the saved model directory these tables were loaded from: its engine tables are mapped instead of built
    # (nnlm.ngram.engine_file), where they check out
    saved_in: Path | None = field(default=None, init=False, repr=False, compare=False)
    source_crc: list[int] | None = field(default=None, init=False, repr=False, compare=False)  # (engine_file.attach)

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

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the engine (rebuilt at the first query where it is unpickled)."""
        return {**self.__dict__, "_engine": None}

    def query_engine(self, streaming: bool = False) -> Any:
        """The compiled engine of these tables (built once, at the first call, or mapped from the directory they
        were loaded from: nnlm.ngram.engine_file), or None if they keep the numpy path. A mapped table is copied
        into 2 MiB pages at the first call that is not `streaming` (a stream's probes are prefetched; the
        per-call APIs' are not: engine_file.promote), and by streams once they would have paid for the copy
        (engine_file.promote_when_it_pays). The tables must not be changed in place after it is built."""
        if self._engine is None:
            from nnlm.ngram import engine_tables

            engine = None
            if engine_tables.ENABLED and self.saved_in is not None:
                from nnlm.ngram.engine_file import load_engine

                engine = load_engine(self.saved_in, self)
            if engine_tables.ENABLED and engine is None:
                from nnlm.ngram.query_engine import build_backoff_engine

                engine = build_backoff_engine(self.vocab_size, self.keys, self.log10_prob, self.log10_backoff)
            self._engine = engine if engine is not None else False
        if self._engine and not streaming:
            if self._engine.mapped:
                from nnlm.ngram.engine_file import promote

                promote(self._engine)
            if not hasattr(self._engine, "log10_prob"):  # loaded without numba: its compiled queries, now needed
                from nnlm.ngram.query_engine import with_kernels

                self._engine = with_kernels(self._engine)
        return self._engine or None

    def log10_prob_of(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log10 P(target | context) for each row, by the back-off rule (the compiled engine when there is one)."""
        engine = self.query_engine()
        if engine is None:
            return self.reference_log10_prob_of(contexts, targets)
        ctx = self._context(contexts)
        targets = np.asarray(targets, dtype=np.int64)
        if targets.shape != (len(ctx),):
            raise ValueError(f"targets must be [N] with N = {len(ctx)} context rows, got shape {targets.shape}")
        for ids in (targets, ctx):  # the compiled loops do not check bounds
            self._check_ids(ids)
        return engine.log10_prob(ctx, targets)

    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise IndexError(f"token ids must be in 0 .. {self.vocab_size - 1}")

    def token_log10(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                    since_start: np.ndarray | None = None, scale: float = 1.0,
                    then: float = 1.0) -> tuple[np.ndarray, float] | None:
        """log10 P of each token stream[first : first + count] given the order-1 ids before it in `stream`
        (`pad_id` before its start, and with `since_start` before each token's text: nnlm.lm.chunked_log_probs'
        rows), times `scale` then `then`, and their sum, in one compiled call over the stream
        (nnlm.ngram.stream_scoring) or, while numba is not loaded, by numpy probes of the same tables
        (nnlm.ngram.numpy_probe); None without the engine. The numbers of `log10_prob_of`."""
        engine = self._engine if self._engine else self.query_engine(streaming=True)
        if engine is None:
            return None
        if engine.mapped:
            from nnlm.ngram.engine_file import promote_when_it_pays

            promote_when_it_pays(engine, count)
        from nnlm.ngram.numpy_probe import probed_while_numba_is_absent

        probed = probed_while_numba_is_absent(engine, stream, first, count, pad_id, since_start, scale, then)
        if probed is not None:
            return probed
        lo = first - len(self.keys) + 1
        if not (lo <= 0 and len(stream) == first + count and stream.dtype == np.int64 and stream.flags.c_contiguous):
            lo = max(lo, 0)  # (else: a stream made for this call, taken as it is)
            stream, first = np.ascontiguousarray(stream[lo:first + count], dtype=np.int64), first - lo
        from nnlm.ngram.stream_scoring import scaled_token_log10

        return scaled_token_log10(engine, stream, first, count, pad_id, since_start, scale, then)  # (checks the ids)

    def ascii_line_scorer(self, lexicon: Any, pad_id: int, scale: float = 1.0, then: float = 1.0) -> Any:
        """A callable giving `token_log10` (times `scale`, then `then`) of an ASCII line encoded by `lexicon`
        (nnlm.ngram.ascii_tokens) from the start of a text, their sum and its number of OOV words, in one compiled
        call (nnlm.ngram.stream_scoring.AsciiLineScorer); None without the engine."""
        engine = self.query_engine()
        if engine is None:
            return None
        from nnlm.ngram.stream_scoring import AsciiLineScorer

        return AsciiLineScorer(engine, lexicon, pad_id, scale, then)

    def state_extra(self, contexts: np.ndarray) -> dict[str, np.ndarray]:
        """What an LMState of these tables keeps beside its context ids (empty without the engine): the
        context suffixes' back-offs and how many are listed, so that a step looks up only the new word."""
        engine = self.query_engine()
        if engine is None:
            return {}
        backoffs, lengths = engine.context_state(self._context(contexts))
        return {"backoff_log10": backoffs, "backoff_matched": lengths}

    def step(self, contexts: np.ndarray, extra: dict[str, np.ndarray],
             words: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]] | None:
        """One compiled step of B states (rows of `contexts`, [B, order-1], with `extra` from `state_extra`
        or an earlier step): log10 P(words[i] | row i), the next contexts and extra; None without the engine."""
        engine = self.query_engine()
        if engine is None:
            return None
        contexts = np.ascontiguousarray(self._context(contexts), dtype=np.int64)
        backoffs, lengths = extra.get("backoff_log10"), extra.get("backoff_matched")
        if backoffs is None or lengths is None or len(backoffs) != len(contexts):
            backoffs, lengths = engine.context_state(contexts)  # a state made without them
        log10, contexts, backoffs, lengths = engine.advance(contexts, np.ascontiguousarray(backoffs, dtype=np.float64),
                                                            np.ascontiguousarray(lengths, dtype=np.int64),
                                                            np.ascontiguousarray(words, dtype=np.int64))
        return log10, contexts, {"backoff_log10": backoffs, "backoff_matched": lengths}

    def text_log10(self, start: np.ndarray, ids: np.ndarray) -> float | None:
        """Sum of log10 P of the stream `ids` after the context `start` [order-1], in one compiled call;
        None without the engine."""
        engine = self.query_engine()
        return None if engine is None else engine.stream_log10(start, ids)

    def texts_log10(self, start: np.ndarray, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray | None:
        """log10 P of each text ids[bounds[i]:bounds[i+1]] after the context `start`, in one compiled call;
        None without the engine."""
        engine = self.query_engine()
        return None if engine is None else engine.texts_log10(start, ids, bounds)

    def reference_log10_prob_of(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log10 P(target | context) for each row, by the back-off rule, all rows at once in numpy: the reference
        the compiled engine is tested against."""
        ctx = self._context(contexts)
        targets = np.asarray(targets, dtype=np.int64)
        v = self.vocab_size
        result = self.log10_prob[0][targets]
        for m in range(1, self.order):  # P given the last m context words, from P given m-1
            if not len(self.keys[m - 1]):  # no m-grams (a pruned model's empty order): no longer context is listed
                break
            hist = self.index(ctx[:, ctx.shape[1] - m:])
            listed = hist >= 0
            backoff = np.where(listed, self.log10_backoff[m - 1][np.maximum(hist, 0)], 0.0)
            gram, hit = search(self.keys[m], np.maximum(hist, 0) * v + targets)
            hit &= listed
            if not len(self.keys[m]):  # an order with no entries (a pruned model's): everything backs off
                result = result + backoff
                continue
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
            return cls(vocab_size,  # (arrays read from a file are new: no copy where the dtype is already right)
                       [arrays[f"keys_{k}"].astype(np.int64, copy=False) for k in range(1, order + 1)],
                       [arrays[f"log10_prob_{k}"].astype(np.float64, copy=False) for k in range(1, order + 1)],
                       [arrays[f"log10_backoff_{k}"].astype(np.float64, copy=False) for k in range(1, order + 1)])
        except (KeyError, ValueError) as exc:
            raise NnlmError(f"saved back-off tables are incomplete or inconsistent ({exc})") from None


def quick_step_words(model: LanguageModel, state: LMState, words: Sequence[int] | np.ndarray) -> np.ndarray:
    """`model.check_step(state, words)` without its cost for a beam's usual call (an int64 array, one word per
    row of a state of this model); the compiled step checks the ids' range. Anything else goes through
    check_step, for its checks and messages."""
    if (type(words) is np.ndarray and words.dtype == np.int64 and words.ndim == 1 and type(state) is LMState
            and 0 < len(words) == len(state) and state.owner == model.state_owner()):
        return words
    return model.check_step(state, words)


def start_context(model: LanguageModel) -> np.ndarray:
    """The context at the start of a text, int64 [order-1] of the start token (kept on the model: the
    per-sentence call should not look it up each time)."""
    start = getattr(model, "_start_context", None)
    if start is None:
        start = np.full(model.context_size, model.vocab.id(start_token(model.vocab)), dtype=np.int64)
        model._start_context = start
    return start


class KeptStateOwner(LanguageModel):
    """A model whose `state_owner` string is made once (a step compares it; the models here are immutable)."""

    def state_owner(self) -> str:
        kept = self.__dict__.get("_state_owner")
        if kept is None or kept[0] != id(self):  # a copy of the model is another owner
            kept = self._state_owner = (id(self), super().state_owner())
        return kept[1]


class BackoffModel(KeptStateOwner):
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

    # the stateful API in one compiled call per step (the base class's numbers, through the query engine)
    def begin_state(self, batch: int = 1, history: Sequence[int] | np.ndarray | None = None) -> LMState:
        state = super().begin_state(batch, history)
        state.extra.update(self.tables.state_extra(state.context))
        return state

    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        words = quick_step_words(self, state, words)
        try:
            stepped = self.tables.step(state.context, state.extra, words)
        except IndexError:  # a word outside the vocabulary: check_step says which
            self.check_step(state, words)
            raise
        if stepped is None:
            return super().advance(state, words, log10)
        log10_probs, contexts, extra = stepped
        return (log10_probs if log10 else log10_probs * LN10), LMState(contexts, state.owner, extra)

    def stream_log_prob(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                        since_start: np.ndarray | None = None) -> np.ndarray | None:
        """ln P of the tokens stream[first : first + count] as `nnlm.lm.chunked_log_probs` gives them (the same
        numbers), in one compiled call (nnlm.capabilities.ScoresStreams); None without the engine."""
        scored = self.tables.token_log10(stream, first, count, pad_id, since_start, LN10)  # log_prob's log10 * LN10
        return None if scored is None else scored[0]

    def ascii_line_scorer(self, lexicon: Any, pad_id: int) -> Any:
        """A callable giving, for an ASCII line, its words' `stream_log_prob(...) * LOG10_E` from the start of a text
        (what `nnlm score` reports per word, to the bit), their sum in token order and its number of OOV words,
        encoding and scoring in one compiled call: a one-line `score_lines` call (nnlm.compiled_lines, which keeps
        it on the model); None without the engine."""
        return self.tables.ascii_line_scorer(lexicon, pad_id, LN10, LOG10_E)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (and deep-copied) without the kept line scorer, which holds the engine (made again when used)."""
        return {key: value for key, value in self.__dict__.items() if key != "_ascii_line"}

    def text_log10(self, ids: np.ndarray) -> float | None:
        """Sum of log10 P of the token ids `ids` (int64) from the start of a text (the start token fills the
        context), in one compiled call (nnlm.score_sentence); None without the engine."""
        return self.tables.text_log10(start_context(self), ids)

    def texts_log10(self, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray | None:
        """log10 P of each text ids[bounds[i]:bounds[i+1]], each from the start of a text (nnlm.score_sentences)."""
        return self.tables.texts_log10(start_context(self), ids, bounds)

    def save(self, directory: Path) -> None:
        """The arrays, and the query engine's tables beside them (nnlm.ngram.engine_file)."""
        from nnlm.ngram.engine_file import save_engine

        save_arrays(directory, self.kind, self.order, self.vocab, self.tables.arrays(), self.params,
                    beside=lambda tmp: save_engine(tmp, self.tables))

    @classmethod
    def load(cls, directory: Path) -> BackoffModel:
        config, vocab, arrays = load_arrays(directory)
        order = config.get("order")
        if not isinstance(order, int) or not 1 <= order <= 6:
            raise NnlmError(f"{directory}: config.json has no valid order")
        tables = BackoffTables.from_arrays(len(vocab), order, arrays)
        from nnlm.ngram.engine_file import attach

        attach(tables, Path(directory))  # its engine tables are mapped from there, where they check out
        return cls(vocab, tables, config.get("params"))
