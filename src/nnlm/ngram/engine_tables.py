"""The back-off query engine's tables and the object that holds them, without numba: what loading a saved
engine, its checks and the numpy probes (nnlm.ngram.numpy_probe) need (the compiled queries on them:
nnlm.ngram.query_engine).

Why a module of its own: numba's import and its target context cost a fresh process ~0.6 s, more than
`nnlm score` of a short file takes with everything else (docs/query-engine.md). A model loaded with its saved
engine tables (nnlm.ngram.engine_file) can score a stream by vectorized numpy probes of the same tables, the
same numbers bit for bit, and load the compiled kernels (nnlm.ngram.query_engine) only when they pay. The
memory rules (capacities, budgets, 2 MiB pages) are here too, shared by the build and the loader.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import numpy as np

# Every query builds the engine at a model's first call (nnlm.ngram.engine_build: Brown KN5 in ~0.2-0.3 s), so
# every face gets it without a warm-up; the kernels are cached on disk by numba (a fresh process loads them).
ENABLED = os.environ.get("NNLM_QUERY_ENGINE", "1") != "0"  # 0: every model keeps its numpy path (benchmarks)


# ---- the back-off engine -------------------------------------------------------------------------

@dataclass
class EngineTables:
    """Hash tables of one BackoffTables (nnlm.ngram.query_engine's docstring: the layout). What a loaded engine is
    until a compiled query is asked of it (query_engine.BackoffEngine adds them: `with_kernels`); streams are scored
    on it by the numpy probes or the stream kernel alike."""

    order: int
    vocab_size: int
    table: np.ndarray          # int64 [slots, 3]: key, log10 p bits, log10 back-off bits (orders >= 2)
    ftable: np.ndarray         # the same memory as float64
    offsets: np.ndarray        # int64 [order + 1]: order k's slots are offsets[k] .. offsets[k] + caps[k]
    caps: np.ndarray           # int64 [order + 1]
    unigram_prob: np.ndarray   # float64 [V] log10 p(w)
    unigram_backoff: np.ndarray  # float64 [V] log10 b(w)
    build_seconds: float = 0.0
    mapped: bool = False       # the table is a mapping of a saved file (nnlm.ngram.engine_file): 4 KiB pages
    mapped_tokens: int = 0     # tokens streamed on the mapping so far (engine_file.promote_when_it_pays)
    numpy_tokens: int = 0      # tokens streamed by numpy probes so far (BackoffTables.token_log10)

    def __post_init__(self) -> None:
        # scratch rows for the kernels (they allocate nothing): float [2, order-1], int [3, order+1]. Shared by
        # the calls of this engine: the kernels hold the GIL, so one runs at a time.
        self.fscratch = np.zeros((2, max(self.order - 1, 1)))
        self.iscratch = np.zeros((3, self.order + 1), dtype=np.int64)
        self._starts: dict[bytes, tuple[np.ndarray, np.ndarray, int]] = {}

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + self.unigram_prob.nbytes + self.unigram_backoff.nbytes

    def _kernel_tables(self) -> tuple:
        return (self.table, self.ftable, self.offsets, self.caps, self.unigram_prob, self.unigram_backoff, self.order)


EMPTY = -1  # key of an empty slot (raw keys are >= 0; a hash equal to it makes the build refuse)
LOAD_FACTOR = 0.5
HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads consecutive keys
# Engine memory allowed beside tables already in memory, and beside memory-mapped (out-of-core) ones,
# whose owner asked for little memory: above these the numpy path (searchsorted on the mapped arrays) stays.
MEMORY_BUDGET_BYTES = int(float(os.environ.get("NNLM_QUERY_ENGINE_GB", "8")) * 2**30)
MAPPED_MEMORY_BUDGET_BYTES = int(float(os.environ.get("NNLM_QUERY_ENGINE_MAPPED_GB", "1")) * 2**30)
SLOT_BYTES = 24
PREFETCH_AHEAD = 4  # rows whose first probes are prefetched while this one is scored (4 measured best, 2-32 tried)


def capacity(n: int) -> int:
    """Slots for n keys at LOAD_FACTOR (at least n + 1, so a probe always ends at an empty slot)."""
    return max(int(np.ceil(n / LOAD_FACTOR)), n + 1, 2)


def estimated_bytes(sizes: list[int]) -> int:
    """Memory of the engine for tables of `sizes` entries per order (hash slots and unigram arrays),
    plus the build's temporaries (about 5 int64 per entry of the largest order)."""
    return sum(capacity(n) * SLOT_BYTES for n in sizes[1:]) + 16 * sizes[0] + 40 * max(sizes)


def within_budget(arrays: list[np.ndarray], sizes: list[int]) -> bool:
    """Whether building the engine fits its budget (the smaller one if any table is memory-mapped)."""
    mapped = any(isinstance(a, np.memmap) or (a.base is not None and isinstance(a.base, np.memmap)) for a in arrays)
    return estimated_bytes(sizes) <= (MAPPED_MEMORY_BUDGET_BYTES if mapped else MEMORY_BUDGET_BYTES)


def huge_page_array(shape: tuple[int, ...], dtype: type, fill: int | None) -> np.ndarray:
    """A new array filled with `fill` (None: left as it comes, for the caller to fill), in memory the kernel may
    back with 2 MiB pages (madvise): random probes into a table of 100 MB then miss the TLB far less often. A
    plain array where that is not offered."""
    import mmap

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes < (4 << 20) or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(shape, dtype=dtype) if fill is None else np.full(shape, fill, dtype=dtype)
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # no transparent huge pages here: ordinary pages, the same numbers
        buffer.madvise(mmap.MADV_HUGEPAGE)
    out = np.frombuffer(buffer, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
    if fill is not None:
        out.fill(fill)
    return out
