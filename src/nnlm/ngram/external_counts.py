"""N-gram counting within a memory budget, the way KenLM's lmplz -S does: count in chunks, spill
the sorted chunk counts to disk, merge them one key range at a time.

The result is the very tables of `count_ngrams` (same keys, counts and suffix links, same dtypes),
written as .npy files (DiskCounts: kneser_ney_disk estimates from them) or loaded as NgramCounts;
only the working memory differs. In memory, counting order k sorts one int64 key per token
position with np.unique (argsort, inverse, counts: several arrays of the stream's length).
Here the per-position arrays live in .npy files, mapped a chunk at a time:
  pos_{k}   index in the order-k table of the k-gram starting at each position;
and every step reads and writes files in order, with no lookup into a table of the whole order:
  1. each chunk's keys (index of the (k-1)-gram prefix) * |V| + last word are np.unique'd; the
     chunk's distinct keys, their counts and their suffix links (the (k-1)-gram starting one
     position later: the same for every occurrence) are spilled, and so is each position's index
     among the chunk's distinct keys (its "inverse");
  2. the spills are merged key range by key range (each range small enough for the budget): the
     pieces of every chunk in that range are concatenated and sorted, counts summed, one suffix
     link kept, and the merged index of each chunk's key written to that chunk's map;
  3. each position's index in the order-k table is its chunk's map at its inverse.
(An earlier version found each position's index by searching the merged table and scattered the
suffix links into an array of the whole order: lookups whose cost grew with the table, and 16 bytes
per k-gram of the order in memory.)
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
        previous, here = tmp / f"pos_{k - 1}.npy", tmp / f"pos_{k}.npy"
        spills = [_spill(ids, previous, k, v, s, e, tmp / f"spill_{k}_{i}")
                  for i, (s, e) in enumerate(_spans(n - k + 1, chunk))]
        _merge(spills, chunk, tmp / f"keys_{k}.npy", tmp / f"counts_{k}.npy", tmp / f"suffix_{k}.npy")
        create_table(here, n - k + 1)
        for spill in spills:  # each position's index in the merged table: its chunk's map at its inverse
            inverse = np.load(spill.inverse)
            where = inverse if spill.map is None else np.load(spill.map)[inverse]
            write_slice(here, spill.start, where)
            spill.inverse.unlink()
            if spill.map is not None:
                spill.map.unlink()
        opening.append(int(np.load(here, mmap_mode="r")[0]))
        previous.unlink()  # the previous order's positions are no longer needed
    (tmp / f"pos_{order}.npy").unlink()
    return DiskCounts(tmp, v, order, tuple(opening))


@dataclass(frozen=True)
class _Spill:
    """One chunk's counting of order k: its distinct keys, their counts and suffix links (files), each
    position's index among those keys (`inverse`), and `map`, their indices in the merged table
    (written by _merge; None when the chunk is the whole order and the map is the identity)."""

    start: int
    keys: Path
    counts: Path
    suffix: Path
    inverse: Path
    map: Path | None


def _spill(ids: np.ndarray, previous: Path, k: int, v: int, s: int, e: int, stem: Path) -> _Spill:
    """Count the k-grams starting at positions s..e-1 and spill them (see _Spill)."""
    keys = read_slice(previous, s, e) * v + np.asarray(ids[s + k - 1:e + k - 1], dtype=np.int64)
    uniq, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
    del keys
    paths = {name: stem.with_name(f"{stem.name}_{name}.npy") for name in ("keys", "counts", "suffix", "inverse", "map")}
    np.save(paths["keys"], uniq)
    np.save(paths["counts"], counts.astype(np.int64))
    np.save(paths["suffix"], read_slice(previous, s + 1, e + 1)[first])  # every occurrence has the same suffix
    np.save(paths["inverse"], inverse.ravel().astype(np.int32 if len(uniq) < 2**31 else np.int64))
    return _Spill(s, paths["keys"], paths["counts"], paths["suffix"], paths["inverse"], paths["map"])


def _merge(spills: list[_Spill], chunk: int, keys_out: Path, counts_out: Path, suffix_out: Path) -> None:
    """Write the sorted distinct keys of all spilled chunks, their summed counts and suffix links,
    merged one key range at a time (a range's pieces are appended to the output files as they are
    done), and each chunk's map (merged index of each of its keys); the spill files are removed."""
    if len(spills) == 1:
        spill = spills[0]
        spill.keys.rename(keys_out)
        spill.counts.rename(counts_out)
        spill.suffix.rename(suffix_out)
        spills[0] = _Spill(spill.start, keys_out, counts_out, suffix_out, spill.inverse, None)
        return
    keys = [np.load(sp.keys, mmap_mode="r") for sp in spills]
    total = sum(len(k) for k in keys)
    ranges = max(1, -(-total // chunk))
    step = max(1, total // (ranges * 64))  # bounds from a sample of every chunk's keys
    sample = np.sort(np.concatenate([np.asarray(k[::step]) for k in keys]))
    for sp, k in zip(spills, keys, strict=True):
        create_table(sp.map, len(k))
    del keys
    bounds = np.unique(sample[np.linspace(0, len(sample) - 1, ranges + 1).astype(np.int64)[1:-1]])
    edges = [None, *bounds.tolist(), None]
    pieces, merged = [], 0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        spans, piece_keys, piece_counts, piece_suffix = [], [], [], []
        for sp in spills:  # mapped for this range only: read pages do not pile up
            k = np.load(sp.keys, mmap_mode="r")
            a = 0 if lo is None else int(np.searchsorted(k, lo))
            b = len(k) if hi is None else int(np.searchsorted(k, hi))
            spans.append((a, b))
            piece_keys.append(np.array(k[a:b]))
            piece_counts.append(read_slice(sp.counts, a, b))
            piece_suffix.append(read_slice(sp.suffix, a, b))
            del k
        cat = np.concatenate(piece_keys)
        by_key = np.argsort(cat, kind="stable")
        cat = cat[by_key]
        opens = np.concatenate([[True], cat[1:] != cat[:-1]]) if len(cat) else np.empty(0, dtype=bool)
        first = np.flatnonzero(opens)
        summed = (np.add.reduceat(np.concatenate(piece_counts)[by_key], first) if len(cat)
                  else np.empty(0, np.int64))
        index = np.empty(len(cat), dtype=np.int64)  # merged index of each piece element, in piece order
        index[by_key] = merged + np.cumsum(opens) - 1
        at = 0
        for sp, (a, b) in zip(spills, spans, strict=True):
            write_slice(sp.map, a, index[at:at + b - a])
            at += b - a
        number = len(pieces)
        np.save(keys_out.with_name(f"piece_keys_{number}.npy"), cat[first])
        np.save(keys_out.with_name(f"piece_counts_{number}.npy"), summed.astype(np.int64))
        np.save(keys_out.with_name(f"piece_suffix_{number}.npy"), np.concatenate(piece_suffix)[by_key][first])
        pieces.append(number)
        merged += len(first)
    for name, out in (("keys", keys_out), ("counts", counts_out), ("suffix", suffix_out)):
        files = [out.with_name(f"piece_{name}_{i}.npy") for i in pieces]
        create_table(out, merged)
        at = 0
        for f in files:
            piece = np.load(f)
            write_slice(out, at, piece)
            at += len(piece)
            f.unlink()
    for sp in spills:
        for path in (sp.keys, sp.counts, sp.suffix):
            path.unlink()
