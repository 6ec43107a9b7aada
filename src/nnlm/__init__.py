"""nnlm: neural probabilistic language models (Bengio et al. 2003) and their n-gram baselines.

The names below are imported on first use (PEP 562), so that `nnlm --help` and small tools do not
pay for numpy and torch before they need them."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Corpus": "nnlm.data.corpus", "load_corpus": "nnlm.data.corpus", "Vocabulary": "nnlm.data.vocab",
    "NnlmError": "nnlm.errors", "LanguageModel": "nnlm.lm", "perplexity": "nnlm.lm", "split_log_probs": "nnlm.lm",
    "load": "nnlm.loading", "generate": "nnlm.use", "next_words": "nnlm.use", "score_words": "nnlm.use",
    "text_perplexity": "nnlm.use",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'nnlm' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
