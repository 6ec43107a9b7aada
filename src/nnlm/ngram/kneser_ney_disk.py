"""Modified Kneser-Ney estimated from count tables on disk, order by order, into tables on disk.

The arithmetic is kneser_ney.kneser_ney_tables's, operation for operation, so the model is the
in-memory one to the last bit; only what is held at once differs. Order k's entries are read in
chunks whose edges fall between contexts (entries are sorted by context, since a key is
context * |V| + word), so each context's mass and discount sum are added up in one bincount, in
the same order as over the whole table. Held in memory while order k is estimated: one chunk,
the adjusted counts of order k, and the interpolated probabilities of order k-1 (the lower-order
term is looked up at each entry's suffix, which is scattered) and of order k being built (they
are order k+1's lower-order term). Everything else stays in .npy files.

The result is a directory of keys_{k}.npy, log10_prob_{k}.npy and log10_backoff_{k}.npy
(BackoffTables.arrays' names), which `load_disk_tables` memory-maps.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.backoff import BackoffTables
from nnlm.ngram.external_counts import (
    DiskCounts,
    chunk_positions,
    count_ngrams_to_disk,
    create_table,
    read_slice,
    write_slice,
)
from nnlm.ngram.kn_discounts import Discounts, checked_ids, discounts_from_counts_of_counts


def context_chunks(keys: np.ndarray, vocab_size: int, chunk: int, contexts: int) -> list[tuple[int, int, int, int]]:
    """(start, stop, first context, end of contexts) of chunks of about `chunk` entries of a sorted
    key table, cut only where the context changes; the context ranges tile 0..contexts."""
    cuts = [0]
    for b in range(chunk, len(keys), chunk):
        cut = int(np.searchsorted(keys, (int(keys[b]) // vocab_size) * vocab_size))
        if cut > cuts[-1]:
            cuts.append(cut)
    cuts.append(len(keys))
    firsts = [0] + [int(keys[c]) // vocab_size for c in cuts[1:-1]] + [contexts]
    return [(cuts[i], cuts[i + 1], firsts[i], firsts[i + 1]) for i in range(len(cuts) - 1)]


class _Adjusted:
    """a(g) of every k-gram: raw counts at the top order (read from disk a chunk at a time), else
    continuation counts plus one for the k-gram the stream opens with (held in memory)."""

    def __init__(self, counts: DiskCounts, k: int, chunk: int) -> None:
        self.size, self.chunk = counts.size(k), chunk
        self.raw = counts.path("counts", k) if k == counts.order else None
        if self.raw is None:
            self.values = np.zeros(self.size, dtype=np.int64)
            suffix = counts.path("suffix", k + 1)
            for s in range(0, counts.size(k + 1), chunk):
                np.add.at(self.values, read_slice(suffix, s, s + chunk), 1)
            self.values[counts.opening[k - 1]] += 1

    def __getitem__(self, span: slice) -> np.ndarray:
        return self.values[span] if self.raw is None else read_slice(self.raw, span.start, span.stop)

    def all(self) -> np.ndarray:
        return self[0:self.size]

    def discounts(self) -> Discounts:
        """kn_discounts.discounts_from, with the counts-of-counts added up a chunk at a time (integers: exact)."""
        n = np.zeros(6, dtype=np.int64)
        for s in range(0, self.size, self.chunk):
            a = self[s:s + self.chunk]
            n += np.bincount(np.minimum(a[a > 0], 5), minlength=6)
        return discounts_from_counts_of_counts(n)


def kneser_ney_to_disk(counts: DiskCounts, out: Path, memory_bytes: int) -> list[Discounts]:
    """Estimate the interpolated model from `counts` and write its back-off tables into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    v, order = counts.vocab_size, counts.order
    chunk = chunk_positions(memory_bytes, order)
    seen_words = np.load(counts.path("keys", 1))
    adjusted = _Adjusted(counts, 1, chunk)
    discounts = [adjusted.discounts()]
    a1 = np.zeros(v, dtype=np.int64)
    a1[seen_words] = adjusted.all()
    total = float(a1.sum())
    gamma = float(discounts[0].of(a1).sum()) / total
    previous = (a1 - discounts[0].of(a1)) / total + gamma / v
    np.save(out / "keys_1.npy", np.arange(v, dtype=np.int64))
    unigram_backoff = np.ones(v)
    for k in range(2, order + 1):
        a = _Adjusted(counts, k, chunk)
        discounts.append(a.discounts())
        keys, suffix = counts.path("keys", k), counts.path("suffix", k)
        top = k == order
        current = None if top else np.empty(a.size)
        if top:
            create_table(out / f"log10_prob_{k}.npy", a.size, np.float64)
        if k > 2:
            create_table(out / f"log10_backoff_{k - 1}.npy", len(previous), np.float64)
        contexts = len(previous) if k > 2 else len(seen_words)
        for s, e, c_lo, c_hi in context_chunks(np.load(keys, mmap_mode="r"), v, chunk, contexts):
            ctx = read_slice(keys, s, e) // v - c_lo
            a_here = a[s:e]
            mass = np.bincount(ctx, weights=a_here, minlength=c_hi - c_lo)
            discount = discounts[k - 1].of(a_here)
            left = np.bincount(ctx, weights=discount, minlength=c_hi - c_lo)
            g = np.divide(left, mass, out=np.ones(c_hi - c_lo), where=mass > 0)
            p = a_here - discount
            p /= mass[ctx]
            below = read_slice(suffix, s, e)
            lower = previous[seen_words[below]] if k == 2 else previous[below]
            weight = g[ctx]
            weight *= lower
            p += weight
            if top:
                write_slice(out / f"log10_prob_{k}.npy", s, np.log10(p))
            else:
                current[s:e] = p
            if k == 2:
                unigram_backoff[seen_words[c_lo:c_hi]] = g
            else:
                write_slice(out / f"log10_backoff_{k - 1}.npy", c_lo, np.log10(g))
        np.log10(previous, out=previous)
        np.save(out / f"log10_prob_{k - 1}.npy", previous)
        del a
        previous = current
        _write_keys(counts, k, out, chunk)
    if order == 1:
        np.save(out / "log10_prob_1.npy", np.log10(previous))
    np.save(out / "log10_backoff_1.npy", np.log10(unigram_backoff) if order > 1 else np.zeros(v))
    np.save(out / f"log10_backoff_{order}.npy", np.zeros(counts.size(order) if order > 1 else v))
    return discounts


def _write_keys(counts: DiskCounts, k: int, out: Path, chunk: int) -> None:
    """Order k's keys as BackoffTables keys them: bigram prefixes become word ids (order kept)."""
    if k > 2:
        shutil.copyfile(counts.path("keys", k), out / f"keys_{k}.npy")
        return
    v, seen_words, bigrams = counts.vocab_size, np.load(counts.path("keys", 1)), counts.table("keys", 2)
    create_table(out / "keys_2.npy", len(bigrams))
    for s in range(0, len(bigrams), chunk):
        piece = read_slice(counts.path("keys", 2), s, s + chunk)
        write_slice(out / "keys_2.npy", s, seen_words[piece // v] * v + piece % v)


def load_disk_tables(directory: Path, vocab_size: int, order: int) -> BackoffTables:
    """The tables kneser_ney_to_disk wrote, memory-mapped read-only (scoring reads what it needs)."""
    def table(name: str, k: int) -> np.ndarray:
        return np.load(directory / f"{name}_{k}.npy", mmap_mode="r")

    return BackoffTables(vocab_size, [table("keys", k) for k in range(1, order + 1)],
                         [table("log10_prob", k) for k in range(1, order + 1)],
                         [table("log10_backoff", k) for k in range(1, order + 1)])


def fit_kneser_ney_to_disk(ids: np.ndarray, order: int, vocab_size: int, memory_gb: float, out: Path | str,
                           workdir: Path | str | None = None) -> list[Discounts]:
    """fit_kneser_ney(ids, order, vocab_size, memory_gb), counted and estimated out of core: the
    tables go to the directory `out` (load_disk_tables reads them), the counts to a temporary
    directory in `workdir` (default: the system's), removed afterwards."""
    ids = checked_ids(ids, order, vocab_size, memory_gb)
    memory_bytes = int(memory_gb * 2**30)
    try:
        with tempfile.TemporaryDirectory(dir=workdir, prefix="nnlm-counts-") as tmp:
            counts = count_ngrams_to_disk(ids, order, vocab_size, memory_bytes, Path(tmp))
            return kneser_ney_to_disk(counts, Path(out), memory_bytes)
    except OSError as exc:
        raise NnlmError(f"out-of-core Kneser-Ney failed ({out}, {workdir or tempfile.gettempdir()}): "
                        f"{exc.strerror or exc}") from None


def fit_kneser_ney_mapped(ids: np.ndarray, order: int, vocab_size: int, memory_gb: float,
                          workdir: Path | str | None = None) -> tuple[BackoffTables, list[Discounts]]:
    """fit_kneser_ney_to_disk into a temporary directory, its tables memory-mapped and the files
    unlinked at once: the mappings keep them readable, and their disk space is freed with the model
    (nothing is left behind however the process ends)."""
    with tempfile.TemporaryDirectory(dir=workdir, prefix="nnlm-kn-") as tmp:
        out = Path(tmp) / "model"
        discounts = fit_kneser_ney_to_disk(ids, order, vocab_size, memory_gb, out, workdir=tmp)
        return load_disk_tables(out, vocab_size, order), discounts
