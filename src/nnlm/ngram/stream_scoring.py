"""Scoring a stream of token ids, or one line of ASCII text, on the back-off query engine (nnlm.ngram.query_engine)
in one compiled call: what `nnlm score`, `nnlm eval`'s splits, rescoring and `nnlm.use.score_lines` run.

Why a module of its own: these are the calls of the scoring path every face takes (issue 48), and the ones
whose fixed cost a one-line call pays; query_engine.py keeps the engine, its lookups and the
per-row, per-state and per-text kernels.

- `scaled_token_log10`: each token of a stream given the order-1 ids before it (`pad` before the stream,
  or before its own text with `since_start`), the state carried from token to token as `score_rows` carries
  it; the rows `nnlm.lm.contexts()` makes, scored without making them (chunked_log_probs' numbers, bit for
  bit). Each score is scaled as the caller's numpy code would scale it, and summed in token order.
- `AsciiLineScorer`: one ASCII line, encoded (nnlm.ngram.ascii_tokens' rule, OOV words counted) and scored
  from the start of a text in the same compiled call. A one-line `score_lines` call was two compiled calls
  and the Python between them (its stream's arrays, slices, checks): 1.65 x KenLM's median per line, this
  1.33 x (docs/query-engine.md, "Fresh processes and one-line calls").
"""
from __future__ import annotations

import numba
import numpy as np

from nnlm.ngram.ascii_tokens import KIND, AsciiLexicon, _encode_text
from nnlm.ngram.hash_table import KERNEL, PREFETCH_AHEAD
from nnlm.ngram.query_engine import BackoffEngine, _context_row, _gram_chain, _prefetch_grams, _with_backoffs

_NO_SINCE = np.zeros(1, dtype=np.int64)


@numba.njit(**KERNEL)
def _stream_scores(table, ftable, offsets, caps, uprob, uback, order, stream, first, pad, since, use_since, scale,
                   then, out, fscratch, iscratch):
    """out[i] = log10 P(stream[0, first + i] | its context), the state carried from token to token (see
    scaled_token_log10). A token whose context reaches before the stream or its text reads it from
    iscratch[2] (those ids `pad`); a text's first token starts afresh from that context's back-offs. Each score is
    multiplied by `scale`, then by `then`; returns their sum in order from 0.0, or nan (nothing scored) if an id
    is outside the vocabulary."""
    v = len(uprob)
    if pad < 0 or pad >= v:
        return np.nan
    for t in range(max(first - order + 1, 0), first + len(out)):
        if stream[0, t] < 0 or stream[0, t] >= v:
            return np.nan
    n1 = order - 1
    backoffs, chain, keys, homes, window = fscratch[0], fscratch[1], iscratch[0], iscratch[1], iscratch[2:3]
    count = len(out)
    m = 0
    total = 0.0
    for i in range(count):
        t = first + i
        ahead = i + PREFETCH_AHEAD
        if ahead < count and first + ahead >= n1 and (not use_since or since[ahead] >= n1):
            _prefetch_grams(table, offsets, caps, order, stream[0, first + ahead], stream, 0, first + ahead)
        before = n1 if not use_since else min(since[i], n1)  # context words inside the text
        if t - n1 >= 0 and before == n1:
            ctx, width = stream, t
        else:
            for j in range(n1):
                k = t - n1 + j
                window[0, j] = stream[0, k] if k >= 0 and j >= n1 - before else pad
            ctx, width = window, n1
        if i == 0 or (use_since and since[i] == 0):
            known = _context_row(table, ftable, offsets, caps, uback, order, ctx, 0, width, backoffs, keys, homes)
        else:
            for j in range(n1):
                backoffs[j] = chain[j]
            known = min(m, n1)
        p, m = _gram_chain(table, ftable, offsets, caps, uprob, uback, order, stream[0, t], ctx, 0, width, known,
                           chain, keys, homes)
        out[i] = (_with_backoffs(p, m, backoffs, n1) * scale) * then
        total += out[i]
    return total


@numba.njit(**KERNEL)
def _ascii_line(data, size, kind, blob, starts, slots, unk, paragraph, table, ftable, offsets, caps, uprob, uback,
                order, pad, scale, then, stream, out, fscratch, iscratch):
    """The ASCII text data[:size] as `pad` order-1 times then its ids into stream[0] (an OOV word: `unk`, and
    counted), scored by `_stream_scores` into out; returns (tokens, OOV words, the sum of the scores)."""
    k = order - 1
    for j in range(k):
        stream[0, j] = pad
    n = _encode_text(data, 0, size, kind, blob, starts, slots, -1, paragraph, stream[0], k) - k
    oov = 0
    for i in range(k, k + n):
        if stream[0, i] < 0:
            stream[0, i] = unk
            oov += 1
    total = _stream_scores(table, ftable, offsets, caps, uprob, uback, order, stream[:, :k + n], k, pad, _NO_SINCE,
                           False, scale, then, out[:n], fscratch, iscratch)
    return n, oov, total


def scaled_token_log10(engine: BackoffEngine, stream: np.ndarray, first: int, count: int, pad: int,
                       since_start: np.ndarray | None = None, scale: float = 1.0,
                       then: float = 1.0) -> tuple[np.ndarray, float]:
    """log10 P of each token stream[first : first + count] (int64, C-contiguous; IndexError if an id is outside
    V) given the order-1 ids before it, `pad` before the stream's start and, with `since_start` (int64 [count]:
    tokens of its own text before each token), before its text's start, times `scale`, then times `then`
    (each product rounded as numpy rounds it: the numbers of `(log10 * scale) * then` to the bit); and their
    sum in token order from 0.0 (a Python sum's)."""
    out = np.empty(count, dtype=np.float64)
    since = _NO_SINCE if since_start is None else np.ascontiguousarray(since_start, dtype=np.int64)
    total = _stream_scores(*engine._kernel_tables(), stream.reshape(1, -1), first, pad, since, since_start is not None,
                           scale, then, out, engine.fscratch, engine.iscratch)
    if total != total:  # nan: an id outside the vocabulary (nothing scored)
        raise IndexError(f"token ids must be in 0 .. {engine.vocab_size - 1}")
    return out, total


class AsciiLineScorer:
    """One ASCII line's scores from the start of a text, with the number of its OOV words: `scaled_token_log10` of
    the line's stream (`lexicon.encode_stream(text, order - 1, pad)`), encoding and scoring in one compiled call.
    Its fixed arguments are bound once (a model keeps one): beside the kernel, a one-line call's cost is the
    Python around it, so it makes only the line's bytes and the array of its scores."""

    def __init__(self, engine: BackoffEngine, lexicon: AsciiLexicon, pad: int, scale: float = 1.0,
                 then: float = 1.0) -> None:
        self.engine, self.lexicon, self.k = engine, lexicon, engine.order - 1
        self._before = (KIND, lexicon.blob, lexicon.starts, lexicon.slots, lexicon.unk, lexicon.paragraph,
                        *engine._kernel_tables(), pad, scale, then)
        self._after = (engine.fscratch, engine.iscratch)
        self._stream = np.empty((1, self.k + 256), dtype=np.int64)  # reused: used only during a call (GIL held)

    def __call__(self, text: str) -> tuple[np.ndarray, float, int]:
        """(the scores, their sum in token order, the number of OOV words) of the ASCII line `text`."""
        size = len(text) + 1  # tokens <= characters + 1 (a word and what ends it take >= 2, `<p>` takes the end)
        stream = self._stream
        if stream.shape[1] < self.k + size:
            stream = self._stream = np.empty((1, self.k + size), dtype=np.int64)
        out = np.empty(size, dtype=np.float64)
        n, oov, total = _ascii_line(np.frombuffer(text.encode("ascii") or b"\0", dtype=np.uint8), len(text),
                                    *self._before, stream, out, *self._after)
        if total != total:  # nan: `pad` outside the vocabulary
            raise IndexError(f"token ids must be in 0 .. {self.engine.vocab_size - 1}")
        return out[:n], total, oov
