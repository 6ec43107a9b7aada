"""ARPA files: write a back-off model, and read one back (strictly) into a BackoffModel.

Layout: a \\data\\ section with "ngram k=count" lines, then one \\k-grams: section per order
with lines "log10 p <tab> w1 .. wk [<tab> log10 backoff]", then \\end\\.

Sentence markers: nnlm models a single token stream (Brown's <p> and <text> are ordinary words),
so its vocabularies have no <s> or </s>. KenLM refuses an ARPA file without them, so the writer
adds each one the vocabulary lacks as a unigram with log10 probability -99 (never predicted, no
context uses it: the model is unchanged up to 1e-99), as lmplz does for <s>. The reader drops
such markers again when the vocabulary lacks them, and refuses a file that gives one a real
probability (its mass would be lost: that file's vocabulary does not match the corpus).
"""
from __future__ import annotations

import re
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import atomic_path, require_regular
from nnlm.ngram.backoff import BackoffModel, BackoffTables
from nnlm.ngram.counts import MAX_ORDER
from nnlm.ngram.keys import lookup

MARKERS = ("<s>", "</s>")
NEVER = -99.0  # log10 probability of a marker the model never predicts
_COUNT_LINE = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)$", re.ASCII)
_HEADER = re.compile(r"^\\(\d+)-grams:$", re.ASCII)
# A number as ARPA writers print it: ASCII digits only (float() would also take '١٢', '1_0', 'inf', 'nan').
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
MIN_LOG10 = -99.0   # the ARPA convention for "never": anything lower would overflow a perplexity
MAX_BACKOFF = 10.0  # |log10 back-off| above this is no model (a back-off of 10^10 makes P > 1)
WRITE_ROWS = 1 << 20  # entries formatted at once when writing


def write_arpa(model: BackoffModel, path: Path | str) -> None:
    """Write `model` as an ARPA file in one atomic step."""
    tables, tokens = model.tables, np.array(model.vocab.tokens, dtype=object)
    markers = [m for m in MARKERS if m not in model.vocab]
    counts = tables.sizes()
    counts[0] += len(markers)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write("\\data\\\n")
        out.writelines(f"ngram {k}={c}\n" for k, c in enumerate(counts, 1))
        for k in range(1, tables.order + 1):
            out.write(f"\n\\{k}-grams:\n")
            for start in range(0, tables.sizes()[k - 1], WRITE_ROWS):  # a block at a time: tables may be memory-mapped
                _write_block(out, tables, tokens, k, start, start + WRITE_ROWS)
            if k == 1:
                out.writelines(f"{NEVER:g}\t{m}\t0\n" if k < tables.order else f"{NEVER:g}\t{m}\n"
                               for m in markers)
        out.write("\n\\end\\\n")


def _write_block(out, tables: BackoffTables, tokens: np.ndarray, k: int, start: int, stop: int) -> None:
    """The ARPA lines of entries start..stop of order k."""
    grams = tables.words(k, start, stop)
    text = tokens[grams[:, 0]]
    for j in range(1, k):
        text = text + " " + tokens[grams[:, j]]
    probs = np.asarray(tables.log10_prob[k - 1][start:stop])
    if k < tables.order:
        backoffs = np.asarray(tables.log10_backoff[k - 1][start:stop])
        out.writelines(f"{p:.10g}\t{w}\t{b:.10g}\n"
                       for p, w, b in zip(probs.tolist(), text, backoffs.tolist(), strict=True))
    else:
        out.writelines(f"{p:.10g}\t{w}\n" for p, w in zip(probs.tolist(), text, strict=True))


@dataclass
class _Section:
    """The entries of one \\k-grams: section, as read (rows with an unusable marker already dropped)."""

    ids: np.ndarray        # int64 [U, k] word ids (k = 1: filled in once the vocabulary is known)
    log10_prob: np.ndarray
    log10_backoff: np.ndarray
    linenos: np.ndarray    # line of each entry, for error messages
    words: list[str]       # k = 1 only: the unigram words as written


class _Reader:
    """Reads an ARPA file top to bottom; every error is one line naming the file and line."""

    def __init__(self, path: Path, fh) -> None:
        self.path, self._fh, self.lineno = path, fh, 0
        self._dropped = 0  # entries of the current section left out by _usable

    def error(self, message: str, lineno: int | None = None) -> NnlmError:
        return NnlmError(f"{self.path}:{self.lineno if lineno is None else lineno}: {message}")

    def next_nonblank(self, what: str) -> str:
        for line in self._fh:
            self.lineno += 1
            line = line.strip()
            if line:
                return line
        raise self.error(f"file ends before {what} (truncated ARPA file?)")

    def header(self) -> tuple[list[int], str]:
        """The declared counts of \\data\\, and the first line after them."""
        while self.next_nonblank("\\data\\") != "\\data\\":
            pass  # text before \data\ is allowed (comments)
        declared: list[int] = []
        line = self.next_nonblank("the \\1-grams: section")
        while (m := _COUNT_LINE.match(line)) is not None:
            k, c = int(m.group(1)), int(m.group(2))
            if k != len(declared) + 1:
                raise self.error(f"expected 'ngram {len(declared) + 1}=...', got {line!r}")
            declared.append(c)
            line = self.next_nonblank("the \\1-grams: section")
        if not declared:
            raise self.error(f"expected 'ngram 1=...' after \\data\\, got {line!r}")
        if len(declared) > MAX_ORDER:
            raise self.error(f"order {len(declared)} is above the supported maximum {MAX_ORDER}")
        return declared, line

    def section(self, k: int, order: int, declared: int, index: dict[str, int] | None) -> tuple[_Section, str]:
        """Entries up to the next \\ line (returned too). index=None keeps the words (unigrams)."""
        probs, backoffs, ids, linenos, words = array("d"), array("d"), array("q"), array("q"), []
        self._dropped = 0
        lineno, get, none = self.lineno, (index or {}).get, (-1,) * k
        for raw in self._fh:
            lineno += 1
            parts = raw.split()
            if not parts:
                continue
            if parts[0][0] == "\\":
                self.lineno = lineno
                break
            n = len(parts)
            if n != k + 1 and (n != k + 2 or k == order):
                self.lineno = lineno
                if n == k + 2:
                    raise self.error(f"{k}-grams are the highest order and cannot have a back-off weight")
                raise self.error(f"a {k}-gram line needs a probability, {k} word(s) and an optional back-off, "
                                 f"got {n} field(s)")
            if not _is_number(parts[0]) or (n == k + 2 and not _is_number(parts[-1])):
                bad = parts[0] if not _is_number(parts[0]) else parts[-1]
                raise self.error(f"{bad!r} is not a number", lineno)
            prob, backoff = float(parts[0]), float(parts[-1]) if n == k + 2 else 0.0
            if not MIN_LOG10 <= prob <= 0.0:
                raise self.error(f"log10 probability {parts[0]!r} must be a log10 value <= 0 "
                                 f"(and >= {MIN_LOG10:g})", lineno)
            if not abs(backoff) <= MAX_BACKOFF:
                raise self.error(f"log10 back-off {parts[-1]!r} must be a finite number in "
                                 f"[-{MAX_BACKOFF:g}, {MAX_BACKOFF:g}]", lineno)
            if index is None:
                words.append(parts[1])
                row = none
            else:
                row = [get(w, -1) for w in parts[1:k + 1]]
                if -1 in row and not self._usable(parts, row, prob, lineno):
                    continue
            probs.append(prob)
            backoffs.append(backoff)
            ids.extend(row)
            linenos.append(lineno)
        else:
            self.lineno = lineno
            raise self.error("file ends before \\end\\ (truncated ARPA file?)")
        if len(probs) + self._dropped != declared:
            raise self.error(f"\\data\\ declares {declared} {k}-grams but the section has {len(probs) + self._dropped}")
        section = _Section(np.frombuffer(ids, dtype=np.int64).reshape(-1, k).copy(),
                           np.frombuffer(probs, dtype=np.float64).copy(),
                           np.frombuffer(backoffs, dtype=np.float64).copy(),
                           np.frombuffer(linenos, dtype=np.int64).copy(), words)
        return section, raw.strip()

    def _usable(self, parts: list[str], row: list[int], prob: float, lineno: int) -> bool:
        """A word outside the vocabulary: an error, unless it is a marker the model never predicts."""
        for j, i in enumerate(row):
            if i >= 0:
                continue
            w = parts[1 + j]
            if w not in MARKERS:
                raise self.error(f"word {w!r} is not in the corpus vocabulary: the ARPA file does not match "
                                 f"the corpus", lineno)
            if j == len(row) - 1 and prob > NEVER:
                raise self.error(f"the file gives {w!r} a real probability but the corpus has no {w!r}: "
                                 f"the ARPA file does not match the corpus", lineno)
        self._dropped += 1  # unreachable from the corpus's words: leave it out
        return False


def _is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text) is not None


def _vocabulary(path: Path, unigrams: _Section, vocab: Vocabulary | None) -> Vocabulary:
    """The vocabulary the model is over: the corpus's, or the file's own unigrams (markers dropped)."""
    if vocab is not None:
        return vocab
    kept = [w for w, p in zip(unigrams.words, unigrams.log10_prob, strict=True) if not (w in MARKERS and p <= NEVER)]
    try:
        return Vocabulary(tuple(dict.fromkeys(kept)))
    except NnlmError as exc:
        raise NnlmError(f"{path}: its unigrams do not form a vocabulary ({exc})") from None


def _unigram_ids(r: _Reader, unigrams: _Section, vocab: Vocabulary) -> _Section:
    """Map the unigram words to ids (now that the vocabulary is known), dropping unusable markers."""
    index = {tok: i for i, tok in enumerate(vocab.tokens)}
    ids = np.array([index.get(w, -1) for w in unigrams.words], dtype=np.int64)
    keep = np.ones(len(ids), dtype=bool)
    for row in np.flatnonzero(ids < 0):
        keep[row] = r._usable([str(unigrams.log10_prob[row]), unigrams.words[row]], [-1],
                              float(unigrams.log10_prob[row]), int(unigrams.linenos[row]))
    missing = np.setdiff1d(np.arange(len(vocab)), ids[keep])
    if len(missing):
        raise NnlmError(f"{r.path}: {len(missing)} word(s) of the corpus vocabulary are not among its unigrams "
                        f"(e.g. {vocab.tokens[missing[0]]!r}): the ARPA file does not match the corpus")
    return _Section(ids[keep, None], unigrams.log10_prob[keep], unigrams.log10_backoff[keep],
                    unigrams.linenos[keep], [])


def read_arpa(path: Path | str, vocab: Vocabulary | None = None) -> BackoffModel:
    """Read an ARPA file into a BackoffModel over `vocab` (default: the file's own unigrams).

    With a vocabulary, the file must list exactly its words (plus <s> / </s> markers it lacks,
    with probability <= -99); anything else is an NnlmError naming the file and line."""
    path = Path(path)
    require_regular(path, "ARPA file")  # a FIFO or a device is refused before it is opened
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 (closed by the `with fh` below, after the error check)
    except OSError as exc:
        raise NnlmError(f"cannot read ARPA file {path}: {exc.strerror}") from None
    r = _Reader(path, fh)
    try:
        with fh:
            declared, line = r.header()
            order = len(declared)
            keys: list[np.ndarray] = []
            probs: list[np.ndarray] = []
            backoffs: list[np.ndarray] = []
            index: dict[str, int] | None = None
            for k in range(1, order + 1):
                m = _HEADER.match(line)
                if m is None or int(m.group(1)) != k:
                    raise r.error(f"expected the \\{k}-grams: section, got {line!r}")
                section, line = r.section(k, order, declared[k - 1], index)
                if k == 1:
                    vocab = _vocabulary(path, section, vocab)
                    section = _unigram_ids(r, section, vocab)
                    index = {tok: i for i, tok in enumerate(vocab.tokens)}
                    key = section.ids[:, 0]
                else:
                    context = lookup(keys, len(vocab), section.ids[:, :-1])
                    if np.any(context < 0):
                        lineno = section.linenos[np.flatnonzero(context < 0)[0]]
                        raise r.error(f"the context of this {k}-gram is not listed among the {k - 1}-grams", lineno)
                    key = context * len(vocab) + section.ids[:, -1]
                sort = np.argsort(key, kind="stable")
                key = key[sort]
                dup = np.flatnonzero(np.diff(key) == 0)
                if len(dup):
                    raise r.error(f"this {k}-gram is listed twice", section.linenos[sort[dup[0] + 1]])
                keys.append(key)
                probs.append(section.log10_prob[sort])
                backoffs.append(section.log10_backoff[sort])
            if line != "\\end\\":
                raise r.error(f"expected \\end\\ after the {order}-grams, got {line!r}")
    except UnicodeDecodeError:
        raise r.error("not a UTF-8 text file") from None
    except OSError as exc:
        raise NnlmError(f"cannot read ARPA file {path}: {exc.strerror}") from None
    model = BackoffModel(vocab, BackoffTables(len(vocab), keys, probs, backoffs), {"arpa": str(path)})
    check_probabilities(path, model)
    return model


def check_probabilities(path: Path, model: BackoffModel, contexts_per_order: int = 32) -> None:
    """Refuse a file whose numbers are each in range but make no distribution: unigrams summing
    above 1, or back-off weights that lift a probability above 1 (checked on the contexts with the
    largest back-off weights of each order: they are where a probability exceeds 1 first)."""
    tables = model.tables
    total = float(np.sum(10.0 ** tables.log10_prob[0]))
    if total > 1.0 + 1e-3:
        raise NnlmError(f"{path}: its unigram probabilities sum to {total:.4g}, more than 1: not a language model")
    lowest = (total, "the unigrams")  # a sum below 1 is usable but not a distribution: said once, not refused
    for order in range(1, tables.order):
        backoff = tables.log10_backoff[order - 1]
        n = min(contexts_per_order, len(backoff))
        top = np.argpartition(-backoff, n - 1)[:n] if 0 < n < len(backoff) else np.arange(len(backoff))
        words = np.empty((len(top), order), dtype=np.int64)
        rows = top
        for j in range(order, 0, -1):  # unpack the packed keys of just these rows (see BackoffTables.words)
            key = tables.keys[j - 1][rows]
            words[:, j - 1] = key % tables.vocab_size
            rows = key // tables.vocab_size
        upto = order + 1  # the model cut at order + 1: these contexts are then exactly the listed ones
        cut = BackoffModel(model.vocab, BackoffTables(tables.vocab_size, tables.keys[:upto], tables.log10_prob[:upto],
                                                      tables.log10_backoff[:upto]), {})
        dist = cut.distribution(words) if len(words) else np.zeros((0, tables.vocab_size))
        peak = float(dist.max()) if len(words) else 0.0
        if len(words) and float(dist.sum(axis=1).min()) < lowest[0]:
            row = int(dist.sum(axis=1).argmin())
            lowest = (float(dist[row].sum()), f"the {order}-gram context {' '.join(model.vocab.decode(words[row]))!r}")
        if peak > 1.0 + 1e-3:
            raise NnlmError(f"{path}: its back-off weights give a probability of {peak:.4g}, more than 1 "
                            f"(after the {order}-gram context {' '.join(model.vocab.decode(words[0]))!r} or "
                            "another): not a language model")
    if lowest[0] < 1.0 - 1e-3:
        print(f"nnlm: note: {path}: probabilities after {lowest[1]} sum to {lowest[0]:.4g}, not 1 (of the contexts "
              "checked): a pruned or edited model whose back-off weights were not recomputed? Its perplexities are "
              "not comparable with those of normalized models", file=sys.stderr)
