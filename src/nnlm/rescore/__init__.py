"""N-best rescoring: language-model scores as new features of n-best lists, combined with the decoder's
scores by weights given or tuned on a dev set, the lists reranked (`nnlm rescore`)."""
from __future__ import annotations

import math

import numpy as np

from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.rescore.formats import DEFAULT_WEIGHTS
from nnlm.rescore.lm_scores import hypothesis_log_probs
from nnlm.rescore.nbest import NBestSet, ranking

LOG_BASES = {"10": 1.0 / math.log(10.0), "e": 1.0}


def add_lm_features(nbest: NBestSet, models: list[LanguageModel], log_base: str = "10") -> list[str]:
    """One column per model (`nnlm0`, `nnlm1`, ...): each hypothesis' log probability in `log_base`, all
    hypotheses of the set scored in one batch. Moses and Kaldi lists also get `nwords` (the hypothesis'
    length, for a word insertion penalty) unless they have it."""
    if log_base not in LOG_BASES:
        raise NnlmError(f"log base must be one of {', '.join(LOG_BASES)}, got {log_base!r}")
    hypotheses = [words for u in nbest.utterances for words in u.hypotheses]
    bounds = np.cumsum([len(u.hypotheses) for u in nbest.utterances])[:-1]
    names = []
    for i, model in enumerate(models):
        scores = hypothesis_log_probs(model, hypotheses) * LOG_BASES[log_base]
        nbest.add_feature(f"nnlm{i}", np.split(scores, bounds))
        names.append(f"nnlm{i}")
    if "nwords" not in nbest.names:
        nbest.add_feature("nwords", [np.array([len(w) for w in u.hypotheses], dtype=np.float64)
                                     for u in nbest.utterances])
    return names


def parse_weights(spec: str | None, nbest: NBestSet, lm_names: list[str]) -> np.ndarray:
    """Weights over the set's columns: the format's default (the decoder's score at 1, Kaldi's cost at -1), each
    added language model at 1, the rest 0; then `name=value,...` from `spec` on top."""
    weights = np.zeros(len(nbest.names))
    for name, value in DEFAULT_WEIGHTS[nbest.format].items():
        weights[nbest.column(name)] = value
    for name in lm_names:
        weights[nbest.column(name)] = 1.0
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, eq, value = item.partition("=")
        try:
            weights[nbest.column(name.strip())] = float(value) if eq else float("nan")
        except ValueError:
            raise NnlmError(f"bad weight {item!r}: expected name=number") from None
        if not math.isfinite(weights[nbest.column(name.strip())]):
            raise NnlmError(f"bad weight {item!r}: expected name=number")
    return weights


def rerank(nbest: NBestSet, weights: np.ndarray) -> list[np.ndarray]:
    """Each utterance's hypothesis indices, best first."""
    return [ranking(u, weights) for u in nbest.utterances]


def file_order(nbest: NBestSet) -> list[np.ndarray]:
    return [np.arange(len(u.hypotheses)) for u in nbest.utterances]


def corpus_wer(nbest: NBestSet, orders: list[np.ndarray], refs: dict[str, list[str]]) -> tuple[int, int]:
    """(word errors of the 1-best of each list, reference words)."""
    from nnlm.rescore.tuning import word_errors

    missing = [u.uid for u in nbest.utterances if u.uid not in refs]
    if missing:
        raise NnlmError(f"no reference for utterance {missing[0]}")
    errors = sum(word_errors(u.hypotheses[o[0]], refs[u.uid]) for u, o in zip(nbest.utterances, orders, strict=True))
    return errors, sum(len(refs[u.uid]) for u in nbest.utterances)
