"""A corpus from one text file (plain, gzip, xz or bzip2) or from standard input, read once.

A stream may be readable only once (standard input), or costly to read twice (a compressed file),
so it is read in one pass, in blocks of whole lines (`stream_token_blocks`): each word gets a
provisional id the first time it is seen (a dict of the distinct words: O(|types|)), and the
provisional ids go to a spool file on disk. Once the stream has ended, its length is known, so:
  1. valid and test are cut from its end by the held-out rule (`heldout_sizes`, below);
  2. the words of train (or of all of it, --vocab-from all) are counted by np.bincount over the
     spool, and the vocabulary is made from those counts as for a text directory;
  3. a provisional -> final id table maps the spool into the cache's ids.npy, a chunk at a time.
Memory: the distinct words, one block of text and one chunk of ids, whatever the stream's length;
disk: the spool (4 bytes a token) beside the cache while it is written.

The held-out rule (docs/guide.md): test is the fewest whole lines at the end holding at least H
tokens, valid the fewest whole lines just before them holding at least H, train the rest: three
consecutive pieces of the stream, as for Brown and text directories. H is --heldout TOKENS,
by default 5% of the tokens, at most 1,000,000 (and at least one
line each); --no-heldout (H = 0) trains on everything.

The cache (nnlm.data.corpus reads and writes it) is keyed by a regular file's path, size and
modification time (as a text directory's), so a second command finds it without reading the file;
standard input's by the SHA-256 of the bytes as piped, computed while they are read. A corpus read
from standard input is recorded with a model as `stdin:<sha256>`, and a recorded one is read back
from the cache alone (it cannot be re-read).
"""
from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnlm.data.text_source import STDIN, STDIN_RECORD, open_source
from nnlm.data.text_stream import stream_token_blocks
from nnlm.data.vocab import PARAGRAPH, TEXT_DIR_MIN_COUNT, UNK, Vocabulary, start_token
from nnlm.errors import NnlmError

HELDOUT_SHARE = 20  # default H: 1/20 of the tokens (5%) ...
HELDOUT_CAP = 1_000_000  # ... at most this many
CHUNK = 1 << 22  # ids mapped, counted or searched at once (16 MB of int32)
_BREAK = 0  # the provisional id of <p>, which ends every line


def default_heldout(tokens: int) -> int:
    """H when --heldout is not given: 5% of the tokens, at most 1,000,000, at least 1 (a line each)."""
    return max(1, min(HELDOUT_CAP, tokens // HELDOUT_SHARE))


class SpoolDirectory(tempfile.TemporaryDirectory):
    """A temporary directory for the spool: in `root` (the cache's file system, where the ids go next)
    when it can be made there, else the system's temporary directory."""

    def __init__(self, root: Path) -> None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            super().__init__(prefix=".nnlm-spool-", dir=root)
        except OSError:
            super().__init__(prefix="nnlm-spool-")

    def __enter__(self) -> Path:  # type: ignore[override]
        return Path(super().__enter__())


@dataclass(frozen=True)
class StreamPlan:
    """What one read of a stream found (nnlm.data.corpus.CorpusPlan's fields, and the input's SHA-256)."""

    name: str
    vocab: Vocabulary
    sizes: tuple[int, int, int]
    pad_token: str
    fill: Callable[[np.ndarray], None]
    origin: str | None
    sha256: str


def spool_stream(source: str, spool: Path, block_bytes: int | None = None) -> tuple[list[str], int, str]:
    """Read `source` once into `spool` as provisional int32 ids: (the words by provisional id, the number
    of tokens, the SHA-256 of the raw bytes)."""
    index: dict[str, int] = {PARAGRAPH: _BREAK}
    types = [PARAGRAPH]
    total = 0
    with open_source(source) as stream, open(spool, "wb") as out:
        for tokens in stream_token_blocks(stream, stream.name, block_bytes):
            new = set(tokens).difference(index)
            if new:
                fresh = sorted(new)  # sorted: the provisional ids do not depend on str hashing
                index.update(zip(fresh, range(len(types), len(types) + len(fresh)), strict=True))
                types.extend(fresh)
            out.write(np.fromiter(map(index.__getitem__, tokens), dtype=np.int32, count=len(tokens)).tobytes())
            total += len(tokens)
        name, sha256 = stream.name, stream.sha256()
    if total == 0:
        raise NnlmError(f"{name} holds no tokens (it is empty or blank); nothing was written")
    return types, total, sha256


def read_ids(spool: Path, lo: int, hi: int) -> np.ndarray:
    """Spooled ids lo:hi, read into memory (not mapped: the pages of a spool as large as the text are
    never held by this process)."""
    return np.fromfile(spool, dtype=np.int32, count=hi - lo, offset=4 * lo)


def _last_break(spool: Path, limit: int) -> int | None:
    """The end (index + 1) of the last line that ends at or before position `limit`, or None."""
    for hi in range(limit, 0, -CHUNK):
        lo = max(0, hi - CHUNK)
        hits = np.flatnonzero(read_ids(spool, lo, hi) == _BREAK)
        if len(hits):
            return lo + int(hits[-1]) + 1
    return None


def heldout_sizes(spool: Path, total: int, heldout: int | None, name: str) -> tuple[int, int, int]:
    """(train, valid, test) sizes by the held-out rule (module docstring) for the `total` ids spooled in
    `spool` (they end with a line break)."""
    h = default_heldout(total) if heldout is None else heldout
    if h == 0:
        return total, 0, 0
    test_start = _last_break(spool, total - h) if total > h else None
    valid_start = _last_break(spool, test_start - h) if test_start is not None and test_start > h else None
    if valid_start is None:
        raise NnlmError(f"{name} ({total:,} tokens) is too short to hold out valid and test parts of at least "
                        f"{h:,} tokens each in whole lines, with some left to train on: give a smaller --heldout, "
                        "or --no-heldout to train on all of it")
    return valid_start, test_start - valid_start, total - test_start


def plan_stream(source: str, spool_dir: Path, min_count: int | None, max_vocab: int | None, vocab_from: str,
                heldout: int | None, block_bytes: int | None = None) -> StreamPlan:
    """Read the stream once into a spool in `spool_dir` and decide the splits and the vocabulary; the plan's
    `fill` maps the spool into final ids (while `spool_dir` exists)."""
    spool = spool_dir / "spool.bin"
    types, total, sha256 = spool_stream(source, spool, block_bytes)
    name = "standard input" if source == STDIN else f"corpus file {source}"
    sizes = heldout_sizes(spool, total, heldout, name)
    counted = total if vocab_from == "all" else sizes[0]
    counts = np.zeros(len(types), dtype=np.int64)
    for lo in range(0, counted, CHUNK):
        counts += np.bincount(read_ids(spool, lo, min(lo + CHUNK, counted)), minlength=len(types))
    if min_count is None:  # as for a text directory: 1 if train already holds <unk>, else 2
        min_count = 1 if UNK in types and counts[types.index(UNK)] > 0 else TEXT_DIR_MIN_COUNT
    vocab = Vocabulary.from_counts(Counter(dict(zip(types, counts.tolist(), strict=True))), min_count=min_count,
                                   max_size=max_vocab)
    final = vocab.encode(types)

    def fill(out: np.ndarray) -> None:
        for lo in range(0, total, CHUNK):
            hi = min(lo + CHUNK, total)
            out[lo:hi] = final[read_ids(spool, lo, hi)]

    label = "stdin" if source == STDIN else Path(source).name
    origin = STDIN_RECORD + sha256 if source == STDIN else None
    return StreamPlan(label, vocab, sizes, start_token(vocab), fill, origin, sha256)
