"""A user's text (a file, stdin, or Python strings) as a stream of bounded pieces of lines.

`nnlm score` must not hold a 2 GiB input, nor one 200 MB line, as Python strings (a token costs
~60 bytes as a str: 16x the text). So the text is read in blocks of `BLOCK_BYTES`: a block ends
after its last "\\n"; a line longer than a block is cut after a white-space character (a word is
never cut; a multi-byte UTF-8 character is never cut, since the cut follows an ASCII space or a
decoded white-space character). Lines are numbered by "\\n" (as editors and `wc -l` count them);
how a line is cut into paragraphs and words is nnlm.data.tokenize's rule, applied by the scorer.

Each line is decoded on its own, so an undecodable line is reported by number (and can be
skipped) instead of failing the whole file; a long line found undecodable after some of its
pieces were given out is reported then, and its pieces are taken back by the scorer.
"""
from __future__ import annotations

import fcntl
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from nnlm.errors import NnlmError

BLOCK_BYTES = 4 << 20  # ~0.8M tokens: their strings and ids take ~60 MB, whatever the input's size
_LAST_SPACE = re.compile(r"\s\S*\Z")  # `\s` is exactly str.isspace, hence str.split's white space


@dataclass
class Piece:
    """Consecutive lines, numbered from `first_line`; `texts[i]` is None for an undecodable line.
    `continues`: texts[0] goes on a line begun in earlier pieces; `open`: the last text's line goes
    on in the next piece."""
    first_line: int
    texts: list[str | None]
    continues: bool = False
    open: bool = False


def open_text(source: str) -> tuple[BinaryIO, str]:
    """A binary stream of a user's text ('-' is stdin; a pipe works, a device or directory is refused
    unopened, as nnlm.io.read_input does), and the name to call it in messages."""
    from nnlm.io import kind_of

    if source == "-":
        return sys.stdin.buffer, "standard input"
    name = f"text file {source}"
    try:
        st = os.stat(source)
        pipe = stat.S_ISFIFO(st.st_mode)
        if not (stat.S_ISREG(st.st_mode) or pipe):
            raise NnlmError(f"{name} is a {kind_of(st.st_mode)}, not a regular file")
        fd = os.open(source, os.O_RDONLY | (os.O_NONBLOCK if pipe else 0))  # a FIFO nobody writes to: empty
        if pipe:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb"), name
    except OSError as exc:
        raise NnlmError(f"cannot read {name}: {exc.strerror}") from None


def read_pieces(fh: BinaryIO, name: str, block_bytes: int | None = None, limit: int | None = None,
                close: bool = False) -> Iterator[Piece]:
    """The lines of a UTF-8 byte stream as pieces of at most ~2 blocks (a word longer than that is
    held whole, as bytes). At most `limit` bytes are read (default: nnlm.io's text cap). `close`:
    close `fh` when done (or dropped)."""
    try:
        yield from _pieces(fh, name, block_bytes, limit)
    finally:
        if close:
            fh.close()


def _pieces(fh: BinaryIO, name: str, block_bytes: int | None, limit: int | None) -> Iterator[Piece]:
    from nnlm.io import TEXT_LIMIT

    limit = TEXT_LIMIT if limit is None else limit
    block_bytes = block_bytes or BLOCK_BYTES
    line, size = 1, 0
    buf = bytearray()
    continuing = skipping = False  # within a long line; skipping: the rest of an undecodable one
    while True:
        try:
            chunk = fh.read(block_bytes)
        except OSError as exc:
            raise NnlmError(f"cannot read {name}: {exc.strerror}") from None
        if b"\x00" in chunk:
            raise NnlmError(f"{name} looks like a binary file (it holds NUL bytes), not UTF-8 text")
        size += len(chunk)
        if size > limit:
            raise NnlmError(f"{name} is larger than {limit:,} bytes; split it (or raise NNLM_MAX_INPUT_BYTES)")
        buf += chunk
        cut = len(buf) if not chunk else buf.rfind(b"\n") + 1
        if cut or not chunk:
            whole = bytes(buf[:cut])
            del buf[:cut]
            if skipping:  # the end of an undecodable long line, already reported
                whole = whole[whole.find(b"\n") + 1:] if b"\n" in whole else b""
                skipping = continuing = False
            raw = whole.split(b"\n")
            if raw[-1] == b"":  # the text after the last "\n": nothing (a last line without "\n" stays)
                raw.pop()
            if continuing and not raw:  # the input ended right after a long line's last piece
                raw = [b""]
            if raw:
                yield Piece(line, _decode_lines(whole, raw), continuing)
                line += len(raw)
                continuing = False
        if not chunk:
            return
        if skipping:  # no "\n" in `buf`: all of it is the rest of an undecodable line
            del buf[:]
        elif len(buf) >= block_bytes:  # a line longer than a block: give out what ends at a white space
            head = _head_at_space(buf)
            if head is None:
                continue
            text = _decode_or_none(head)
            yield Piece(line, [text], continuing, open=text is not None)
            if text is None:
                line, skipping, continuing = line + 1, True, False
            else:
                continuing = True


def _head_at_space(buf: bytearray) -> bytes | None:
    """Cut `buf` after its last white-space character and return the part before (None: no white space
    yet, a very long word). Undecodable bytes are returned uncut, for the caller to report."""
    end = max(buf.rfind(c) for c in b" \t\r\x0b\x0c\x1c\x1d\x1e\x1f") + 1  # never inside a UTF-8 character
    if not end:  # no one-byte space: look for any white space (U+3000, U+2028, ...) in the decoded text
        boundary = len(buf) - 1
        while boundary > 0 and buf[boundary] & 0xC0 == 0x80:  # the start of the last (maybe partial) character
            boundary -= 1
        text = _decode_or_none(bytes(buf[:boundary]))
        if text is None:
            head = bytes(buf)
            del buf[:]
            return head
        m = _LAST_SPACE.search(text)
        if m is None:
            return None
        end = len(text[:m.start() + 1].encode("utf-8"))
    head = bytes(buf[:end])
    del buf[:end]
    return head


def _decode_lines(whole: bytes, raw: list[bytes]) -> list[str | None]:
    try:
        text = whole.decode("utf-8")
    except UnicodeDecodeError:
        return [_decode_or_none(b) for b in raw]
    lines = text.split("\n")
    return lines[:len(raw)]


def _decode_or_none(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def line_pieces(lines: Iterable[str], block_chars: int | None = None) -> Iterator[Piece]:
    """Python strings as pieces (one string = one line; a string longer than a block is cut after a
    white-space character, as a file's long line is)."""
    block_chars = block_chars or BLOCK_BYTES
    batch: list[str | None] = []
    first, chars, number = 1, 0, 0
    for number, text in enumerate(lines, start=1):
        if not isinstance(text, str):
            raise NnlmError(f"line {number} is a {type(text).__name__}, not a str")
        if len(text) <= block_chars:
            batch.append(text)
            chars += len(text)
            if chars >= block_chars:
                yield Piece(first, batch)
                batch, first, chars = [], number + 1, 0
            continue
        if batch:
            yield Piece(first, batch)
        parts = list(_cut_text(text, block_chars))
        for i, part in enumerate(parts):
            yield Piece(number, [part], continues=i > 0, open=i < len(parts) - 1)
        batch, first, chars = [], number + 1, 0
    if batch:
        yield Piece(first, batch)


def _cut_text(text: str, size: int) -> Iterator[str]:
    """`text` in parts of about `size` characters, each but the last ending in white space."""
    at = 0
    while len(text) - at > size:
        m = _LAST_SPACE.search(text, at, at + size)
        if m is None:  # a word longer than `size`: cut after it
            m = re.compile(r"\s").search(text, at + size)
            if m is None:
                break
            end = m.end()
        else:
            end = m.start() + 1
        yield text[at:end]
        at = end
    yield text[at:]
