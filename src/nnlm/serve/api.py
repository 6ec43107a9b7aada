"""The JSON API of `nnlm serve`, free of HTTP: request object in, response object out. Requests are checked
here and refused with NnlmError (the server answers 400 with its message); text becomes tokens by THE rule
(`nnlm.data.tokenize`), and every text field (`text`, `history`, `prompt`) is held to the same MAX_TOKENS.

Two kinds of endpoint. BATCHED ones (score, next) are generators: they yield each `ModelCall` they need
and are sent its result, so the server can run them on its event loop while their rows wait in the
model's batcher with every other client's (`run_batched` drives one on a thread instead). DIRECT ones
(generate, neighbors, map) are plain functions of (models, request, Cancel), run on a worker thread."""
from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.capabilities import HasWordFeatures
from nnlm.data.tokenize import prompt_tokens, tokens_to_score
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, start_id, text_contexts
from nnlm.serve.batcher import Batcher, Cancel, InlineBatcher, batcher_for
from nnlm.use import next_context, sample, top_words

MAX_TOKENS = 20_000          # tokens of any text field (scored text, history, prompt) per request
MAX_ALTERNATIVES_AT = 256    # positions given top alternatives per request (each costs a |V| distribution)
MAX_K = 100
MAX_GENERATE = 500


@dataclass
class Served:
    """A model the server answers for, with its batcher."""

    name: str
    model: LanguageModel
    batcher: Batcher | InlineBatcher
    timeout: float

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.model.kind_name(), "order": self.model.order,
                "vocabulary": len(self.model.vocab), "features": isinstance(self.model, HasWordFeatures)}


def load_models(paths: list[str]) -> dict[str, LanguageModel]:
    """Load each model; its name is the path's last part (made unique with -2, -3, ...)."""
    from nnlm.loading import load

    out: dict[str, LanguageModel] = {}
    for path in paths:
        base = Path(path).name or path
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}-{n}"
        out[name] = load(path)
    return out


def serve_loaded(models: dict[str, LanguageModel], timeout: float) -> dict[str, Served]:
    """The loaded models, each with its batcher (a thread: made in the process that serves)."""
    return {name: Served(name, model, batcher_for(model), timeout) for name, model in models.items()}


def served_models(paths: list[str], timeout: float) -> dict[str, Served]:
    return serve_loaded(load_models(paths), timeout)


@dataclass
class ModelCall:
    """Work a batched endpoint needs from a model: log_prob of `targets` after `contexts`, or (targets None)
    the distributions after `contexts`."""

    served: Served
    contexts: np.ndarray
    targets: np.ndarray | None = None


Batched = Generator[ModelCall, np.ndarray, dict[str, Any]]


def run_batched(answer: Batched, cancel: Cancel) -> dict[str, Any]:
    """Drive a batched endpoint on this thread, waiting for each model call (the server does the same on its
    event loop without blocking)."""
    try:
        call = next(answer)
        while True:
            future = call.served.batcher.submit(call.contexts, call.targets, cancel)
            result = call.served.batcher.wait(future, call.served.timeout)
            cancel.check()  # the client left while the model worked: its answer is not built
            call = answer.send(result)
    except StopIteration as done:
        return done.value


def _field(request: dict[str, Any], key: str, kind: type, default: Any = None, low: float | None = None,
           high: float | None = None) -> Any:
    value = request.get(key, default)
    if value is None:
        raise NnlmError(f"missing field {key!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise NnlmError(f"field {key!r} must be a {kind.__name__}")
    if low is not None and not (low <= value <= (high if high is not None else value)):
        raise NnlmError(f"field {key!r} must be between {low} and {high}, got {value}")
    return value


def _model(models: dict[str, Served], request: dict[str, Any]) -> Served:
    name = request.get("model", next(iter(models)))
    if not isinstance(name, str):
        raise NnlmError("field 'model' must be a str (a served model's name)")
    if name not in models:
        raise NnlmError(f"no model {name!r} (served: {', '.join(models)})")
    return models[name]


def _limited(tokens: list[str], key: str) -> list[str]:
    if len(tokens) > MAX_TOKENS:
        raise NnlmError(f"field {key!r} has {len(tokens)} tokens, more than the {MAX_TOKENS} a request may have")
    return tokens


def _top(dist: np.ndarray, model: LanguageModel, k: int) -> list[list[list[Any]]]:
    """The k most probable words of each row, most probable first, as [word, probability] (nnlm.use.top_words)."""
    return [[list(pair) for pair in row] for row in top_words(model, dist, k)]


def known(model: LanguageModel, tokens: list[str], ids: np.ndarray) -> list[bool]:
    """Whether each token is in the vocabulary: every id but `<unk>`'s, and `<unk>` itself where it was typed."""
    found = ids != model.vocab.unk_id
    for i in np.flatnonzero(~found):  # the unknown words only (few)
        found[i] = tokens[i] in model.vocab
    return found.tolist()


def score(models: dict[str, Served], request: dict[str, Any]) -> Batched:
    """`text` scored as one stream: the total, and each token's log10 probability (and, with `top` > 0, the
    `top` most probable words at each position)."""
    served = _model(models, request)
    model = served.model
    tokens = _limited(tokens_to_score(_field(request, "text", str)), "text")
    k = _field(request, "top", int, 0, 0, MAX_K)
    if k and len(tokens) > MAX_ALTERNATIVES_AT:
        raise NnlmError(f"alternatives ('top') are given for at most {MAX_ALTERNATIVES_AT} tokens")
    ids = np.asarray(model.vocab.encode(tokens), dtype=np.int64)
    ctx = text_contexts(ids, model.context_size, start_id(model))
    log10 = (yield ModelCall(served, ctx, ids)) * LOG10_E
    words = [{"word": t, "log10": p, "known": k} for t, p, k in zip(tokens, log10.tolist(), known(model, tokens, ids),
                                                                    strict=True)]
    if k:
        for word, alternatives in zip(words, _top((yield ModelCall(served, ctx)), model, k), strict=True):
            word["top"] = alternatives
    total = float(log10.sum())
    return {"model": served.name, "log10_prob": total, "tokens": len(tokens),
            "perplexity": float(10 ** (-total / len(tokens))), "words": words}


def next_words(models: dict[str, Served], request: dict[str, Any]) -> Batched:
    """The `k` most probable next tokens after `history` (text; empty: the start of a text)."""
    served = _model(models, request)
    model = served.model
    history = _limited(prompt_tokens(_field(request, "history", str, "")), "history")
    k = _field(request, "k", int, 10, 1, min(MAX_K, len(model.vocab)))
    dist = yield ModelCall(served, next_context(model, history)[None, :])
    return {"model": served.name, "history": history,
            "next": [{"word": w, "p": p} for w, p in _top(dist, model, k)[0]]}


def generated(models: dict[str, Served], request: dict[str, Any], cancel: Cancel) -> dict[str, Any]:
    """`tokens` tokens sampled after `prompt`, reproducible from `seed` (as nnlm.use.generate; drawn one
    model call at a time, so a client that leaves stops the drawing at the next token)."""
    served = _model(models, request)
    model = served.model
    top_k = request.get("top_k")
    drawn = sample(model, _limited(prompt_tokens(_field(request, "prompt", str, "")), "prompt"),
                   _field(request, "tokens", int, 30, 1, MAX_GENERATE),
                   _field(request, "temperature", float, 1.0, 1e-3, 100.0),
                   None if top_k is None else _field(request, "top_k", int, None, 1, len(model.vocab)),
                   _field(request, "seed", int, 0, 0, 2**32 - 1))
    words = []
    for word in drawn:
        cancel.check()
        words.append(word)
    return {"model": served.name, "tokens": words}


def neighbors(models: dict[str, Served], request: dict[str, Any], cancel: Cancel) -> dict[str, Any]:
    """Nearest words to `word` in a neural model's feature space (as `nnlm neighbors`)."""
    from nnlm.neural.net.features import neighbors as nearest

    served = _model(models, request)
    ranked = nearest(served.model, _field(request, "word", str), _field(request, "k", int, 10, 1, MAX_K))
    return {"model": served.name, "neighbors": [{"word": w, "cosine": c} for w, c in ranked]}


def feature_map(models: dict[str, Served], request: dict[str, Any], cancel: Cancel) -> dict[str, Any]:
    """The 2-D PCA map of the `top` most frequent words' feature vectors (as `nnlm map`)."""
    from nnlm.neural.net.features import SPECIALS, most_frequent_words, pca_2d, word_features

    served = _model(models, request)
    model = served.model
    features = word_features(model)
    available = sum(1 for t in model.vocab.tokens if t not in SPECIALS)
    words = most_frequent_words(model.vocab, min(_field(request, "top", int, 100, 2, 1000), available))
    xy = pca_2d(features[[model.vocab.id(w) for w in words]])
    return {"model": served.name, "words": words, "x": xy[:, 0].tolist(), "y": xy[:, 1].tolist()}


BATCHED: dict[str, Callable[[dict[str, Served], dict[str, Any]], Batched]] = {
    "/api/score": score, "/api/next": next_words}
DIRECT: dict[str, Callable[[dict[str, Served], dict[str, Any], Cancel], dict[str, Any]]] = {
    "/api/generate": generated, "/api/neighbors": neighbors, "/api/map": feature_map}
ENDPOINTS = [*BATCHED, *DIRECT]
