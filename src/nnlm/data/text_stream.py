"""Reading a corpus text file in blocks of whole lines, so that no list of all its tokens is built.

A block is cut after its last line break, so every line lies in one block and the tokens are those
of reading the whole file at once: the words of each non-blank line, then `<p>`.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from nnlm.data.tokenize import text_tokens
from nnlm.errors import NnlmError
from nnlm.io import require_regular

BLOCK_BYTES = 8 << 20  # a few million tokens: their Python strings stay well under a gigabyte


def token_blocks(path: Path, block_bytes: int | None = None) -> Iterator[list[str]]:
    """The tokens of a UTF-8 file, one list per block of whole lines (a blank file yields nothing)."""
    require_regular(path, "corpus file")
    try:
        with open(path, "rb") as fh:
            yield from stream_token_blocks(fh, f"corpus file {path}", block_bytes)
    except OSError as exc:
        raise NnlmError(f"cannot read corpus file {path}: {exc.strerror or exc}") from None


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def stream_token_blocks(fh: Readable, name: str, block_bytes: int | None = None) -> Iterator[list[str]]:
    """`token_blocks` of an open binary stream (a file, a decompressor, standard input), read once."""
    block_bytes = block_bytes or BLOCK_BYTES
    offset, rest = 0, b""
    while True:
        chunk = fh.read(block_bytes)
        data = rest + chunk
        if chunk:
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # one line longer than a block: read on
                rest = data
                continue
            block, rest = data[:cut], data[cut:]
        else:
            block, rest = data, b""
        if block:
            yield text_tokens(_decode(block, name, offset))
        offset += len(block)
        if not chunk:
            return


def _decode(block: bytes, name: str, offset: int) -> str:
    if b"\x00" in block:
        raise NnlmError(f"{name} looks like a binary file (it holds NUL bytes), not UTF-8 text")
    try:
        return block.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NnlmError(f"{name} is not valid UTF-8 (bad byte at offset {offset + exc.start})") from None
