"""Vocabularies and corpora: text -> integer id arrays. (Names imported on first use: nnlm.lazy.)"""
from __future__ import annotations

from nnlm.lazy import lazy_getattr

_EXPORTS = {"Corpus": "nnlm.data.corpus", "load_corpus": "nnlm.data.corpus", "Vocabulary": "nnlm.data.vocab"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr("nnlm.data", _EXPORTS, globals())
