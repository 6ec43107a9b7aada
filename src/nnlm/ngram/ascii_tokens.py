"""Token ids of ASCII text in one compiled pass: nnlm.data.tokenize.text_tokens + Vocabulary ids, for the
query engines' per-sentence and batch calls (nnlm.sentence).

Why: on Brown test lines, cutting the text into Python strings (text_tokens) and looking each one up in
the vocabulary's dict took ~31 ms per 177k tokens, more than the compiled scoring (~21 ms) and most of
KenLM's whole time (~47 ms: it cuts and looks up in C++). Here the bytes are scanned and each word is
hashed and found in a table of the vocabulary's bytes without making a string.

The rule is tokenize.py's, restricted to ASCII text (`str.isascii()`, which CPython answers without
scanning); any other text goes through text_tokens itself. For ASCII, `str.splitlines` ends a line at
\\n, \\r, \\r\\n, \\v, \\f, \\x1c, \\x1d, \\x1e, and `str.split()` also cuts at \\t, \\x1f and space; a line
with a word ends with `<p>`, a blank one gives nothing. tests/test_query_engine.py checks the ids equal
`vocab.encode(text_tokens(text))` on texts made of exactly these characters and words.
"""
from __future__ import annotations

import numba
import numpy as np

from nnlm.data.vocab import PARAGRAPH, Vocabulary
from nnlm.ngram.hash_table import KERNEL, capacity

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
# byte -> 0 (part of a word), 1 (white space within a line), 2 (end of a line)
KIND = np.zeros(256, dtype=np.int8)
KIND[[0x09, 0x1F, 0x20]] = 1
KIND[[0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E]] = 2


@numba.njit(inline="always")
def _fnv(data, lo, hi):
    h = FNV_OFFSET
    for i in range(lo, hi):
        h = (h ^ np.uint64(data[i])) * FNV_PRIME
    return h


@numba.njit(cache=True)
def _build(blob, starts, slots):
    """Slot table of the vocabulary: token i's bytes are blob[starts[i]:starts[i+1]]; slots[s] = id or -1."""
    cap = len(slots)
    for i in range(len(starts) - 1):
        s = np.int64((_fnv(blob, starts[i], starts[i + 1]) >> np.uint64(32)) * np.uint64(cap) >> np.uint64(32))
        while slots[s] >= 0:
            s = s + 1 if s + 1 < cap else 0
        slots[s] = i


@numba.njit(inline="always")
def _word_id(data, lo, hi, h, blob, starts, slots, unk):
    """The id of the word data[lo:hi], whose FNV hash is h (unk if it is not in the vocabulary)."""
    cap = len(slots)
    s = np.int64((h >> np.uint64(32)) * np.uint64(cap) >> np.uint64(32))
    while True:
        i = slots[s]
        if i < 0:
            return unk
        if starts[i + 1] - starts[i] == hi - lo:
            same = True
            for k in range(hi - lo):
                if blob[starts[i] + k] != data[lo + k]:
                    same = False
                    break
            if same:
                return i
        s = s + 1 if s + 1 < cap else 0


@numba.njit(inline="always")
def _encode_text(data, lo, hi, kind, blob, starts, slots, unk, paragraph, out, n):
    """Ids of the text data[lo:hi] into out[n ..]; returns the new n."""
    word_start = -1
    line_has_word = False
    h = FNV_OFFSET
    for i in range(lo, hi + 1):
        k = kind[data[i]] if i < hi else 2
        if k == 0:  # a word's byte: hashed as it is read
            if word_start < 0:
                word_start = i
                h = FNV_OFFSET
            h = (h ^ np.uint64(data[i])) * FNV_PRIME
            continue
        if word_start >= 0:
            out[n] = _word_id(data, word_start, i, h, blob, starts, slots, unk)
            n += 1
            word_start = -1
            line_has_word = True
        if k == 2 and line_has_word:
            out[n] = paragraph
            n += 1
            line_has_word = False
    return n


@numba.njit(**KERNEL)
def _encode(data, text_starts, kind, blob, starts, slots, unk, paragraph, out, bounds):
    """Ids of each text data[text_starts[t]:text_starts[t+1]] into out; text t's are out[bounds[t]:bounds[t+1]]."""
    n = 0
    for t in range(len(text_starts) - 1):
        bounds[t] = n
        n = _encode_text(data, text_starts[t], text_starts[t + 1], kind, blob, starts, slots, unk, paragraph, out, n)
    bounds[len(text_starts) - 1] = n


@numba.njit(**KERNEL)
def _encode_one(data, kind, blob, starts, slots, unk, paragraph, out):
    return _encode_text(data, 0, len(out) - 1, kind, blob, starts, slots, unk, paragraph, out, 0)


@numba.njit(**KERNEL)
def _encode_stream(data, kind, blob, starts, slots, unk, paragraph, out, k, pad):
    """`pad` k times, then the ids of the text data[:len(out) - k - 1]; returns (ids written after the pads, how
    many of them are words outside the vocabulary: `unk` for those, as for "<unk>" typed in the text)."""
    for j in range(k):
        out[j] = pad
    n = _encode_text(data, 0, len(out) - k - 1, kind, blob, starts, slots, -1, paragraph, out, k) - k
    oov = 0
    for i in range(k, k + n):
        if out[i] < 0:
            out[i] = unk
            oov += 1
    return n, oov


class AsciiLexicon:
    """The vocabulary's tokens as bytes in a hash table, for `encode`."""

    def __init__(self, vocab: Vocabulary) -> None:
        encoded = [t.encode("utf-8") for t in vocab.tokens]
        self.blob = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8)
        self.starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self.starts[1:])
        self.slots = np.full(capacity(len(encoded)), -1, dtype=np.int64)
        _build(self.blob, self.starts, self.slots)
        self.unk, self.paragraph = vocab.unk_id, vocab.id(PARAGRAPH)

    def encode(self, texts: list[str], unknown: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64, bounds int64 [len(texts) + 1]) of ASCII texts: text t's ids are ids[bounds[t]:bounds[t+1]],
        exactly `vocab.encode(text_tokens(texts[t]))`; with `unknown`, a word outside the vocabulary gets that
        id instead of `<unk>`'s (so that the text's own "<unk>" tokens are told apart from OOV words)."""
        data = np.frombuffer("".join(texts).encode("ascii") or b"\0", dtype=np.uint8)
        text_starts = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(list(map(len, texts)), out=text_starts[1:])
        out = np.empty(int(text_starts[-1]) + len(texts), dtype=np.int64)  # a word and its <p> take >= 2 chars
        bounds = np.empty(len(texts) + 1, dtype=np.int64)
        _encode(data, text_starts, KIND, self.blob, self.starts, self.slots, self.unk if unknown is None else unknown,
                self.paragraph, out, bounds)
        return out[:bounds[-1]], bounds

    def encode_one(self, text: str, unknown: int | None = None) -> np.ndarray:
        """`encode([text], unknown)[0]` with less fixed cost (the per-sentence call)."""
        out = np.empty(len(text) + 1, dtype=np.int64)
        n = _encode_one(np.frombuffer(text.encode("ascii") or b"\0", dtype=np.uint8), KIND, self.blob, self.starts,
                        self.slots, self.unk if unknown is None else unknown, self.paragraph, out)
        return out[:n]


    def encode_stream(self, text: str, k: int, pad: int) -> tuple[np.ndarray, int]:
        """(a stream of `k` pads then the ids of ASCII `text`, its number of words outside the vocabulary): one
        line's stream for nnlm.compiled_lines in one call."""
        out = np.empty(k + len(text) + 1, dtype=np.int64)
        n, oov = _encode_stream(np.frombuffer(text.encode("ascii") or b"\0", dtype=np.uint8), KIND, self.blob,
                                self.starts, self.slots, self.unk, self.paragraph, out, k, pad)
        return out[:k + n], oov


def lexicon(model) -> AsciiLexicon:
    """The model's AsciiLexicon, made at the first call and kept on the model."""
    kept = model.__dict__.get("_ascii_lexicon")
    if kept is None:
        kept = model._ascii_lexicon = AsciiLexicon(model.vocab)
    return kept
