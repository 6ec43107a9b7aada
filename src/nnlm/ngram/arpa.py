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
from pathlib import Path

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import atomic_path
from nnlm.ngram.backoff import BackoffModel, BackoffTables, lookup
from nnlm.ngram.counts import MAX_ORDER

MARKERS = ("<s>", "</s>")
NEVER = -99.0  # log10 probability of a marker the model never predicts
_COUNT_LINE = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)$")
_HEADER = re.compile(r"^\\(\d+)-grams:$")


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
            grams = tables.words(k)
            text = tokens[grams[:, 0]]
            for j in range(1, k):
                text = text + " " + tokens[grams[:, j]]
            probs = tables.log10_prob[k - 1]
            if k < tables.order:
                backoffs = tables.log10_backoff[k - 1]
                out.writelines(f"{p:.10g}\t{w}\t{b:.10g}\n" for p, w, b in zip(probs.tolist(), text, backoffs.tolist()))
                if k == 1:
                    out.writelines(f"{NEVER:g}\t{m}\t0\n" for m in markers)
            else:
                out.writelines(f"{p:.10g}\t{w}\n" for p, w in zip(probs.tolist(), text))
                if k == 1:
                    out.writelines(f"{NEVER:g}\t{m}\n" for m in markers)
        out.write("\n\\end\\\n")


class _Reader:
    """Line-numbered reading with one-line errors naming the file and line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fh = open(path, encoding="utf-8")
        except OSError as exc:
            raise NnlmError(f"cannot read ARPA file {path}: {exc.strerror}") from None
        self.lineno = 0

    def error(self, message: str, lineno: int | None = None) -> NnlmError:
        return NnlmError(f"{self.path}:{self.lineno if lineno is None else lineno}: {message}")

    def next_nonblank(self, what: str) -> str:
        for line in self._fh:
            self.lineno += 1
            line = line.strip()
            if line:
                return line
        raise self.error(f"file ends before {what} (truncated ARPA file?)")

    def lines(self):
        for line in self._fh:
            self.lineno += 1
            yield line

    def close(self) -> None:
        self._fh.close()


def _parse(path: Path) -> tuple[list[int], list[list[list[str]]], list[np.ndarray]]:
    """(declared counts, entry fields per order, line number of each entry per order)."""
    r = _Reader(path)
    try:
        try:
            while r.next_nonblank("\\data\\") != "\\data\\":
                pass  # text before \data\ is allowed (comments)
        except UnicodeDecodeError:
            raise r.error("not a UTF-8 text file") from None
        declared: list[int] = []
        line = r.next_nonblank("the first \\1-grams: section")
        while (m := _COUNT_LINE.match(line)) is not None:
            k, c = int(m.group(1)), int(m.group(2))
            if k != len(declared) + 1:
                raise r.error(f"expected 'ngram {len(declared) + 1}=...', got {line!r}")
            declared.append(c)
            line = r.next_nonblank("the \\1-grams: section")
        if not declared:
            raise r.error(f"\\data\\ lists no 'ngram k=count' lines (got {line!r})")
        if len(declared) > MAX_ORDER:
            raise r.error(f"order {len(declared)} is above the supported maximum {MAX_ORDER}")
        order = len(declared)
        fields: list[list[list[str]]] = []
        linenos: list[np.ndarray] = []
        for k in range(1, order + 1):
            if _HEADER.match(line) is None or int(_HEADER.match(line).group(1)) != k:
                raise r.error(f"expected the \\{k}-grams: section, got {line!r}")
            entries, where = [], []
            for raw in r.lines():
                parts = raw.split()
                if not parts:
                    continue
                if parts[0].startswith("\\"):
                    line = raw.strip()
                    break
                if not (k + 1 <= len(parts) <= k + 2):
                    raise r.error(f"a {k}-gram line needs a probability, {k} word(s) and an optional back-off, "
                                  f"got {len(parts)} field(s)")
                if len(parts) == k + 2 and k == order:
                    raise r.error(f"{k}-grams are the highest order and cannot have a back-off weight")
                entries.append(parts)
                where.append(r.lineno)
            else:
                line = ""
            if len(entries) != declared[k - 1]:
                raise r.error(f"\\data\\ declares {declared[k - 1]} {k}-grams but the section has {len(entries)}")
            if not line:
                raise r.error("file ends before \\end\\ (truncated ARPA file?)")
            fields.append(entries)
            linenos.append(np.array(where, dtype=np.int64))
        if line != "\\end\\":
            raise r.error(f"expected \\end\\ after the {order}-grams, got {line!r}")
        return declared, fields, linenos
    finally:
        r.close()


def _numbers(r_path: Path, column: list[str], linenos: np.ndarray, what: str) -> np.ndarray:
    try:
        values = np.array(column, dtype=np.float64)
    except ValueError:
        for text, lineno in zip(column, linenos):
            try:
                float(text)
            except ValueError:
                raise NnlmError(f"{r_path}:{lineno}: {what} {text!r} is not a number") from None
        raise
    bad = np.flatnonzero(np.isnan(values) | (values > 0) | np.isposinf(values))
    if len(bad):
        raise NnlmError(f"{r_path}:{linenos[bad[0]]}: {what} {column[bad[0]]!r} must be a log10 value <= 0")
    return values


def read_arpa(path: Path | str, vocab: Vocabulary | None = None) -> BackoffModel:
    """Read an ARPA file into a BackoffModel over `vocab` (default: the file's own unigrams).

    With a vocabulary, the file must list exactly its words (plus <s> / </s> markers it lacks,
    with probability <= -99); anything else is an NnlmError naming the file and line."""
    path = Path(path)
    declared, fields, linenos = _parse(path)
    order = len(declared)
    unigram_words = [parts[1] for parts in fields[0]]
    unigram_probs = _numbers(path, [parts[0] for parts in fields[0]], linenos[0], "log10 probability")
    if vocab is None:
        kept = [w for w, p in zip(unigram_words, unigram_probs) if not (w in MARKERS and p <= NEVER)]
        try:
            vocab = Vocabulary(tuple(dict.fromkeys(kept)))
        except NnlmError as exc:
            raise NnlmError(f"{path}: its unigrams do not form a vocabulary ({exc})") from None
    index = {tok: i for i, tok in enumerate(vocab.tokens)}
    v = len(vocab)

    keys: list[np.ndarray] = []
    probs: list[np.ndarray] = []
    backoffs: list[np.ndarray] = []
    for k in range(1, order + 1):
        entries, where = fields[k - 1], linenos[k - 1]
        prob = unigram_probs if k == 1 else _numbers(path, [p[0] for p in entries], where, "log10 probability")
        bo_text = [p[k + 1] if len(p) == k + 2 else "0" for p in entries]
        backoff = _numbers(path, bo_text, where, "log10 back-off") if k < order else np.zeros(len(entries))
        ids = np.empty((len(entries), k), dtype=np.int64)
        for j in range(k):
            ids[:, j] = np.fromiter((index.get(p[1 + j], -1) for p in entries), dtype=np.int64, count=len(entries))
        for row, j in zip(*np.nonzero(ids < 0)):  # only the rare words outside the vocabulary
            w = entries[row][1 + j]
            if w not in MARKERS:
                raise NnlmError(f"{path}:{where[row]}: word {w!r} is not in the corpus vocabulary "
                                f"({v} words): the ARPA file does not match the corpus")
            if j == k - 1 and prob[row] > NEVER:
                raise NnlmError(f"{path}:{where[row]}: the file gives {w!r} a real probability but the "
                                f"corpus has no {w!r}: the ARPA file does not match the corpus")
        keep = np.all(ids >= 0, axis=1)  # n-grams with a marker the vocabulary lacks are unreachable
        ids, prob, backoff, where = ids[keep], prob[keep], backoff[keep], where[keep]
        if k == 1:
            key = ids[:, 0]
            missing = np.setdiff1d(np.arange(v), key)
            if len(missing):
                raise NnlmError(f"{path}: {len(missing)} word(s) of the corpus vocabulary are not among its "
                                f"unigrams (e.g. {vocab.tokens[missing[0]]!r}): the ARPA file does not match the corpus")
        else:
            context = lookup(keys, v, ids[:, :-1])
            if np.any(context < 0):
                row = int(np.flatnonzero(context < 0)[0])
                raise NnlmError(f"{path}:{where[row]}: the context of this {k}-gram is not listed among the "
                                f"{k - 1}-grams")
            key = context * v + ids[:, -1]
        sort = np.argsort(key, kind="stable")
        key, prob, backoff, where = key[sort], prob[sort], backoff[sort], where[sort]
        dup = np.flatnonzero(np.diff(key) == 0)
        if len(dup):
            raise NnlmError(f"{path}:{where[dup[0] + 1]}: this {k}-gram is listed twice")
        keys.append(key)
        probs.append(prob)
        backoffs.append(backoff)
    return BackoffModel(vocab, BackoffTables(v, keys, probs, backoffs), {"arpa": str(path)})
