"""Vocabularies and corpora: text -> integer id arrays. (Names imported on first use, see nnlm/__init__.)"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"Corpus": "nnlm.data.corpus", "load_corpus": "nnlm.data.corpus", "Vocabulary": "nnlm.data.vocab"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'nnlm.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
