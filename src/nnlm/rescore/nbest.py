"""N-best lists as one in-memory shape, whatever file format they came from.

An utterance has hypotheses (word lists) and a feature matrix [hypotheses, features] whose columns
are named; readers fill it from the file's scores, `nnlm rescore` appends one column per language
model, and a weight vector over the columns ranks the hypotheses. `extra` keeps per-hypothesis text
a writer must give back unchanged (Moses' feature string, Kaldi's hypothesis id)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnlm.errors import NnlmError


@dataclass
class Utterance:
    """One utterance's n-best list."""

    uid: str
    hypotheses: list[list[str]]
    features: np.ndarray                                  # float64 [len(hypotheses), len(names)]
    extra: list[str] = field(default_factory=list)       # per hypothesis, for the writer

    def __post_init__(self) -> None:
        if not self.hypotheses:
            raise NnlmError(f"utterance {self.uid}: an empty n-best list")
        if self.features.shape[0] != len(self.hypotheses):
            raise NnlmError(f"utterance {self.uid}: {self.features.shape[0]} score rows for "
                            f"{len(self.hypotheses)} hypotheses")


@dataclass
class NBestSet:
    """Every utterance of an n-best set, with the names of the feature columns they share."""

    format: str
    names: list[str]
    utterances: list[Utterance]

    def add_feature(self, name: str, values: list[np.ndarray]) -> None:
        """Append a column: `values[i]` holds one number per hypothesis of utterance i."""
        if name in self.names:
            raise NnlmError(f"feature {name!r} is already in the n-best lists")
        self.names.append(name)
        for utt, column in zip(self.utterances, values, strict=True):
            utt.features = np.column_stack([utt.features, np.asarray(column, dtype=np.float64)])

    def column(self, name: str) -> int:
        if name not in self.names:
            raise NnlmError(f"no feature {name!r} in the n-best lists (they have: {', '.join(self.names)})")
        return self.names.index(name)


def ranking(utt: Utterance, weights: np.ndarray) -> np.ndarray:
    """Hypothesis indices best first by the weighted sum of features; ties keep the file's order."""
    return np.argsort(-(utt.features @ weights), kind="stable")
