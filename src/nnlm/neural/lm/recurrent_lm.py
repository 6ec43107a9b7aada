"""A recurrent net (nnlm.neural.net.recurrent) behind the LanguageModel interface: its state carried through
each text.

Where the numbers come from, by entry point:
- streams (`stream_log_prob`, nnlm.capabilities.ScoresStreams, which nnlm.lm.chunked_log_probs calls for
  every split, file and text that `nnlm eval`, `nnlm score`, perplexity and mixing score): each token is
  predicted from the whole of its text before it. A text starts after a start-of-text token, at the stream's
  start, or where `since_start` says (lines scored on their own). A call that begins inside a text reads it
  from that text's start (Brown: at most one document back); a call that continues the last call on the same
  stream, or a new stream that shows only the last n-1 ids the last call ended with (nnlm.score_stream's next
  piece of a long file), goes on from the state kept (`_Carry`), so chunked scoring is exact and linear.
- states (`begin_state` / `advance`): the same state, one word at a time; the same numbers as the stream's
  (tests/test_recurrent.py), to float rounding.
- context rows (`log_prob`, `distribution`: what `nnlm.use.next_words` and a Mixture's distribution give it; a
  Mixture's scores come from its components' streams, nnlm.mixture.Mixture.stream_log_prob):
  the row read from the zero state after its last start-of-text token, or from its first id when it has none.
  Exact for a text shorter than n-1 words; for a longer one, the net seeing only the last n-1 words.
Scoring is exact fp32 (a bf16 Scoring scores exactly too: the product is small); an unnormalized one is refused.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from nnlm import threads
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, LMState
from nnlm.neural.lm.scoring import EXACT, Scoring, exact_pass, score_rows
from nnlm.neural.net.recurrent import RecurrentNPLM

__all__ = ["RecurrentLM"]

STREAM_BLOCK = 1 << 15  # positions read per call of the cell when scoring a stream (memory bounded)


@dataclass
class _Carry:
    """The state after the last stream call: which stream (identity), where it ended, the n-1 ids before
    that end, and the weights' version it was computed with."""

    stream_id: tuple[int, int]  # (id, length) of the array the caller passed
    end: int
    tail: np.ndarray
    version: tuple
    state: torch.Tensor


class RecurrentLM(LanguageModel):
    """A RecurrentNPLM as a LanguageModel (module docstring)."""

    def __init__(self, net: RecurrentNPLM, vocab: Vocabulary, pad_token: str, device: str | torch.device = "cpu",
                 scoring: Scoring = EXACT) -> None:
        if net.config.vocab_size != len(vocab):
            raise NnlmError(f"the network has {net.config.vocab_size} outputs but the vocabulary {len(vocab)} words")
        self.check_scoring(scoring)
        self.net, self.vocab, self.pad_token = net, vocab, pad_token
        self.order = net.config.order
        self.device = torch.device(device)
        self._scoring = scoring
        self._carry: _Carry | None = None

    # --- what every neural adapter offers (nnlm.capabilities) ---
    @property
    def scoring(self) -> Scoring:
        return self._scoring

    def check_scoring(self, scoring: Scoring) -> None:
        if not isinstance(scoring, Scoring):
            raise NnlmError(f"scoring must be a nnlm.neural.lm.scoring.Scoring, not {type(scoring).__name__}")
        if not scoring.normalized:
            raise NnlmError("--unnormalized: a recurrent net is trained with the full softmax and scores exactly; "
                            "score it without --unnormalized")

    def with_scoring(self, scoring: Scoring) -> RecurrentLM:
        return type(self)(self.net, self.vocab, self.pad_token, self.device, scoring)

    @property
    def config(self):
        return self.net.config

    def parameter_count(self) -> int:
        return self.net.config.parameter_count()

    def word_feature_matrix(self) -> np.ndarray:
        return self.net.C.detach().double().cpu().numpy()

    # --- scoring from the top layer's outputs ---
    def _version(self) -> tuple:
        return tuple(p._version for p in self.net.parameters())

    @torch.no_grad()
    def _log_probs(self, a: torch.Tensor, x: torch.Tensor, targets: torch.Tensor | None) -> np.ndarray:
        """log P(targets) [N] float64 from a [N, h] and x [N, m], or with targets None the distributions
        [N, |V|]; in blocks (memory bounded, threads re-checked per block)."""
        v = self.net.config.vocab_size
        rows = score_rows(v)
        if targets is not None:  # log P: the exact fp32 pass of every net (scoring.exact_pass)
            weights = torch.cat([*self.net.output_weights(), self.net.b[:, None]], dim=1)
            return exact_pass(weights, lambda lo, hi: self.net.output_operands(a[lo:hi], x[lo:hi]), len(a),
                              targets, rows)[0]
        out = np.empty((len(a), v), dtype=np.float64)
        for lo in range(0, len(a), rows):
            threads.check()
            y = self.net.logits(a[lo:lo + rows], x[lo:lo + rows])
            out[lo:lo + len(y)] = torch.softmax(y.double(), dim=1).cpu().numpy()
        return out

    def _ids(self, ids: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(ids, dtype=np.int64), device=self.device)

    # --- context rows ---
    def _check_rows(self, contexts: np.ndarray) -> np.ndarray:
        contexts = np.asarray(contexts)
        if contexts.ndim != 2 or contexts.shape[1] != self.context_size:
            raise NnlmError(f"contexts must have shape [N, {self.context_size}], got {list(contexts.shape)}")
        if contexts.size and (contexts.min() < 0 or contexts.max() >= len(self.vocab)):
            raise NnlmError("contexts hold ids outside the vocabulary")
        return contexts.astype(np.int64)

    @torch.no_grad()
    def _read_rows(self, contexts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(a, x) after each row, read from the zero state (reset at its start-of-text tokens)."""
        self.net.eval()
        pad = self.vocab.id(self.pad_token)
        a, x, _ = self.net.read(self._ids(contexts), contexts == pad)
        return a[:, -1], x[:, -1]

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        contexts = self._check_rows(contexts)
        targets = self._check_words(np.asarray(targets), "targets", allow_empty=True)
        if targets.shape != (len(contexts),):
            raise NnlmError(f"targets must have shape [{len(contexts)}], got {list(targets.shape)}")
        if not len(targets):
            return np.zeros(0, dtype=np.float64)
        return self._log_probs(*self._read_rows(contexts), self._ids(targets))

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        contexts = self._check_rows(contexts)
        if not len(contexts):
            return np.zeros((0, len(self.vocab)), dtype=np.float64)
        return self._log_probs(*self._read_rows(contexts), None)

    # --- streams ---
    def _state_before(self, key: tuple[int, int], stream: np.ndarray, first: int, pad_id: int,
                      text_start: int | None) -> torch.Tensor:
        """The state after reading stream[:first]'s text up to stream[first - 2], i.e. before reading
        stream[first - 1]: kept from the last call when it goes on from there, else read from the text's
        start (`text_start`: where `since_start` puts it; else after the last start-of-text token)."""
        k, carry = self.context_size, self._carry
        if carry is not None and carry.version == self._version() and carry.stream_id == key and carry.end == first:
            return carry.state
        last_pad = np.flatnonzero(stream[:max(first - 1, 0)] == pad_id)
        start = max(text_start or 0, int(last_pad[-1]) + 1 if len(last_pad) else 0)
        shows_start = text_start is not None or len(last_pad) > 0
        if (not shows_start and carry is not None and carry.version == self._version() and first >= k
                and np.array_equal(carry.tail, stream[first - k:first])):
            return carry.state  # the next piece of a long text, given with its last n-1 ids only
        state = self.net.zero_state(1)
        if first > start:  # read a start-of-text token, then stream[start : first - 1]
            warm = np.concatenate([[pad_id], stream[start:first - 1]])
            _, _, state = self.net.read(self._ids(warm[None, :]), (warm == pad_id)[None, :], state)
        return state

    @torch.no_grad()
    def stream_log_prob(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                        since_start: np.ndarray | None = None) -> np.ndarray:
        """ln P of stream[first:first + count], each token given its text before it (module docstring)."""
        self.net.eval()
        key = (id(stream), len(stream))
        stream = np.asarray(stream, dtype=np.int64)
        if count == 0:
            return np.zeros(0, dtype=np.float64)
        positions = np.arange(first, first + count)
        inputs = np.where(positions >= 1, stream[np.maximum(positions - 1, 0)], pad_id)
        if since_start is not None:
            inputs = np.where(np.asarray(since_start) == 0, pad_id, inputs)
        text_start = None if since_start is None else max(first - int(since_start[0]), 0)
        state = self._state_before(key, stream, first, pad_id, text_start)
        out = np.empty(count, dtype=np.float64)
        targets = self._ids(stream[first:first + count])
        for lo in range(0, count, STREAM_BLOCK):
            block = inputs[lo:lo + STREAM_BLOCK]
            a, x, state = self.net.read(self._ids(block[None, :]), (block == pad_id)[None, :], state)
            out[lo:lo + len(block)] = self._log_probs(a[0], x[0], targets[lo:lo + len(block)])
        k, end = self.context_size, first + count
        tail = stream[max(end - k, 0):end].copy()
        if since_start is not None or len(tail) < k:
            tail = np.full(k, -1)  # (a line scored on its own is never continued by the next stream)
        # the state after reading the last scored token's input; the next call reads stream[end - 1] from it
        self._carry = _Carry(key, end, tail, self._version(), state)
        return out

    # --- states ---
    @torch.no_grad()
    def begin_state(self, batch: int = 1, history: Sequence[int] | np.ndarray | None = None) -> LMState:
        """The state after a start-of-text token and `history`: `extra["state"]` [batch, parts, layers, h]
        holds the state before reading the context's last id (which `advance` reads first)."""
        base = super().begin_state(batch, history)
        self.net.eval()
        pad = self.vocab.id(self.pad_token)
        past = np.concatenate([[pad], np.asarray([] if history is None else history, dtype=np.int64)])
        state = self.net.zero_state(1)
        if len(past) > 1:
            _, _, state = self.net.read(self._ids(past[None, :-1]), (past[:-1] == pad)[None, :], state)
        base.extra = {"state": state.expand(batch, -1, -1, -1).contiguous(), "last": self._ids(past[-1:]).repeat(batch)}
        return base

    @torch.no_grad()
    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        words = self.check_step(state, words)
        if set(state.extra) != {"state", "last"}:
            raise NnlmError("this state was not made by this model (use model.begin_state())")
        self.net.eval()
        pad = self.vocab.id(self.pad_token)
        last = state.extra["last"].cpu().numpy()
        a, x, after = self.net.read(self._ids(last[:, None]), (last == pad)[:, None], state.extra["state"])
        log_probs = self._log_probs(a[:, 0], x[:, 0], self._ids(words))
        moved = self.shift_state(state, words)
        moved.extra = {"state": after, "last": self._ids(words)}
        return (log_probs * LOG10_E if log10 else log_probs), moved

    def state_owner(self) -> str:
        """The default owner and the weights' version: a state is stale once the net is trained."""
        return f"{super().state_owner()}/{hash(self._version()):x}"
