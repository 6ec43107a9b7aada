"""A corpus file or standard input as one stream of decompressed bytes, read once, hashed as it is read.

The compression is told by the first bytes, not by the name, so `cat x.gz | nnlm ... --corpus -`
works as well as `--corpus x.gz`: gzip (1f 8b; several members, as pigz and bgzip write, are read
one after the other), xz (fd 37 7a 58 5a 00) and bzip2 ("BZh", a level digit, then the block magic
"1AY&SY"); anything else is plain text. A name ending in .gz, .xz or .bz2 whose bytes are not that
format is refused (a damaged header, or a misnamed file, should not be read as text).

Python's gzip, lzma and bz2 modules decompress; what they raise for a damaged stream (EOFError for
one cut short, zlib.error, lzma.LZMAError, OSError such as gzip.BadGzipFile for bad data or a bad
checksum) becomes one NnlmError line naming the input, however deep in the read it happens.

The SHA-256 of the bytes as they arrive (compressed, as `sha256sum` sees the file) names a stream
that cannot be read again: a corpus read from standard input is cached and recorded under it.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import sys
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nnlm.data import STDIN as STDIN  # (the notations: nnlm.data)
from nnlm.data import STDIN_RECORD as STDIN_RECORD
from nnlm.errors import NnlmError
from nnlm.io import require_regular

SUFFIXES = {".gz": "gzip", ".xz": "xz", ".bz2": "bzip2"}
_HEAD = 10  # enough bytes to tell the formats apart


def compression_of(head: bytes) -> str | None:
    """'gzip', 'xz' or 'bzip2' from a stream's first bytes; None for anything else (plain text)."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[3:4] != b"0" and head[4:10] == b"1AY&SY":
        return "bzip2"
    return None


class _Hashed(io.RawIOBase):
    """The raw bytes of `fh`, the already-read `head` first, hashed as they are read."""

    def __init__(self, fh: BinaryIO, head: bytes) -> None:
        self._fh, self._head, self.sha256 = fh, head, hashlib.sha256(head)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._fh.read(len(buffer))
        buffer[:len(data)] = data
        self.sha256.update(data)
        return len(data)


@dataclass
class SourceStream:
    """An open corpus source: `read(n)` gives decompressed bytes (b"" at the end); `name` is how messages
    call it; `sha256()` is the hash of the raw bytes read so far (all of them, once read to the end)."""

    name: str
    compression: str | None
    _raw: _Hashed
    _reader: BinaryIO

    def read(self, size: int) -> bytes:
        try:
            return self._reader.read(size)
        except EOFError:
            raise NnlmError(f"{self.name} is truncated: its {self.compression} stream ends before its end "
                            "marker (an unfinished download or copy?); nothing was written") from None
        except (zlib.error, lzma.LZMAError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno is not None:  # the disk or the pipe, not the data
                raise NnlmError(f"cannot read {self.name}: {exc.strerror}") from None
            what = f"holds damaged {self.compression} data" if self.compression else "is unreadable"
            raise NnlmError(f"{self.name} {what} ({str(exc) or type(exc).__name__}); nothing was written") from None

    def sha256(self) -> str:
        return self._raw.sha256.hexdigest()


def _read_head(fh: BinaryIO) -> bytes:
    head = b""
    while len(head) < _HEAD and (more := fh.read(_HEAD - len(head))):
        head += more
    return head


@contextmanager
def open_source(source: str) -> Iterator[SourceStream]:
    """The corpus file `source` (a regular file: FIFOs and devices are refused unopened) or '-' for
    standard input, decompressed if it is gzip, xz or bzip2."""
    with ExitStack() as stack:
        if source == STDIN:
            name, fh = "standard input", sys.stdin.buffer
        else:
            require_regular(source, "corpus file")
            name = f"corpus file {source}"
        try:
            if source != STDIN:
                fh = stack.enter_context(open(source, "rb"))
            head = _read_head(fh)
        except OSError as exc:
            raise NnlmError(f"cannot read {name}: {exc.strerror}") from None
        compression = compression_of(head)
        named = SUFFIXES.get(Path(source).suffix.lower()) if source != STDIN else None
        if named is not None and compression != named:
            raise NnlmError(f"{name} is named {Path(source).suffix} but does not hold {named} data "
                            f"({'it looks like ' + compression if compression else 'its header is not ' + named}); "
                            "nothing was written")
        raw = _Hashed(fh, head)
        buffered = io.BufferedReader(raw, 1 << 20)
        opener = {"gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"), "xz": lzma.LZMAFile, "bzip2": bz2.BZ2File}
        reader = stack.enter_context(opener[compression](buffered)) if compression else buffered
        yield SourceStream(name, compression, raw, reader)
