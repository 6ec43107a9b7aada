"""The deleted-interpolation trigram's tables out of core: counted within a memory budget
(`nnlm.ngram.external_counts`, as Kneser-Ney's `--memory`) and written a chunk at a time as .npy
files, then memory-mapped, so no table of the size of the distinct trigrams is ever in memory.

The tables are `InterpolatedTrigram.fit`'s to the last bit (tests compare every array): the count
tables key a k-gram as (index of its prefix) * |V| + last word, the model keys it by word ids,
(u * |V| + v) * |V| + w; the map between the two preserves order, so each table is re-keyed
entry by entry in its own order, and the per-context totals are integer sums over chunks cut only
where the context changes (`kneser_ney_disk.context_chunks`).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError
from nnlm.ngram.external_counts import (
    DiskCounts,
    chunk_positions,
    count_ngrams_to_disk,
    create_table,
    read_slice,
    write_slice,
)
from nnlm.ngram.kneser_ney_disk import context_chunks

MAPPED = ("bigram_keys", "bigram_counts", "trigram_keys", "trigram_counts", "context_keys", "context_totals")


def trigram_tables_to_disk(counts: DiskCounts, out: Path, memory_bytes: int) -> dict[str, np.ndarray]:
    """Write the model's big tables into `out` (.npy files named as the tables); return the small ones."""
    out.mkdir(parents=True, exist_ok=True)
    v, chunk = counts.vocab_size, chunk_positions(memory_bytes, 3)
    seen = np.load(counts.path("keys", 1))
    unigram = np.zeros(v, dtype=np.int64)
    unigram[seen] = np.load(counts.path("counts", 1))
    bigram_totals = np.zeros(v)
    n_bigrams = counts.size(2)
    create_table(out / "bigram_keys.npy", n_bigrams)
    for s in range(0, n_bigrams, chunk):
        piece = read_slice(counts.path("keys", 2), s, s + chunk)
        first = seen[piece // v]
        write_slice(out / "bigram_keys.npy", s, first * v + piece % v)
        # float sums of integer counts: exact (< 2^53), so chunking gives fit()'s bincount to the bit
        bigram_totals += np.bincount(first, weights=read_slice(counts.path("counts", 2), s, s + chunk), minlength=v)
    shutil.copyfile(counts.path("counts", 2), out / "bigram_counts.npy")
    shutil.copyfile(counts.path("counts", 3), out / "trigram_counts.npy")

    bigram_keys = np.load(out / "bigram_keys.npy", mmap_mode="r")
    keys3 = counts.path("keys", 3)
    spans = context_chunks(np.load(keys3, mmap_mode="r"), v, chunk, n_bigrams)
    n_trigrams = counts.size(3)
    create_table(out / "trigram_keys.npy", n_trigrams)
    n_contexts = 0
    for s, e, _, _ in spans:  # distinct contexts first, to size the context tables
        piece = read_slice(keys3, s, e)
        write_slice(out / "trigram_keys.npy", s, bigram_keys[piece // v] * v + piece % v)
        n_contexts += int(np.count_nonzero(np.diff(piece // v))) + (e > s)
    create_table(out / "context_keys.npy", n_contexts)
    create_table(out / "context_totals.npy", n_contexts)
    at = 0
    for s, e, _, _ in spans:  # a context's entries are never split between chunks
        if e == s:
            continue
        context = read_slice(keys3, s, e) // v
        starts = np.flatnonzero(np.concatenate([[True], context[1:] != context[:-1]]))
        write_slice(out / "context_keys.npy", at, bigram_keys[context[starts]])
        write_slice(out / "context_totals.npy", at, np.add.reduceat(read_slice(counts.path("counts", 3), s, e), starts))
        at += len(starts)
    del bigram_keys
    return {"unigram": unigram, "bigram_totals": bigram_totals.astype(np.int64)}


def fit_trigram_tables_mapped(train: np.ndarray, vocab_size: int, memory_gb: float,
                              workdir: Path | str | None = None) -> dict[str, np.ndarray]:
    """InterpolatedTrigram.fit's tables, counted and written out of core, the big ones memory-mapped
    read-only from files unlinked at once (their disk space is freed with the model)."""
    memory_bytes = int(memory_gb * 2**30)
    try:
        with tempfile.TemporaryDirectory(dir=workdir, prefix="nnlm-trigram-") as tmp:
            (Path(tmp) / "counts").mkdir()
            counts = count_ngrams_to_disk(train, 3, vocab_size, memory_bytes, Path(tmp) / "counts")
            small = trigram_tables_to_disk(counts, Path(tmp) / "model", memory_bytes)
            return small | {name: np.load(Path(tmp) / "model" / f"{name}.npy", mmap_mode="r") for name in MAPPED}
    except OSError as exc:
        raise NnlmError(f"out-of-core trigram counting failed in {workdir or tempfile.gettempdir()}: "
                        f"{exc.strerror or exc}") from None
