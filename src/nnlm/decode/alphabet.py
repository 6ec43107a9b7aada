"""The labels file: one label per line in the logits' column order, and what each label means.

As wav2vec2 vocabularies write them: `<blank>`, `<pad>` or `_` is the CTC blank, `|` (or `<space>`) the
word boundary, other `<...>` / `[...]` entries (`<s>`, `</s>`, `<unk>`) are specials a transcript never
holds, and every other label is one character of a word."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError

BLANKS = ("<blank>", "<pad>", "[pad]", "_")
BOUNDARIES = ("|", "<space>")
SPECIAL = re.compile(r"^(<.+>|\[.+\])$")


@dataclass(frozen=True)
class Alphabet:
    """Labels in column order; `blank` and `boundary` columns; `emits[c]`: the column can be a
    character of the transcript (not blank, boundary or a special)."""

    labels: tuple[str, ...]
    blank: int
    boundary: int | None
    emits: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def char_column(self) -> dict[str, int]:
        return {lab: c for c, lab in enumerate(self.labels) if self.emits[c]}

    @classmethod
    def from_labels(cls, labels: list[str], source: str = "labels") -> Alphabet:
        if not labels:
            raise NnlmError(f"{source} holds no labels: give one label per line, in the logits' column order")
        seen: dict[str, int] = {}
        for i, lab in enumerate(labels):
            if lab == "":
                raise NnlmError(f"{source} line {i + 1} is empty: every line must name a label")
            if lab in seen:
                raise NnlmError(f"{source}: label {lab!r} appears on lines {seen[lab] + 1} and {i + 1}")
            seen[lab] = i
        blanks = [i for i, lab in enumerate(labels) if lab.lower() in BLANKS]
        if not blanks:
            raise NnlmError(f"{source} has no CTC blank label: name it <blank> or <pad> (one line)")
        if len(blanks) > 1:
            raise NnlmError(f"{source} has several blank labels ({', '.join(labels[i] for i in blanks)}): keep one")
        boundaries = [i for i, lab in enumerate(labels) if lab in BOUNDARIES]
        if len(boundaries) > 1:
            raise NnlmError(f"{source} has several word-boundary labels: keep one of | and <space>")
        emits = np.array([i != blanks[0] and lab not in BOUNDARIES and not SPECIAL.match(lab)
                          for i, lab in enumerate(labels)])
        long = [lab for i, lab in enumerate(labels) if emits[i] and len(lab) != 1]
        if long:
            raise NnlmError(f"{source}: label {long[0]!r} is not one character (character alphabets only; "
                            "specials are written <...>)")
        return cls(tuple(labels), blanks[0], boundaries[0] if boundaries else None, emits)

    def spell(self, columns: list[int]) -> str:
        """The transcript of a collapsed label sequence: characters, `|` as a space."""
        return "".join(" " if c == self.boundary else self.labels[c] for c in columns).strip()


def read_labels(path: str | Path) -> Alphabet:
    """The labels file at `path` (UTF-8, one label per line; a line's surrounding white space is dropped,
    so a space label is written `|` or `<space>`)."""
    from nnlm.io import read_input

    try:
        text = read_input(path, "labels file").decode("utf-8")
    except UnicodeDecodeError:
        raise NnlmError(f"labels file {path} is not UTF-8 text") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return Alphabet.from_labels([line.strip() for line in lines], f"labels file {path}")
