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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnlm.data.corpus import Corpus
from nnlm.data.vocab import Vocabulary, start_token
from nnlm.errors import NnlmError

EVAL_CHUNK = 1 << 15  # positions scored per call when walking a split
LOG10_E = float(np.log10(np.e))


@dataclass
class LMState:
    """Where B hypotheses stand in their texts, for scoring them one word at a time (decoders).

    `context` holds each row's last n-1 token ids, oldest first (what `log_prob` would be given);
    `extra` holds what a model keeps to make the next step cheap (the NPLM's hidden pre-activation,
    a back-off model's matched lengths), each an array, a tensor or an LMState (a mixture keeps its
    components' states) with B rows. `owner` names the model that made the state, so a state is never
    advanced by a model it does not belong to."""

    context: np.ndarray
    owner: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.context)

    def take(self, rows: Sequence[int] | np.ndarray) -> LMState:
        """The states of `rows`, in that order (a beam keeps, drops and copies hypotheses)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (len(rows) and (rows.min() < -len(self) or rows.max() >= len(self))):
            raise NnlmError(f"state rows must be a list of indices below {len(self)}")
        return LMState(self.context[rows], self.owner, {k: _take(v, rows) for k, v in self.extra.items()})

    @staticmethod
    def concat(states: Sequence[LMState]) -> LMState:
        """One state of all the rows of `states` (all made by one model), in order."""
        if not states:
            raise NnlmError("no states to join")
        owners = {s.owner for s in states}
        if len(owners) != 1:
            raise NnlmError("states of different models cannot be joined")
        extra = {k: _cat([s.extra[k] for s in states]) for k in states[0].extra}
        return LMState(np.concatenate([s.context for s in states]), states[0].owner, extra)


def _take(value: Any, rows: np.ndarray) -> Any:
    """`value`'s rows: a nested state takes them itself, torch tensors take a tensor of indices."""
    if isinstance(value, LMState):
        return value.take(rows)
    if isinstance(value, np.ndarray):
        return value[rows]
    import torch
    return value[torch.as_tensor(rows, device=value.device)]


def _cat(values: list[Any]) -> Any:
    if isinstance(values[0], LMState):
        return LMState.concat(values)
    if isinstance(values[0], np.ndarray):
        return np.concatenate(values)
    import torch
    return torch.cat(values)


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

    # --- scoring one word at a time (decoders: KenLM's BaseScore(state_in, word, state_out)) ---
    # The defaults below keep only the context ids and call log_prob, which is right for every
    # model; a model that can make a step cheaper overrides `begin_state` and `advance` (and keeps
    # what it needs in LMState.extra), with the same numbers to floating-point rounding.

    def state_owner(self) -> str:
        """The name states of this model carry (kind, order, vocabulary, and which object)."""
        return f"{self.kind_name()}/{self.order}/{self.vocab.fingerprint}/{id(self):x}"

    def begin_state(self, batch: int = 1, history: Sequence[int] | np.ndarray | None = None) -> LMState:
        """`batch` identical states at the start of a text (the start token fills the context), or
        after `history`, a sequence of token ids."""
        if not isinstance(batch, int | np.integer) or batch < 1:
            raise NnlmError(f"a state batch needs at least one row, got {batch!r}")
        past = self._check_words(np.asarray([] if history is None else history), "history", allow_empty=True)
        row = text_stream(past[:0], self.context_size, start_id(self), past)  # the context after `history`
        return LMState(np.tile(row, (int(batch), 1)), self.state_owner())

    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        """P(words[i] | state row i) for every row in one call, and the states after those words.
        Natural log by default, log10 with `log10=True` (KenLM's unit); float64 [B]."""
        words = self.check_step(state, words)
        log_probs = self.log_prob(state.context, words)
        return (log_probs * LOG10_E if log10 else log_probs), self.shift_state(state, words)

    def shift_state(self, state: LMState, words: np.ndarray) -> LMState:
        """The context ids after each row's word (extra left to the models that keep some)."""
        k = self.context_size
        context = np.concatenate([state.context[:, 1:], words[:, None]], axis=1) if k else state.context
        return LMState(context, state.owner, {})

    def check_step(self, state: LMState, words: Sequence[int] | np.ndarray) -> np.ndarray:
        """`words` as int64 [B] after checking that `state` is this model's and the ids are in V."""
        if not isinstance(state, LMState) or state.owner != self.state_owner():
            raise NnlmError("this state was not made by this model (use model.begin_state())")
        words = self._check_words(np.asarray(words), "words")
        if len(words) != len(state):
            raise NnlmError(f"{len(words)} words for {len(state)} states: give one word per state")
        return words

    def _check_words(self, words: np.ndarray, what: str, allow_empty: bool = False) -> np.ndarray:
        if words.ndim != 1 or not (words.size == 0 or np.issubdtype(words.dtype, np.integer)):
            raise NnlmError(f"{what} must be a flat list of integer token ids")
        if words.size == 0 and not allow_empty:
            raise NnlmError(f"no {what} given: a step needs at least one")
        words = words.astype(np.int64)
        if words.size and (words.min() < 0 or words.max() >= len(self.vocab)):
            bad = int(words[(words < 0) | (words >= len(self.vocab))][0])
            raise NnlmError(f"{what}: token id {bad} is outside the vocabulary (0 .. {len(self.vocab) - 1})")
        return words

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


def start_id(model: LanguageModel) -> int:
    """The id that fills the context before a text's first token (`data.vocab.start_token`)."""
    return model.vocab.id(start_token(model.vocab))


def text_stream(ids: np.ndarray, context_size: int, pad_id: int, history: np.ndarray | None = None) -> np.ndarray:
    """A text's ids behind the `context_size` ids before it: the last of `history`, `pad_id` filling the rest.
    Position k + i holds ids[i], so `contexts(stream, k + i, k, pad_id)` is token i's context; with no ids,
    the stream is the context after `history`."""
    k = context_size
    past = np.asarray([] if history is None else history, dtype=np.int64)
    past = past[max(len(past) - k, 0):] if k else past[:0]
    return np.concatenate([np.full(k - len(past), pad_id, dtype=np.int64), past, np.asarray(ids, dtype=np.int64)])


def text_contexts(ids: np.ndarray, context_size: int, pad_id: int, history: np.ndarray | None = None) -> np.ndarray:
    """Context rows [len(ids), k] of `ids` read as one text from its start (or after `history`)."""
    stream = text_stream(ids, context_size, pad_id, history)
    return contexts(stream, np.arange(context_size, len(stream)), context_size, pad_id)


def chunked_log_probs(model: LanguageModel, stream: np.ndarray, first: int, count: int, pad_id: int,
                      since_start: np.ndarray | None = None, chunk: int = EVAL_CHUNK,
                      log_prob: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """ln P of the `count` tokens stream[first:first + count], each given the n-1 ids before it in `stream`
    (`pad_id` before the stream's start), in calls of `chunk` positions: memory bounded by the chunk however
    long the stream, and the numbers of scoring it whole. The one chunked scorer every face uses.

    `since_start` (int [count]): how many tokens of its own text come before each token, for texts laid end
    to end that are each scored from their start: context words from before a token's text are `pad_id`.
    `log_prob` (contexts, targets) -> ln P scores each chunk instead of `model.log_prob` (a caller that keeps
    something else the model computes on the way: `nnlm eval`'s log Z)."""
    k = model.context_size
    out = np.empty(count, dtype=np.float64)
    scores_streams = log_prob is None and getattr(model, "stream_log_prob", None)  # nnlm.capabilities.ScoresStreams
    log_prob = log_prob or model.log_prob
    for lo in range(0, count, chunk):
        if scores_streams:  # a query engine: the chunk in one compiled call, no context rows made
            part = scores_streams(stream, first + lo, min(chunk, count - lo), pad_id,
                                  None if since_start is None else since_start[lo:lo + chunk])
            if part is not None:
                out[lo:lo + len(part)] = part
                continue
            scores_streams = None
        positions = np.arange(first + lo, first + min(lo + chunk, count))
        ctx = stream_contexts(stream, positions, k, pad_id, None if since_start is None else since_start[lo:])
        out[lo:lo + len(positions)] = log_prob(ctx, stream[positions].astype(np.int64))
    return out


def stream_contexts(stream: np.ndarray, positions: np.ndarray, k: int, pad_id: int,
                    since_start: np.ndarray | None = None) -> np.ndarray:
    """The k ids before each of `positions` in `stream` [len(positions), k] (`pad_id` before the stream's start,
    and before a token's own text where `since_start`, aligned with `positions`, says where it starts)."""
    ctx = contexts(stream, positions, k, pad_id)
    if since_start is not None and k:
        before = since_start[:len(positions), None] < np.arange(k, 0, -1)[None, :]
        ctx = np.where(before, pad_id, ctx)
    return ctx


def stream_log_probs(model: LanguageModel, ids: np.ndarray, history: np.ndarray | None = None,
                     chunk: int = EVAL_CHUNK) -> np.ndarray:
    """ln P of every token of `ids`, read as a text from its start (or after `history`, a sequence of ids)."""
    k, pad = model.context_size, start_id(model)
    with model.long_pass(len(ids)):  # as split_log_probs: the same scores for the same tokens
        return chunked_log_probs(model, text_stream(ids, k, pad, history), k, len(ids), pad, chunk=chunk)


def split_log_probs(model: LanguageModel, corpus: Corpus, split: str, chunk: int = EVAL_CHUNK,
                    log_prob: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """log P of every token of `split`, each predicted from the tokens before it in the stream (scored by
    `log_prob` instead of `model.log_prob` when given, as `chunked_log_probs`)."""
    if model.vocab.fingerprint != corpus.vocab.fingerprint:
        raise NnlmError(f"the model's vocabulary ({len(model.vocab)} words) is not the corpus "
                        f"{corpus.name}'s ({len(corpus.vocab)} words): give the corpus it was built on "
                        "(--corpus and the same --min-count/--max-vocab/--vocab-from)")
    ids = corpus.split(split)
    if len(ids) < model.order:
        raise NnlmError(f"the {split} split has {len(ids)} tokens, fewer than the model's order {model.order}")
    with model.long_pass(len(ids)):
        return chunked_log_probs(model, corpus.stream(), corpus.split_offset(split), len(ids), corpus.pad_id,
                                 chunk=chunk, log_prob=log_prob)


def perplexity_from_log_probs(log_probs: np.ndarray) -> float:
    """exp(-mean natural-log probability): the definition used for every model and split."""
    return float(np.exp(-np.mean(log_probs)))


def perplexity(model: LanguageModel, corpus: Corpus, split: str) -> float:
    """Perplexity of `model` on a split of `corpus`, every token counted (markers and `<unk>` too)."""
    return perplexity_from_log_probs(split_log_probs(model, corpus, split))
