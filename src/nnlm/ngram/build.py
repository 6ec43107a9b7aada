"""Build a count-based model by name from a corpus: the one place the CLI asks for n-gram kinds."""
from __future__ import annotations

from typing import Callable

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.ngram.simple import AddOneBigram, UniformModel

# kind -> (builder(corpus, order, options) -> model, default order)
Builder = Callable[[Corpus, int, dict], LanguageModel]


def _uniform(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    return UniformModel(corpus.vocab)


def _addone(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    if order != 2:
        raise NnlmError("the add-one model is a bigram: use --order 2")
    return AddOneBigram(corpus.vocab, corpus.train)


KINDS: dict[str, tuple[Builder, int]] = {
    "uniform": (_uniform, 1),
    "addone": (_addone, 2),
}


def build_ngram(kind: str, corpus: Corpus, order: int | None = None, **options) -> LanguageModel:
    if kind not in KINDS:
        raise NnlmError(f"unknown n-gram kind {kind!r}; choose from {', '.join(KINDS)}")
    builder, default_order = KINDS[kind]
    return builder(corpus, default_order if order is None else order, options)
