"""N-gram counting within a memory budget, the way KenLM's lmplz -S does: count in chunks, spill
the sorted chunk counts to disk, merge them one key range at a time.

The result is the very NgramCounts of `count_ngrams` (same keys, counts, prefix and suffix links,
same dtypes); only the working memory differs. In memory, counting order k sorts one int64 key per
token position with np.unique (argsort, inverse, counts: several arrays of the stream's length).
Here the per-position arrays live in memory-mapped files in a temporary directory:
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
from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.counts import MAX_ORDER, NgramCounts

BYTES_PER_POSITION = 80  # np.unique of a chunk: key, argsort, sorted copy, flags, counts (8 bytes each, and slack)


def chunk_positions(memory_bytes: int, order: int) -> int:
    """Positions counted at once so that a chunk's sorting stays within a quarter of the budget
    (the rest: the tables built so far and the merge)."""
    return max(order + 1, int(memory_bytes // 4 // BYTES_PER_POSITION))


def count_ngrams_external(ids: np.ndarray, order: int, vocab_size: int, memory_bytes: int,
                          workdir: Path | str | None = None) -> NgramCounts:
    """count_ngrams(ids, order, vocab_size), with per-position arrays on disk and chunked sorting."""
    if not 1 <= order <= MAX_ORDER:
        raise NnlmError(f"n-gram order must be between 1 and {MAX_ORDER}, got {order}")
    if len(ids) < order:
        raise NnlmError(f"cannot count {order}-grams in {len(ids)} tokens")
    chunk = chunk_positions(memory_bytes, order)
    try:
        with tempfile.TemporaryDirectory(dir=workdir, prefix="nnlm-counts-") as tmp:
            return _count(ids, order, vocab_size, chunk, Path(tmp))
    except OSError as exc:
        raise NnlmError(f"out-of-core counting failed in {workdir or tempfile.gettempdir()}: "
                        f"{exc.strerror or exc}") from None


def _spans(n: int, chunk: int) -> list[tuple[int, int]]:
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def _count(ids: np.ndarray, order: int, v: int, chunk: int, tmp: Path) -> NgramCounts:
    n = len(ids)
    totals = np.zeros(v, dtype=np.int64)
    for s, e in _spans(n, chunk):
        totals += np.bincount(np.asarray(ids[s:e], dtype=np.int64), minlength=v)
    keys = [np.flatnonzero(totals).astype(np.int64)]
    counts = [totals[keys[0]]]
    prefix = [np.empty(0, dtype=np.int64)]
    suffix = [np.empty(0, dtype=np.int64)]
    rank = np.full(v, -1, dtype=np.int64)
    rank[keys[0]] = np.arange(len(keys[0]))
    positions = np.lib.format.open_memmap(tmp / "pos_1.npy", mode="w+", dtype=np.int64, shape=(n,))
    for s, e in _spans(n, chunk):
        positions[s:e] = rank[ids[s:e]]
    for k in range(2, order + 1):
        starts = n - k + 1

        def chunk_keys(s: int, e: int, k: int = k, previous: np.ndarray = positions) -> np.ndarray:
            return previous[s:e] * v + np.asarray(ids[s + k - 1:e + k - 1], dtype=np.int64)

        spills = []
        for i, (s, e) in enumerate(_spans(starts, chunk)):
            uniq, cnt = np.unique(chunk_keys(s, e), return_counts=True)
            np.save(tmp / f"keys_{k}_{i}.npy", uniq)
            np.save(tmp / f"counts_{k}_{i}.npy", cnt.astype(np.int64))
            spills.append((tmp / f"keys_{k}_{i}.npy", tmp / f"counts_{k}_{i}.npy"))
        table, table_counts = _merge(spills, chunk)
        here = np.lib.format.open_memmap(tmp / f"pos_{k}.npy", mode="w+", dtype=np.int64, shape=(starts,))
        links = np.empty(len(table), dtype=np.int64)
        for s, e in _spans(starts, chunk):
            at = np.searchsorted(table, chunk_keys(s, e))
            here[s:e] = at
            links[at] = positions[s + 1:e + 1]  # every occurrence of a k-gram has the same suffix
        keys.append(table)
        counts.append(table_counts)
        prefix.append(table // v)
        suffix.append(links)
        for spill in spills:
            for path in spill:
                path.unlink()
        positions = here  # the previous order's file is no longer needed
        (tmp / f"pos_{k - 1}.npy").unlink()
    return NgramCounts(v, keys, counts, prefix, suffix)


def _merge(spills: list[tuple[Path, Path]], chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct keys of all spilled chunks and their summed counts, one key range at a time."""
    if len(spills) == 1:
        return np.load(spills[0][0]), np.load(spills[0][1])
    keys = [np.load(k, mmap_mode="r") for k, _ in spills]
    counts = [np.load(c, mmap_mode="r") for _, c in spills]
    total = sum(len(k) for k in keys)
    ranges = max(1, -(-total // chunk))
    step = max(1, total // (ranges * 64))  # bounds from a sample of every chunk's keys
    sample = np.sort(np.concatenate([np.asarray(k[::step]) for k in keys]))
    bounds = np.unique(sample[np.linspace(0, len(sample) - 1, ranges + 1).astype(np.int64)[1:-1]])
    edges = [None, *bounds.tolist(), None]
    out_keys, out_counts = [], []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        piece_keys, piece_counts = [], []
        for k, c in zip(keys, counts, strict=True):
            a = 0 if lo is None else int(np.searchsorted(k, lo))
            b = len(k) if hi is None else int(np.searchsorted(k, hi))
            piece_keys.append(np.asarray(k[a:b]))
            piece_counts.append(np.asarray(c[a:b]))
        cat = np.concatenate(piece_keys)
        by_key = np.argsort(cat, kind="stable")
        cat = cat[by_key]
        first = np.flatnonzero(np.concatenate([[True], cat[1:] != cat[:-1]])) if len(cat) else np.empty(0, np.int64)
        out_keys.append(cat[first])
        out_counts.append(np.add.reduceat(np.concatenate(piece_counts)[by_key], first) if len(cat)
                          else np.empty(0, np.int64))
    return np.concatenate(out_keys), np.concatenate(out_counts).astype(np.int64)
