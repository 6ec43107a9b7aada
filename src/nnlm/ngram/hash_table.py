"""Open-addressing hash tables for the compiled query engines (the back-off engine, nnlm.ngram.query_engine;
the interpolated trigram's, nnlm.ngram.interpolated_engine; the ASCII tokenizer's word table).

One table is rows of int64 [key, value...] in a 2-d array (several tables may share one array at
offsets), linear probing, at most LOAD_FACTOR full, so a probe always ends at an empty slot. Keys are
raw ids (placed by a multiply-shift hash, `_home`) or word-tuple hashes already (`_home_hashed`; the
hashes themselves, KenLM-style keys built newest word first, are at the end of this module). The
helpers are numba functions inlined into the kernels that probe; `_prefetch_slot` asks the CPU for a
row ahead of its probe. Memory: `estimated_bytes` and the budgets below decide whether an engine is built.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from nnlm.ngram.engine_tables import (  # noqa: F401 (the names the kernels' callers import from here)
    EMPTY,
    HASH_MULTIPLIER,
    LOAD_FACTOR,
    MAPPED_MEMORY_BUDGET_BYTES,
    MEMORY_BUDGET_BYTES,
    PREFETCH_AHEAD,
    SLOT_BYTES,
    capacity,
    estimated_bytes,
    huge_page_array,
    within_budget,
)

# The kernels below run without numba's reference counting (_nrt=False): with it, every array handed to
# an inlined helper costs an atomic increment and decrement per token, which was a third of the time
# (Brown KN5 stream: 5.1 M tokens/s with it, 7.5 M without). So they allocate nothing: outputs and scratch
# space (ScratchSpace) come from the caller.
KERNEL = {"cache": True, "_nrt": False}



# ---- hashing ------------------------------------------------------------------------------------

@numba.njit(inline="always")
def _home(key: int, offset: int, cap: int) -> int:
    """The first slot to probe for `key` in the table at table[offset : offset + cap] (multiply-shift)."""
    h = np.uint64(key) * HASH_MULTIPLIER
    return offset + np.int64(((h >> np.uint64(32)) * np.uint64(cap)) >> np.uint64(32))


@numba.njit(inline="always")
def _home_hashed(key: int, offset: int, cap: int) -> int:
    """`_home` of a key that is already a hash (the back-off tables' word-tuple hashes): no multiply."""
    return offset + np.int64(((np.uint64(key) >> np.uint64(32)) * np.uint64(cap)) >> np.uint64(32))


@numba.njit(inline="always")
def _find(table: np.ndarray, offset: int, cap: int, key: int) -> int:
    """Slot of `key` in table[offset : offset + cap], or -1."""
    s = _home(key, offset, cap)
    end = offset + cap
    while True:
        k = table[s, 0]
        if k == key:
            return s
        if k == EMPTY:
            return -1
        s += 1
        if s == end:
            s = offset


@numba.njit(cache=True)
def _insert_all(table: np.ndarray, offset: int, cap: int, keys: np.ndarray, values: np.ndarray,
                hashed: bool) -> np.ndarray:
    """Put keys[i] with the int64 row values[i] into the table; returns each key's slot. Keys are distinct;
    `hashed`: they are word-tuple hashes (placed by _home_hashed), else raw keys (by _home)."""
    slots = np.empty(len(keys), dtype=np.int64)
    end = offset + cap
    for i in range(len(keys)):
        s = _home_hashed(keys[i], offset, cap) if hashed else _home(keys[i], offset, cap)
        while table[s, 0] != EMPTY:
            s += 1
            if s == end:
                s = offset
        table[s, 0] = keys[i]
        for j in range(values.shape[1]):
            table[s, 1 + j] = values[i, j]
        slots[i] = s
    return slots


@numba.njit(cache=True)
def _lookup_values(table: np.ndarray, offset: int, cap: int, keys: np.ndarray, default: int) -> np.ndarray:
    """table[slot of key, 1] for each key (an int64 value), `default` where the key is absent."""
    out = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        s = _find(table, offset, cap, keys[i])
        out[i] = table[s, 1] if s >= 0 else default
    return out


class HashMap:
    """An exact int64 -> int64 map (open addressing), for the relative-frequency tables of
    the interpolated trigram; built once from sorted or unsorted distinct keys."""

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        self.cap = capacity(len(keys))
        self.table = np.full((self.cap, 2), EMPTY, dtype=np.int64)
        _insert_all(self.table, 0, self.cap, keys, np.ascontiguousarray(values, dtype=np.int64)[:, None], False)

    def get(self, keys: np.ndarray, default: int = 0) -> np.ndarray:
        return _lookup_values(self.table, 0, self.cap, np.ascontiguousarray(keys, dtype=np.int64), default)

    @property
    def nbytes(self) -> int:
        return self.table.nbytes


@intrinsic
def _prefetch_slot(typingctx, table, slot):
    """Ask the CPU to start loading row `slot` of a 2-d array into cache, without waiting for it
    (LLVM's prefetch: the loads of rows scored a few steps later then overlap this row's work)."""
    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, sig.args[0], array,
                                           [args[1], context.get_constant(types.intp, 0)])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(pointer, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(table, slot), codegen


# ---- word-tuple hashes (KenLM-style keys: newest word first, one step per older word) ------------------

@numba.njit(inline="always")
def _mix(z):
    """A bijective 64-bit mixer (splitmix64's finalizer)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always")
def _extend(h, word):
    """The hash of a word tuple extended by one older `word`, from the tuple's hash `h` (uint64): the word
    spread over all 64 bits by a multiply, then one multiply-xorshift round (two multiplies, not a full mixer's
    three: it is on every lookup's path; the build checks that no two listed n-grams collide)."""
    z = (h ^ (np.uint64(word + 1) * HASH_MULTIPLIER)) * np.uint64(0xD6E8FEB86659FD93)
    return z ^ (z >> np.uint64(32))


@numba.njit(inline="always")
def _word_hash(word):
    return _mix(np.uint64(word + 1))
