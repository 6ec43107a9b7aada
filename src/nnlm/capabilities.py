"""Optional capabilities some models have beyond the LanguageModel interface, as Protocols: code
that needs one asks `isinstance(model, Protocol)` instead of probing attribute names."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Saveable(Protocol):
    """Written to a directory that `nnlm.load` reads back (the n-gram models)."""

    def save(self, directory: Path) -> None: ...


@runtime_checkable
class ReportsBuild(Protocol):
    """Says what its build did (EM steps, clustering time): (JSON-ready details, one line of text)."""

    def details(self) -> tuple[dict[str, Any], str]: ...


@runtime_checkable
class ScoresUnknownWords(Protocol):
    """Scores a token list in which words outside V keep a feature vector of their own (the paper's
    sum_i C(i) P(i | context)) instead of <unk>'s: neural models."""

    def log_prob_text(self, tokens: list[str]) -> np.ndarray: ...


@runtime_checkable
class ChoosesScoring(Protocol):
    """Scores by a Scoring fixed when it was made (nnlm.neural.scoring: exact, bf16, unnormalized), and gives
    the same model scoring another way as a new object sharing its weights: neural models."""

    def with_scoring(self, scoring: Any) -> Any: ...


@runtime_checkable
class HasWordFeatures(Protocol):
    """Has a word feature matrix C (the paper's distributed word representations)."""

    def word_feature_matrix(self) -> np.ndarray: ...
