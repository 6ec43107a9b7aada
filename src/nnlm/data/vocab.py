"""Vocabulary: tokens <-> integer ids, with one `<unk>` id for everything outside it."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError

UNK = "<unk>"
PARAGRAPH = "<p>"
TEXT = "<text>"
TEXT_DIR_MIN_COUNT = 2  # a text corpus's default --min-count: words seen once in train become <unk>, so <unk>
# has training examples (nnlm.data.provenance, nnlm.data.corpus_stream)


@dataclass(frozen=True)
class Vocabulary:
    """An ordered list of distinct tokens; id = position. `<unk>` is always present."""

    tokens: tuple[str, ...]
    unk: str = UNK
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {tok: i for i, tok in enumerate(self.tokens)}
        if len(index) != len(self.tokens):
            raise NnlmError("vocabulary has duplicate tokens")
        if self.unk not in index:
            raise NnlmError(f"vocabulary lacks the unknown-word token {self.unk!r}")
        object.__setattr__(self, "_index", index)

    @classmethod
    def from_counts(
        cls,
        counts: Counter[str],
        min_count: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = (UNK, PARAGRAPH),
    ) -> Vocabulary:
        """Specials first, then tokens of count >= min_count by decreasing count (ties by string)."""
        if min_count < 1:
            raise NnlmError(f"--min-count must be at least 1, got {min_count}")
        kept = sorted(
            (tok for tok, c in counts.items() if c >= min_count and tok not in specials),
            key=lambda tok: (-counts[tok], tok),
        )
        tokens = list(dict.fromkeys(specials)) + kept
        if max_size is not None:
            if max_size < len(specials):
                raise NnlmError(f"--max-vocab must be at least {len(specials)}, got {max_size}")
            tokens = tokens[:max_size]
        return cls(tuple(tokens))

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._index

    @property
    def unk_id(self) -> int:
        return self._index[self.unk]

    def id(self, token: str) -> int:
        return self._index.get(token, self.unk_id)

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Token strings -> int32 ids (unknown tokens -> the `<unk>` id)."""
        # map over dict.get runs in C: a generator expression took a third of `nnlm score`'s time
        return np.fromiter(map(self._index.get, tokens, repeat(self.unk_id)), dtype=np.int32)

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[int(i)] for i in ids]

    @cached_property  # asked on every decoder step (LMState owners): computed once
    def fingerprint(self) -> str:
        """A short hash of the token list: two models can be compared only if these agree."""
        return hashlib.sha256("\n".join(self.tokens).encode()).hexdigest()[:16]

    def save(self, path: Path) -> None:
        from nnlm.io import atomic_write_text

        atomic_write_text(path, json.dumps({"unk": self.unk, "tokens": list(self.tokens)}))

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        from nnlm.io import JSON_LIMIT, read_input

        raw = read_input(path, "vocabulary file", JSON_LIMIT)
        try:
            data = json.loads(raw)
            tokens, unk = data["tokens"], data["unk"]
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or not isinstance(unk, str):
                raise TypeError("tokens must be a list of strings and unk a string")
            return cls(tuple(tokens), unk=unk)
        except (ValueError, KeyError, TypeError) as exc:
            raise NnlmError(f"cannot read vocabulary file {path}: {exc}") from None


def start_token(vocab: Vocabulary) -> str:
    """What precedes the first token of a text, in training and in use: `<text>` when the vocabulary
    has it (Brown: texts are separated by it), else `<p>` (text directories: paragraphs). The one
    rule for the start-of-text pad: corpora, runs and `nnlm.use` all take it from here."""
    return TEXT if TEXT in vocab else PARAGRAPH
