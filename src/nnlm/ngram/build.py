"""Build or load a count-based model by name: the one place the CLI asks for n-gram kinds.

A new kind adds a builder to KINDS and, if it can be saved, its class to SAVED_KINDS (the class
provides `save(directory)` and a classmethod `load(directory)`, usually via nnlm.ngram.store). Each builder
imports its own model's module, and SAVED_KINDS names classes by "module:Class", so that building one kind
(a Kneser-Ney trigram for --init-features auto's comparison) imports no other kind's code.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.ngram.counts import MAX_ORDER

# builder(corpus, order, options) -> model
Builder = Callable[[Corpus, int, dict], LanguageModel]


def _uniform(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    from nnlm.ngram.simple import UniformModel

    return UniformModel(corpus.vocab)


def _addone(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    if order != 2:
        raise NnlmError("the add-one model is a bigram: use --order 2")
    from nnlm.ngram.simple import AddOneBigram

    return AddOneBigram.fit(corpus.vocab, corpus.train)


def _interpolated(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    if order != 3:
        raise NnlmError("the deleted-interpolation model is a trigram: use --order 3")
    from nnlm.ngram.interpolated import InterpolatedTrigram

    return InterpolatedTrigram.fit_corpus(corpus, memory_gb=options.get("memory_gb"))


def _kn(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    from nnlm.ngram.kneser_ney import KneserNeyModel

    return KneserNeyModel.fit(corpus.vocab, corpus.train, order, memory_gb=options.get("memory_gb"))


def _class(corpus: Corpus, order: int, options: dict) -> LanguageModel:
    """`clustering` "trigram": the exchange classes refined by the class trigram's likelihood
    (nnlm.wordclasses.trigram) -- for text whose classes act through pairs of classes."""
    from nnlm.ngram.class_based import DEFAULT_CLASSES, ClassNgram

    n_classes, clusters = options.get("classes") or DEFAULT_CLASSES, options.get("clusters")
    clustering = options.get("clustering", "exchange")
    if clustering not in ("exchange", "trigram"):
        raise NnlmError(f"unknown --clustering {clustering!r}; choose exchange or trigram")
    if clustering == "trigram" and clusters is None:
        from nnlm.wordclasses.exchange import WordClasses, exchange_clusters
        from nnlm.wordclasses.trigram import refine_by_trigrams

        train = np.asarray(corpus.train, dtype=np.int64)
        found = exchange_clusters(train, len(corpus.vocab), n_classes, progress=options.get("progress", True))
        refined, history = refine_by_trigrams(train, found.classes, found.n_classes)
        clusters = WordClasses(refined, found.n_classes, history, [0] * (len(history) - 1))
    return ClassNgram.fit(corpus.vocab, corpus.train, order, n_classes,
                          progress=options.get("progress", True), clusters=clusters)


# kind -> (builder, default order)
KINDS: dict[str, tuple[Builder, int]] = {
    "uniform": (_uniform, 1),
    "addone": (_addone, 2),
    "interpolated": (_interpolated, 3),
    "kn": (_kn, 5),
    "class": (_class, 3),
}

# kind -> "module:Class" of the class with save(directory) / load(directory), imported when a model is loaded
SAVED_KINDS: dict[str, str] = {
    "addone": "nnlm.ngram.simple:AddOneBigram",
    "interpolated": "nnlm.ngram.interpolated:InterpolatedTrigram",
    "kn": "nnlm.ngram.kneser_ney:KneserNeyModel",
    "backoff": "nnlm.ngram.backoff:BackoffModel",
    "class": "nnlm.ngram.class_based:ClassNgram",
}


def build_ngram(kind: str, corpus: Corpus, order: int | None = None, **options) -> LanguageModel:
    if kind not in KINDS:
        raise NnlmError(f"unknown n-gram kind {kind!r}; choose from {', '.join(KINDS)}")
    builder, default_order = KINDS[kind]
    order = default_order if order is None else order
    if not 1 <= order <= MAX_ORDER:
        raise NnlmError(f"n-gram order must be between 1 and {MAX_ORDER}, got {order}")
    return builder(corpus, order, options)


def save_ngram(model: LanguageModel, directory: Path | str, corpus: dict | None = None) -> None:
    """Save `model`; `corpus` (nnlm.data.provenance.corpus_options) records what it was built on."""
    from nnlm.capabilities import Saveable
    from nnlm.ngram.store import record_corpus

    if not isinstance(model, Saveable):
        raise NnlmError(f"a {type(model).__name__} cannot be saved (nothing to save: it is rebuilt instantly)")
    model.save(Path(directory))
    if corpus is not None:
        record_corpus(directory, corpus)


def load_ngram(directory: Path | str) -> LanguageModel:
    from nnlm.ngram.store import read_config

    kind = read_config(directory).get("kind")  # the arrays are read once, by the kind's own load
    if kind not in SAVED_KINDS:
        raise NnlmError(f"{directory}: unknown saved model kind {kind!r}")
    module, name = SAVED_KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name).load(Path(directory))
