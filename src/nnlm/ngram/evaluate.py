"""What `nnlm ngram` does, as library calls: obtain a count-based model (built, loaded, or read from
ARPA), write it out, and evaluate it on a corpus into one result object."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from nnlm.capabilities import ReportsBuild
from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel, perplexity

SPLITS = ("train", "valid", "test")


@dataclass
class ObtainedNgram:
    model: LanguageModel
    kind: str              # the kind asked for, "arpa" for an ARPA file, or the saved model's own
    action: str            # "built" or "loaded"
    seconds: float


@dataclass
class NgramEvaluation:
    corpus: str
    kind: str
    order: int
    vocab: int
    perplexity: dict[str, float]
    build_seconds: float
    details: tuple[dict[str, Any], str] | None     # what the build did (EM steps, clustering time)
    discount_fallback: list[int] | None            # Kneser-Ney orders that used the fallback discounts


OUT_OF_CORE = ("kn", "interpolated")  # the kinds --memory builds out of core


def obtain_ngram(corpus: Corpus, kind: str, order: int | None = None, classes: int | None = None,
                 load: str | None = None, load_arpa: str | None = None,
                 memory_gb: float | None = None, clustering: str | None = None) -> ObtainedNgram:
    """Build `kind` on the corpus's train split, or load a saved model (`load`) or an ARPA file.
    `memory_gb` (kn, interpolated): count and estimate out of core within about that much memory (the same model).
    `clustering` (class): "exchange", or "trigram" for the exchange classes refined by trigrams."""
    from nnlm.ngram.arpa import read_arpa
    from nnlm.ngram.build import build_ngram, load_ngram

    if load and load_arpa:
        raise NnlmError("give --load or --load-arpa, not both")
    if classes is not None and (kind != "class" or load or load_arpa):
        raise NnlmError("--classes applies only when building --kind class")
    if clustering is not None and (kind != "class" or load or load_arpa):
        raise NnlmError("--clustering applies only when building --kind class")
    if memory_gb is not None and (kind not in OUT_OF_CORE or load or load_arpa):
        raise NnlmError(f"--memory applies only when building --kind {' or '.join(OUT_OF_CORE)}")
    started = time.perf_counter()
    if not (load or load_arpa):
        options = {k: v for k, v in (("classes", classes), ("memory_gb", memory_gb), ("clustering", clustering))
                   if v is not None}
        model = build_ngram(kind, corpus, order, **options)
        return ObtainedNgram(model, kind, "built", time.perf_counter() - started)
    model = load_ngram(load) if load else read_arpa(load_arpa, corpus.vocab)
    if order is not None and order != model.order:
        raise NnlmError(f"the loaded model has order {model.order}, not --order {order}")
    return ObtainedNgram(model, model.kind_name() if load else "arpa", "loaded", time.perf_counter() - started)


def write_outputs(obtained: ObtainedNgram, save: str | None = None, arpa: str | None = None,
                  corpus: dict[str, Any] | None = None) -> None:
    """Save the model (recording `corpus`, its corpus options) and/or write it as an ARPA file."""
    from nnlm.ngram.backoff import BackoffModel
    from nnlm.ngram.build import save_ngram

    if save:
        save_ngram(obtained.model, save, corpus)
    if arpa:
        from nnlm.ngram.arpa import write_arpa

        if not isinstance(obtained.model, BackoffModel):
            raise NnlmError(f"only back-off models (kind kn, or an ARPA file) can be written as ARPA, "
                            f"not {obtained.kind}")
        write_arpa(obtained.model, arpa)


def evaluate_ngram(obtained: ObtainedNgram, corpus: Corpus) -> NgramEvaluation:
    """Perplexity on every split, with what the build reports about itself."""
    from nnlm.ngram.backoff import BackoffModel

    model = obtained.model
    ppl = {s: perplexity(model, corpus, s) for s in SPLITS if len(corpus.split(s))}  # (--no-heldout: train only)
    details = model.details() if isinstance(model, ReportsBuild) else None
    fallback = model.params.get("fallback_orders") if isinstance(model, BackoffModel) else None
    return NgramEvaluation(corpus.name, obtained.kind, model.order, len(corpus.vocab), ppl, obtained.seconds,
                           details, list(fallback) if fallback else None)
