"""Scoring a text of any size in bounded memory: the core of `nnlm score` and of nnlm.use's text functions.

The text comes as pieces of lines (nnlm.textfile): each piece is cut into tokens by
nnlm.data.tokenize's rule, encoded, and scored in chunks of `EVAL_CHUNK` positions, the last n-1
ids carried from chunk to chunk and piece to piece, so the scores are exactly those of scoring the
whole text at once. A line's totals are given out as soon as the line ends. What is held at any
time is one piece (a few MB of text), its tokens and their scores: memory does not grow with the
input nor with a line.

A line of a file is a "\\n"-line; it may hold several paragraphs (a "\\r", "\\f", "\\x85",
"\\u2028", ... inside it ends one), each closed by its `<p>`: the line's report sums them.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from nnlm.data.tokenize import text_tokens
from nnlm.data.vocab import PARAGRAPH, UNK
from nnlm.errors import NnlmError
from nnlm.lm import EVAL_CHUNK, LOG10_E, LanguageModel, chunked_log_probs, start_id
from nnlm.textfile import Piece

# --oov-vector gives an unknown word the feature vector of its first context and keeps it for the rest
# of the text, so the text (or, with --independent, the line) is scored in one call: this many tokens at most.
OOV_VECTOR_MAX_TOKENS = 2_000_000
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines ends a line
_BREAK = re.compile(f"[{_BREAKS}]")


@dataclass
class LineScore:
    line_number: int
    log10_prob: float
    tokens: int        # words + one `<p>` per non-blank paragraph of the line
    oov: int
    word_log10: np.ndarray

    @property
    def perplexity(self) -> float:
        return float(10 ** (-self.log10_prob / self.tokens))


@dataclass
class WordScores:
    """Some tokens of a line, scored (a long line gives several, in order, before its LineScore)."""
    line_number: int
    tokens: list[str]
    word_log10: np.ndarray


@dataclass
class BadLine:
    """A line that is not UTF-8 (skipped: the context goes on from before it)."""
    line_number: int
    reason: str = "not valid UTF-8"


class ParagraphCutter:
    """nnlm.data.tokenize's rule over a line given in pieces: the tokens of the pieces, in order, are
    `text_tokens` of the whole line. Only where a paragraph is cut does this need to remember
    something: whether the paragraph's part so far had words (then a `<p>` closes it)."""

    def __init__(self) -> None:
        self.open_words = False

    def tokens(self, text: str, ends: bool) -> list[str]:
        """Tokens of the next piece `text` of a line; `ends`: the line ends with it."""
        if not self.open_words and ends:
            return text_tokens(text)
        if ends:
            closed, tail = text, ""
        else:
            cut = max(text.rfind(c) for c in _BREAKS) + 1
            closed, tail = text[:cut], text[cut:]
        out: list[str] = []
        if closed or ends:
            if self.open_words:
                first = _BREAK.search(closed)
                if not closed[:first.start() if first else len(closed)].split():
                    out.append(PARAGRAPH)  # the open paragraph's words were given out before: close it
            out += text_tokens(closed)
            self.open_words = False
        if tail:
            words = tail.split()
            out += words
            self.open_words = self.open_words or bool(words)
        return out


@dataclass
class _Line:
    """The running totals of the line being scored."""
    number: int
    log10_prob: float = 0.0
    tokens: int = 0
    oov: int = 0
    words: list[np.ndarray] = field(default_factory=list)
    history: np.ndarray | None = None  # the context before its first token (to take an undecodable line back)


class ScoreStream:
    """The scores of a text given as pieces (nnlm.textfile.read_pieces / line_pieces), line by line.

    Iterating gives `LineScore`s (and `WordScores` / `BadLine`s with `events()`), each as soon as it
    is known; the totals (`log10_prob`, `tokens`, `oov`, `lines`, `blank`, `skipped`) are those of
    what was given so far, the whole text's once it is exhausted. `carry_context=False` starts each
    line from the start of a text. `keep_words=False` leaves LineScore.word_log10 empty (a very long
    line's words would otherwise be held); `word_events=True` gives them as WordScores instead.
    `tokens_hint`: about how many tokens the text has (a neural model prepares a long pass)."""

    def __init__(self, model: LanguageModel, pieces: Iterable[Piece], carry_context: bool = True,
                 skip_bad: bool = False, oov_vector: bool = False, keep_words: bool = True,
                 word_events: bool = False, tokens_hint: int = 0) -> None:
        self.model, self.pieces, self.carry = model, pieces, carry_context
        self.skip_bad, self.keep_words, self.word_events = skip_bad, keep_words, word_events
        self.tokens_hint = tokens_hint
        self.oov_vector = require_oov_vector(model) if oov_vector else None
        k = model.context_size
        self.k, self.pad = k, start_id(model)
        self.history = np.full(k, self.pad, dtype=np.int64)
        self.log10_prob, self.tokens, self.oov, self.lines, self.blank = 0.0, 0, 0, 0, 0
        self.skipped: list[tuple[int, str]] = []
        self._cutter = ParagraphCutter()
        self._line: _Line | None = None
        self._held: list[tuple[int, list[str], int]] = []  # --oov-vector: tokens scored at the end
        self._held_tokens = 0
        self._piece_history, self._offset = self.history, 0  # the context a piece started from; --independent

    def __iter__(self) -> Iterator[LineScore]:
        return (e for e in self.events() if isinstance(e, LineScore))

    @property
    def perplexity(self) -> float:
        return float(10 ** (-self.log10_prob / self.tokens)) if self.tokens else float("nan")

    def events(self) -> Iterator[LineScore | WordScores | BadLine]:
        with self.model.long_pass(self.tokens_hint) if self.tokens_hint else nullcontext():
            for piece in self.pieces:
                yield from self._piece(piece)
            if self.oov_vector is not None and self.carry:
                yield from self._score_held()

    # ---- one piece ------------------------------------------------------------------------------

    def _piece(self, piece: Piece) -> Iterator[LineScore | WordScores | BadLine]:
        """Score one piece: its words cut and encoded, scored in one pass (or held, with --oov-vector), then its
        lines given out as they end."""
        if piece.continues and piece.texts[0] is None and self.carry and self._line is not None \
                and self._line.history is not None:  # a long line found undecodable: take its scored pieces back
            self.history = self._line.history  # before the lines after it are scored from it
        token_lists, ids, counts, oov = self._encode(piece)
        if self.oov_vector is not None:
            yield from self._hold(piece, token_lists, ids, oov)
            return
        lp10 = self._log_probs(ids, counts, piece) * LOG10_E
        sums = np.bincount(np.repeat(np.arange(len(counts)), counts), weights=lp10, minlength=len(counts))
        starts = np.concatenate([[0], np.cumsum(counts)])
        for i, text in enumerate(piece.texts):
            yield from self._line_part(piece, i, text, token_lists[i], ids, starts, lp10, float(sums[i]), int(oov[i]))
        if not piece.open:
            self._line = None

    def _encode(self, piece: Piece) -> tuple[list[list[str]], np.ndarray, np.ndarray, np.ndarray]:
        """(each text's tokens, all their ids, tokens per text, OOV words per text) of a piece; an undecodable
        text (None) has none. A text that goes on in the next piece is cut by the paragraph cutter, which keeps
        what is open across pieces."""
        texts, last = piece.texts, len(piece.texts) - 1
        token_lists: list[list[str]] = []
        for i, text in enumerate(texts):  # a loop over lines (the words are cut by str.split in C)
            if text is None:
                token_lists.append([])
            elif (i == 0 and piece.continues) or (i == last and piece.open):
                token_lists.append(self._cutter.tokens(text, ends=not (i == last and piece.open)))
            else:
                token_lists.append(text_tokens(text))
        counts = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(texts))
        flat = list(chain.from_iterable(token_lists))
        ids = self.model.vocab.encode(flat).astype(np.int64)
        unknown = ids == self.model.vocab.unk_id
        literal = [i for i in np.flatnonzero(unknown) if flat[i] == UNK]  # "<unk>" itself is in V: not OOV
        unknown[literal] = False
        oov = np.bincount(np.repeat(np.arange(len(texts)), counts)[unknown], minlength=len(texts))
        return token_lists, ids, counts, oov

    def _line_part(self, piece: Piece, i: int, text: str | None, tokens: list[str], ids: np.ndarray, starts: np.ndarray,
                   lp10: np.ndarray, total: float, oov: int) -> Iterator[LineScore | WordScores | BadLine]:
        """Add text i of a piece (its scores lp10[starts[i]:starts[i+1]], their sum `total`) to its line, and give
        the line out if it ends here."""
        number = piece.first_line + i
        continued = i == 0 and piece.continues
        if text is None:
            yield from self._bad(number, continued)
            return
        if not continued:
            self._line = _Line(number)
        line = self._line
        open_end = i == len(piece.texts) - 1 and piece.open
        if open_end and not continued:  # remember the context the line started from
            line.history = self._context_before(ids, starts[i])
        if tokens:
            words = lp10[starts[i]:starts[i + 1]]
            line.log10_prob += total
            line.tokens += len(tokens)
            line.oov += oov
            if self.keep_words:
                line.words.append(words)
            if self.word_events:
                yield WordScores(number, tokens, words)
        if not open_end:
            yield from self._end_line()

    def _context_before(self, ids: np.ndarray, start: int) -> np.ndarray:
        """The last n-1 ids before position `start` of this piece (the carried history first)."""
        k = self.k
        return np.concatenate([self._piece_history, ids[max(start - k, 0):start]])[-k:] if k else self._piece_history

    def _end_line(self) -> Iterator[LineScore]:
        line = self._line
        if line.tokens == 0:
            self.blank += 1
            return
        words = np.concatenate(line.words) if line.words else np.zeros(0, dtype=np.float64)
        self.log10_prob += line.log10_prob
        self.tokens += line.tokens
        self.oov += line.oov
        self.lines += 1
        yield LineScore(line.number, line.log10_prob, line.tokens, line.oov, words)

    def _bad(self, number: int, continued: bool) -> Iterator[BadLine]:
        if not self.skip_bad:
            raise NnlmError(f"line {number} is not valid UTF-8 (use --skip-bad to skip such lines)")
        self._line, self._offset = None, 0
        self._cutter = ParagraphCutter()
        self.skipped.append((number, BadLine.reason))
        yield BadLine(number)

    # ---- scoring ---------------------------------------------------------------------------------

    def _log_probs(self, ids: np.ndarray, counts: np.ndarray, piece: Piece) -> np.ndarray:
        """ln P of each id, in chunks of EVAL_CHUNK positions, from the carried history (or, with
        carry_context=False, from the start of each line)."""
        k = self.k
        self._piece_history = self.history
        full = np.concatenate([self.history, ids])
        offset = None
        if not self.carry:  # tokens of its line before each token (a long line's earlier pieces too)
            offset = np.arange(len(ids)) - np.repeat(np.cumsum(counts) - counts, counts)
            carried = self._offset if piece.continues else 0
            offset[:counts[0]] += carried
            self._offset = int(counts[-1]) + (carried if len(counts) == 1 else 0) if piece.open else 0
        out = chunked_log_probs(self.model, full, k, len(ids), self.pad, since_start=offset, chunk=EVAL_CHUNK)
        if k:
            self.history = full[-k:].copy()
        return out

    # ---- --oov-vector: one call for the text (or for each line) -------------------------------------

    def _hold(self, piece: Piece, token_lists: list[list[str]], ids: np.ndarray,
              oov: np.ndarray) -> Iterator[LineScore | BadLine]:
        last = len(piece.texts) - 1
        for i, text in enumerate(piece.texts):
            number = piece.first_line + i
            continued = i == 0 and piece.continues
            if text is None:
                if continued:
                    while self._held and self._held[-1][0] == number:
                        self._held_tokens -= len(self._held.pop()[1])
                yield from self._bad(number, continued)
                continue
            self._held.append((number, token_lists[i], int(oov[i])))
            self._held_tokens += len(token_lists[i])
            if self._held_tokens > OOV_VECTOR_MAX_TOKENS:
                raise NnlmError(f"--oov-vector scores {'the text' if self.carry else 'a line'} in one pass (an "
                                "unknown word keeps the feature vector of its first context), so it takes at "
                                f"most {OOV_VECTOR_MAX_TOKENS:,} tokens {'in all' if self.carry else 'a line'}; "
                                f"line {number} goes past that: split the text, or leave out --oov-vector")
            if not self.carry and not (i == last and piece.open):
                yield from self._score_held()

    def _score_held(self) -> Iterator[LineScore | WordScores]:
        """Score the held lines in one call of the model's log_prob_text, then give out their lines."""
        held, self._held, self._held_tokens = self._held, [], 0
        tokens = list(chain.from_iterable(toks for _, toks, _ in held))
        lp10 = self.oov_vector.log_prob_text(tokens) * LOG10_E if tokens else np.zeros(0)
        at = 0
        current: int | None = None
        for number, toks, oov in held:
            if number != current:
                if current is not None:
                    yield from self._end_line()
                self._line, current = _Line(number), number
            words = lp10[at:at + len(toks)]
            at += len(toks)
            if toks:
                self._line.log10_prob += float(words.sum())
                self._line.tokens += len(toks)
                self._line.oov += oov
                if self.keep_words:
                    self._line.words.append(words)
                if self.word_events:
                    yield WordScores(number, toks, words)
        if current is not None:
            yield from self._end_line()
        self._line = None


def require_oov_vector(model: LanguageModel):
    """Only neural models have feature vectors to give words outside V (`NeuralLM.log_prob_text`)."""
    from nnlm.capabilities import ScoresUnknownWords

    if not isinstance(model, ScoresUnknownWords):
        what = getattr(getattr(model, "config", None), "recurrent", "none")
        if what != "none":  # a neural model, but its state is read from C(w) of words in V only
            raise NnlmError(f"--oov-vector applies to the feed-forward nets only, not to the recurrent net "
                            f"(--recurrent {what})")
        raise NnlmError(f"--oov-vector applies to neural models only, not to {type(model).__name__}")
    return model
