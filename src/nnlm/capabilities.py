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
class ScoresStreams(Protocol):
    """Scores a stream of ids in one compiled call, the numbers `log_prob` gives on its context rows
    (nnlm.lm.chunked_log_probs, which every face's scoring goes through, then makes no rows): the
    count-based models with a query engine. None: no engine (memory budget, NNLM_QUERY_ENGINE=0)."""

    def stream_log_prob(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                        since_start: np.ndarray | None = None) -> np.ndarray | None: ...


@runtime_checkable
class ScoresUnknownWords(Protocol):
    """Scores a token list in which words outside V keep a feature vector of their own (the paper's
    sum_i C(i) P(i | context)) instead of <unk>'s: neural models."""

    def log_prob_text(self, tokens: list[str]) -> np.ndarray: ...


@runtime_checkable
class ChoosesScoring(Protocol):
    """Scores by a Scoring fixed when it was made (nnlm.neural.lm.scoring: exact, bf16, unnormalized), and gives
    the same model scoring another way as a new object sharing its weights: neural models."""

    def with_scoring(self, scoring: Any) -> Any: ...


@runtime_checkable
class HasWordFeatures(Protocol):
    """Has a word feature matrix C (the paper's distributed word representations)."""

    def word_feature_matrix(self) -> np.ndarray: ...
