"""A user's text file (or stdin) as lines: UTF-8 decoded line by line, so that one bad line is
reported by number (and can be skipped) instead of failing the whole file."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TextLines:
    lines: list[str]                                  # undecodable lines are "" here (blank)
    bad_utf8: list[int] = field(default_factory=list)  # their line numbers, from 1


def read_lines(source: str) -> TextLines:
    """Lines of a UTF-8 file or of stdin ('-'), without their line ends."""
    from nnlm.io import read_input

    raw = read_input(source, "text file", streams=True)
    text = TextLines([])
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        try:
            text.lines.append(chunk.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError:
            text.lines.append("")
            text.bad_utf8.append(number)
    if text.lines and text.lines[-1] == "" and not (text.bad_utf8 and text.bad_utf8[-1] == len(text.lines)):
        text.lines.pop()
    return text
