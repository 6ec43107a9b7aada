"""Vocabularies and corpora: text -> integer id arrays. (Names imported on first use: nnlm.lazy.)

A corpus source is a directory of splits, one text file (.gz, .bz2, .xz too), or STDIN; a model built from
standard input records its source as STDIN_RECORD + the SHA-256 of what was piped. The two notations live here,
where every module of the package reads them without opening the file-reading ones."""
from __future__ import annotations

from nnlm.lazy import lazy_getattr

STDIN = "-"
STDIN_RECORD = "stdin:"  # + the SHA-256 of what was piped: how a model records a corpus read from stdin

_EXPORTS = {"Corpus": "nnlm.data.corpus", "load_corpus": "nnlm.data.corpus", "Vocabulary": "nnlm.data.vocab"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr("nnlm.data", _EXPORTS, globals())
