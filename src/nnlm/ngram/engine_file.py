"""The back-off query engine's tables kept beside a saved model (engine.npy + engine.json), so that a fresh
process maps them instead of building them.

Why: `nnlm score MODEL FILE` in a fresh process paid the engine's build at its first query (Brown KN5:
0.35-0.5 s of compiled passes and 0.15 s to fill 110 MiB, in a run of 1.6-4 s), where KenLM, the
reference, reads its model as it is. The build is deterministic, so `save_arrays` writes its result into
the model directory with the arrays (in the same atomic directory: all or nothing), and a load maps it
from the file (np.load's copy-on-write mapping) and checks its CRC-32: ~0.06 s for Brown KN5's 110 MiB
against ~0.5 s to build it. A mapping has 4 KiB pages, which a stream's prefetched probes do not mind;
the per-call APIs (one line, one sentence, one step) have the table copied into 2 MiB pages first
(`promote`), as a built table is.

engine.npy is the table (int64 [slots, 3], nnlm.ngram.engine_tables.EngineTables), one .npy file (so
that the mapping is 64-byte aligned as a built table is: numba types an unaligned array differently), read
with allow_pickle=False: nothing in it is executed.
engine.json holds the rest: LAYOUT, the order, |V|, the entries per order, the table's offsets, caps,
shape and CRC-32, and the CRC-32 of each array of arrays.npz it was built from (as its zip directory
lists them). The engine is used only if all of it checks out, else the model builds it in memory as
before, after one line on stderr saying why:
- LAYOUT is this code's (bump it when the hashing, capacities or slot layout of hash_table.py or
  engine_build.py change); the order, |V| and entries per order are the loaded tables';
- the source CRC-32s are arrays.npz's (an engine copied beside other arrays is stale), and the table's
  bytes have their CRC-32 (a damaged or truncated file is not read as numbers);
- the slots are where this code puts them: a few listed n-grams of each order are scored by the loaded
  engine and by the numpy path and must agree (a forgotten LAYOUT bump still gives no wrong number).
A model saved before these files existed (or whose engine is refused: tables not suffix-closed, over the
memory budget, NNLM_QUERY_ENGINE=0) has none and builds its engine as before, silently.
"""
from __future__ import annotations

import json
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from nnlm.ngram.engine_tables import EngineTables, capacity, huge_page_array, within_budget

TABLE_FILE, INFO_FILE = "engine.npy", "engine.json"
LAYOUT = 1  # the version of the tables' layout: hash_table's hashing and capacity, engine_build's slots
SAMPLES = 16  # listed n-grams of each order scored both ways when the files are loaded
INFO_LIMIT = 1 << 20


def source_names(order: int) -> list[str]:
    """The arrays.npz members an engine is built from, in the order `source_crc` lists them."""
    return [f"{name}_{k}" for k in range(1, order + 1) for name in ("keys", "log10_prob", "log10_backoff")]


def source_crcs(arrays_path: Path, order: int) -> list[int] | None:
    """The CRC-32 of each source member of the .npz at `arrays_path` (from its zip directory), or None."""
    try:
        with zipfile.ZipFile(arrays_path) as archive:
            crc = {info.filename[:-4]: info.CRC for info in archive.infolist()}
    except (OSError, zipfile.BadZipFile):
        return None
    names = source_names(order)
    return [crc[name] for name in names] if all(n in crc for n in names) else None


def attach(tables, directory: Path) -> None:
    """Note on `tables`, just loaded from the model directory `directory`, where their engine tables may be and
    which arrays they were read from (the CRC-32s of arrays.npz now: a model saved over this directory later
    has other arrays, and its engine tables are then refused for these)."""
    tables.saved_in = directory
    tables.source_crc = source_crcs(directory / "arrays.npz", tables.order)


def save_engine(directory: Path, tables) -> bool:
    """Write `tables`' query engine (BackoffTables.query_engine, built here if it is not yet) as engine.npy and
    engine.json into `directory`, which already holds the arrays.npz it is built from (a model directory being
    written: the caller's atomic directory makes them all appear at once); nothing if the tables have no
    engine. Returns whether they were written."""
    if tables.order < 2:  # a unigram model's engine is its arrays: nothing to build, nothing to keep
        return False
    engine = tables.query_engine()
    crcs = source_crcs(directory / "arrays.npz", tables.order)
    if engine is None or crcs is None:
        return False
    np.save(directory / TABLE_FILE, engine.table, allow_pickle=False)
    info = {"layout": LAYOUT, "order": tables.order, "vocab_size": tables.vocab_size, "sizes": tables.sizes(),
            "offsets": engine.offsets.tolist(), "caps": engine.caps.tolist(), "shape": list(engine.table.shape),
            "table_crc": zlib.crc32(engine.table), "source_crc": crcs}
    (directory / INFO_FILE).write_text(json.dumps(info))
    return True


def load_engine(directory: Path, tables):
    """The EngineTables of `tables` (loaded from `directory`) mapped from its engine.npy, or None: there is
    none (silently), it does not check out (one line on stderr: the caller builds the engine instead), or the
    engine would not fit its memory budget (as a build would refuse)."""
    from nnlm.io import read_input, require_regular

    if not (directory / INFO_FILE).is_file():
        return None
    if not within_budget(tables.keys + tables.log10_prob + tables.log10_backoff, tables.sizes()):
        return None
    try:
        info = json.loads(read_input(directory / INFO_FILE, "engine info", INFO_LIMIT))
        require_regular(directory / TABLE_FILE, "engine table")
        reason = _mismatch(info, directory, tables)
        if reason is None:
            table = np.asarray(np.load(directory / TABLE_FILE, mmap_mode="c", allow_pickle=False))
            reason = _table_mismatch(table, info)
    except Exception as exc:  # noqa: BLE001 (a damaged file, whatever fails reading it: one line, then the build)
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
    if reason is None:
        engine = EngineTables(tables.order, tables.vocab_size, table, table.view(np.float64),
                               np.asarray(info["offsets"], dtype=np.int64), np.asarray(info["caps"], dtype=np.int64),
                               np.ascontiguousarray(tables.log10_prob[0], dtype=np.float64),
                               np.ascontiguousarray(tables.log10_backoff[0], dtype=np.float64), mapped=True)
        reason = _spot_check(engine, tables)
        if reason is None:
            return engine
    print(f"nnlm: note: {directory / TABLE_FILE} not used ({reason}); building the query engine in memory "
          "(saving the model again rewrites it)", file=sys.stderr)
    return None


def _mismatch(info: dict, directory: Path, tables) -> str | None:
    """Why engine.json does not describe the engine of `tables` (None if it does)."""
    if not isinstance(info, dict) or info.get("layout") != LAYOUT:
        return f"layout {info.get('layout') if isinstance(info, dict) else '?'}, this version reads layout {LAYOUT}"
    order = tables.order
    if tables.source_crc is None or tables.source_crc != info.get("source_crc"):
        return "built from another arrays.npz"
    if info.get("order") != order or info.get("vocab_size") != tables.vocab_size or info.get("sizes") != tables.sizes():
        return "built for other tables than arrays.npz's"
    caps, offsets = info.get("caps"), info.get("offsets")
    want_caps = [0, 0] + [capacity(n) for n in tables.sizes()[1:]]
    if caps != want_caps or offsets != [0, 0] + np.cumsum(want_caps[1:-1]).tolist():
        return "inconsistent table offsets"
    slots = offsets[order] + caps[order] if order > 1 else 0
    if info.get("shape") != [slots, 3]:
        return "a table of the wrong size"
    return None


# A stream scored on the mapping ran at 0.65-0.8 x its rate on a promoted table (Brown KN5 test, 177k tokens,
# load 1: 2.6-2.9 M tokens/s against 3.5-4.5 M): ~0.1 us more a token. The copy costs 0.3-1.6 ns a byte of the
# table (warm pages to a fresh process's). So a stream pays for it after ~1 ns / 0.12 us = one token per
# STREAM_BYTES_PER_TOKEN bytes of table; `promote_when_it_pays` copies once the tokens streamed on the mapping
# reach that (the rule of renting until the rent would have bought it: never more than twice the better choice).
STREAM_BYTES_PER_TOKEN = 120


def promote_when_it_pays(engine, tokens: int) -> None:
    """Count `tokens` about to be scored as a stream on a mapped table, and `promote` the table first once the
    tokens streamed on the mapping, these included, would have paid for the copy (a fresh `nnlm score` of a short
    file keeps the mapping; a long file, or a model that scores many texts, gets the 2 MiB pages)."""
    engine.mapped_tokens += tokens
    if engine.mapped_tokens * STREAM_BYTES_PER_TOKEN >= engine.table.nbytes:
        promote(engine)


def promote(engine) -> None:
    """Copy a mapped table (`engine.mapped`) into memory backed by 2 MiB pages, as a built table is; the callers
    that make one call per line, sentence or step ask for it (BackoffTables.query_engine): their random probes
    miss the TLB on a mapping's 4 KiB pages (one-line calls measured 2.0-2.4 x KenLM's time on a mapped table,
    1.4-1.9 x on a built one, alternating processes at load 1), while a stream's probes are prefetched and a
    fresh `nnlm score` would pay the copy (~0.1-0.3 s for Brown KN5, the pages' allocation included)."""
    table = huge_page_array(engine.table.shape, np.int64, None)
    np.copyto(table, engine.table)
    engine.table, engine.ftable, engine.mapped = table, table.view(np.float64), False


def _table_mismatch(table: np.ndarray, info: dict) -> str | None:
    """Why the table read is not the one engine.json describes (None if it is)."""
    if table.dtype != np.int64 or list(table.shape) != info["shape"] or not table.flags.c_contiguous:
        return f"a table of shape {table.shape} and type {table.dtype}, not {info['shape']} int64"
    if zlib.crc32(table) != info.get("table_crc"):
        return "its CRC-32 does not match: the file is damaged"
    return None


def _spot_check(engine, tables) -> str | None:
    """None if a few listed n-grams of each order score the same on `engine` and on the numpy path."""
    order = tables.order
    if order < 2:
        return None
    rows = []
    for k in range(2, order + 1):
        n = len(tables.keys[k - 1])
        if n:
            picks = np.unique(np.linspace(0, n - 1, min(SAMPLES, n)).astype(np.int64))
            grams = tables.words(k)[picks] if n <= SAMPLES else np.stack([tables.words(k, i, i + 1)[0] for i in picks])
            padded = np.zeros((len(grams), order), dtype=np.int64)
            padded[:, order - k:] = grams
            rows.append(padded)
    if not rows:
        return None
    rows = np.concatenate(rows)
    contexts, targets = np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, -1])
    from nnlm.ngram.numpy_probe import rows_log10  # (no compiled kernel: a fresh process may never need one)

    if not np.allclose(rows_log10(engine, contexts, targets), tables.reference_log10_prob_of(contexts, targets),
                       rtol=0, atol=1e-9):
        return "its slots do not give the model's probabilities"
    return None
