"""N-gram counting within a memory budget, the way KenLM's lmplz -S does: count in chunks, spill
the sorted chunk counts to disk, merge them one key range at a time.

The result is the very tables of `count_ngrams` (same keys, counts and suffix links, same dtypes),
written as .npy files (DiskCounts: kneser_ney_disk estimates from them) or loaded as NgramCounts;
only the working memory differs. In memory, counting order k sorts one int64 key per token
position with np.unique (argsort, inverse, counts: several arrays of the stream's length).
Here the per-position arrays live in .npy files, mapped a chunk at a time:
  pos_{k}   index in the order-k table of the k-gram starting at each position;
and the sorting is done on chunks of `chunk` positions at a time:
  1. each chunk's keys (index of the (k-1)-gram prefix) * |V| + last word are np.unique'd and saved;
  2. the saved chunks are merged key range by key range (each range small enough for the budget):
     the pieces of every chunk in that range are concatenated, sorted and their counts summed;
  3. a second pass over the chunks finds each position's index in the merged table (searchsorted)
     and the suffix link of each k-gram (its (k-1)-gram starting one position later).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.counts import MAX_ORDER, NgramCounts

BYTES_PER_POSITION = 80  # np.unique of a chunk: key, argsort, sorted copy, flags, counts (8 bytes each, and slack)


def chunk_positions(memory_bytes: int, order: int) -> int:
    """Positions counted at once so that a chunk's sorting stays within a quarter of the budget
    (the rest: the tables built so far and the merge)."""
    return max(order + 1, int(memory_bytes // 4 // BYTES_PER_POSITION))


@dataclass(frozen=True)
class DiskCounts:
    """The tables of count_ngrams as .npy files in `directory` (orders 1..order):
      keys_{k}.npy    sorted int64 keys (as NgramCounts.keys; the prefix index is key // |V|)
      counts_{k}.npy  int64 counts
      suffix_{k}.npy  int64 index in order k-1 of the k-gram without its first word (k >= 2)
    and `opening[k-1]`, the index of the k-gram that opens the stream (the start precedes it)."""

    directory: Path
    vocab_size: int
    order: int
    opening: tuple[int, ...]

    def path(self, name: str, k: int) -> Path:
        return self.directory / f"{name}_{k}.npy"

    def table(self, name: str, k: int) -> np.ndarray:
        """One table, memory-mapped read-only (callers read slices of it)."""
        return np.load(self.path(name, k), mmap_mode="r")

    def size(self, k: int) -> int:
        return len(self.table("keys", k))

    def load(self) -> NgramCounts:
        """Every table in memory, as count_ngrams returns them."""
        tables = {name: [np.load(self.path(name, k)) for k in range(1, self.order + 1)]
                  for name in ("keys", "counts")}
        suffix = [np.empty(0, dtype=np.int64)] + [np.load(self.path("suffix", k)) for k in range(2, self.order + 1)]
        prefix = [np.empty(0, dtype=np.int64)] + [keys // self.vocab_size for keys in tables["keys"][1:]]
        return NgramCounts(self.vocab_size, tables["keys"], tables["counts"], prefix, suffix)


def count_ngrams_external(ids: np.ndarray, order: int, vocab_size: int, memory_bytes: int,
                          workdir: Path | str | None = None) -> NgramCounts:
    """count_ngrams(ids, order, vocab_size), with per-position arrays on disk and chunked sorting."""
    try:
        with tempfile.TemporaryDirectory(dir=workdir, prefix="nnlm-counts-") as tmp:
            return count_ngrams_to_disk(ids, order, vocab_size, memory_bytes, Path(tmp)).load()
    except OSError as exc:
        raise NnlmError(f"out-of-core counting failed in {workdir or tempfile.gettempdir()}: "
                        f"{exc.strerror or exc}") from None


def count_ngrams_to_disk(ids: np.ndarray, order: int, vocab_size: int, memory_bytes: int,
                         directory: Path) -> DiskCounts:
    """Count every k-gram of `ids` into .npy tables in `directory` (see DiskCounts); in memory at
    once: one chunk's sorting and the merged keys of the order being counted."""
    if not 1 <= order <= MAX_ORDER:
        raise NnlmError(f"n-gram order must be between 1 and {MAX_ORDER}, got {order}")
    if len(ids) < order:
        raise NnlmError(f"cannot count {order}-grams in {len(ids)} tokens")
    return _count(ids, order, vocab_size, chunk_positions(memory_bytes, order), Path(directory))


def _spans(n: int, chunk: int) -> list[tuple[int, int]]:
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def create_table(path: Path, n: int, dtype: type = np.int64) -> None:
    np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n,)).flush()


def read_slice(path: Path, start: int, stop: int) -> np.ndarray:
    """A copy of [start, stop) of a .npy file, mapped only meanwhile (its pages do not stay resident)."""
    table = np.load(path, mmap_mode="r")
    piece = np.array(table[start:stop])
    del table
    return piece


def write_slice(path: Path, s: int, values: np.ndarray, at: np.ndarray | None = None) -> None:
    """Write values into a .npy file at [s, s + len) (or at the indices `at`), mapping it only
    meanwhile, so that its pages do not stay in this process's resident set."""
    table = np.load(path, mmap_mode="r+")
    if at is None:
        table[s:s + len(values)] = values
    else:
        table[at] = values
    table.flush()
    del table


def _count(ids: np.ndarray, order: int, v: int, chunk: int, tmp: Path) -> DiskCounts:
    n = len(ids)
    totals = np.zeros(v, dtype=np.int64)
    for s, e in _spans(n, chunk):
        totals += np.bincount(np.asarray(ids[s:e], dtype=np.int64), minlength=v)
    words = np.flatnonzero(totals).astype(np.int64)
    np.save(tmp / "keys_1.npy", words)
    np.save(tmp / "counts_1.npy", totals[words])
    rank = np.full(v, -1, dtype=np.int64)
    rank[words] = np.arange(len(words))
    opening = [int(rank[ids[0]])]
    create_table(tmp / "pos_1.npy", n)
    for s, e in _spans(n, chunk):
        write_slice(tmp / "pos_1.npy", s, rank[ids[s:e]])
    del totals, words, rank
    for k in range(2, order + 1):
        starts = n - k + 1
        previous = tmp / f"pos_{k - 1}.npy"

        def chunk_keys(s: int, e: int, k: int = k, previous: Path = previous) -> np.ndarray:
            return np.load(previous, mmap_mode="r")[s:e] * v + np.asarray(ids[s + k - 1:e + k - 1], dtype=np.int64)

        spills = []
        for i, (s, e) in enumerate(_spans(starts, chunk)):
            uniq, cnt = np.unique(chunk_keys(s, e), return_counts=True)
            np.save(tmp / f"spill_keys_{k}_{i}.npy", uniq)
            np.save(tmp / f"spill_counts_{k}_{i}.npy", cnt.astype(np.int64))
            spills.append((tmp / f"spill_keys_{k}_{i}.npy", tmp / f"spill_counts_{k}_{i}.npy"))
        _merge(spills, chunk, tmp / f"keys_{k}.npy", tmp / f"counts_{k}.npy")
        table = np.load(tmp / f"keys_{k}.npy")
        here = tmp / f"pos_{k}.npy"
        create_table(here, starts)
        # in memory like the table: written at scattered places by every chunk, a mapped file would be
        # flushed whole after each chunk
        links = np.empty(len(table), dtype=np.int64)
        for s, e in _spans(starts, chunk):
            uniq, inverse = np.unique(chunk_keys(s, e), return_inverse=True)
            at = np.searchsorted(table, uniq)[inverse.ravel()]  # sorted needles: a cache-friendly search
            write_slice(here, s, at)
            links[at] = read_slice(previous, s + 1, e + 1)  # every occurrence of a k-gram has the same suffix
        np.save(tmp / f"suffix_{k}.npy", links)
        del links
        del table
        opening.append(int(np.load(here, mmap_mode="r")[0]))
        previous.unlink()  # the previous order's positions are no longer needed
    (tmp / f"pos_{order}.npy").unlink()
    return DiskCounts(tmp, v, order, tuple(opening))


def _merge(spills: list[tuple[Path, Path]], chunk: int, keys_out: Path, counts_out: Path) -> None:
    """Write the sorted distinct keys of all spilled chunks and their summed counts, merged one key
    range at a time (a range's pieces are appended to the output files as they are done); the
    spill files are removed."""
    if len(spills) == 1:
        spills[0][0].rename(keys_out)
        spills[0][1].rename(counts_out)
        return
    keys = [np.load(k, mmap_mode="r") for k, _ in spills]
    total = sum(len(k) for k in keys)
    ranges = max(1, -(-total // chunk))
    step = max(1, total // (ranges * 64))  # bounds from a sample of every chunk's keys
    sample = np.sort(np.concatenate([np.asarray(k[::step]) for k in keys]))
    del keys
    bounds = np.unique(sample[np.linspace(0, len(sample) - 1, ranges + 1).astype(np.int64)[1:-1]])
    edges = [None, *bounds.tolist(), None]
    pieces = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        piece_keys, piece_counts = [], []
        for key_path, count_path in spills:  # mapped for this range only: read pages do not pile up
            k = np.load(key_path, mmap_mode="r")
            a = 0 if lo is None else int(np.searchsorted(k, lo))
            b = len(k) if hi is None else int(np.searchsorted(k, hi))
            piece_keys.append(np.array(k[a:b]))
            piece_counts.append(read_slice(count_path, a, b))
            del k
        cat = np.concatenate(piece_keys)
        by_key = np.argsort(cat, kind="stable")
        cat = cat[by_key]
        first = np.flatnonzero(np.concatenate([[True], cat[1:] != cat[:-1]])) if len(cat) else np.empty(0, np.int64)
        summed = (np.add.reduceat(np.concatenate(piece_counts)[by_key], first) if len(cat)
                  else np.empty(0, np.int64))
        index = len(pieces)
        np.save(keys_out.with_name(f"piece_keys_{index}.npy"), cat[first])
        np.save(keys_out.with_name(f"piece_counts_{index}.npy"), summed.astype(np.int64))
        pieces.append(index)
    for name, out in (("keys", keys_out), ("counts", counts_out)):
        files = [out.with_name(f"piece_{name}_{i}.npy") for i in pieces]
        total_len = sum(len(np.load(f, mmap_mode="r")) for f in files)
        create_table(out, total_len)
        at = 0
        for f in files:
            piece = np.load(f)
            write_slice(out, at, piece)
            at += len(piece)
            f.unlink()
    for spill in spills:
        for path in spill:
            path.unlink()
