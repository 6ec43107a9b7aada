"""`nnlm mix`: mix saved models and n-gram specs with fixed or EM weights, print perplexities."""
from __future__ import annotations

import argparse

from nnlm.cli import arg_types as T
from nnlm.cli.common import (
    THREADS_HELP,
    add_corpus_options,
    add_json_option,
    emit,
    govern_threads,
    model_corpus,
)
from nnlm.errors import NnlmError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mix", help="mix models (fixed weights, or EM on validation) and print perplexities")
    p.add_argument("models", nargs="+", help="saved models or specs like kn:5, interpolated:3 (specs are built on "
                                             "the corpus)")
    p.add_argument("--weights", default="em",
                   help="comma-separated fixed weights (e.g. 0.5,0.5), em, or em-buckets (default em)")
    add_corpus_options(p, default=None)
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP + "; neural components only")
    add_json_option(p)
    p.set_defaults(handler=run)


def _weights(text: str) -> tuple[str, list[float] | None]:
    if text in ("em", "em-buckets"):
        return text, None
    try:
        return "fixed", [float(w) for w in text.split(",")]
    except ValueError:
        raise NnlmError(f"--weights must be em, em-buckets or numbers like 0.5,0.5; got {text!r}") from None


def _corpus(args: argparse.Namespace):
    """--corpus if given, else the corpus the first saved model records (a neural run's, a saved n-gram's)."""
    from pathlib import Path

    saved = [m for m in args.models if Path(m).exists()]
    return model_corpus(args, saved[0] if saved else None)


def run(args: argparse.Namespace) -> int:
    from nnlm.loading import load_or_build
    from nnlm.mixture import mix_on_corpus

    corpus = _corpus(args)
    components = [load_or_build(spec, corpus) for spec in args.models]
    govern_threads(args)
    mode, fixed = _weights(args.weights)
    fitted = mix_on_corpus(components, corpus, mode, fixed)
    ppl = fitted.perplexity
    weights = fitted.model.weights
    result = {"corpus": corpus.name, "models": args.models, "mode": mode, "weights": weights.tolist(),
              "perplexity": ppl, "em_log_likelihood": fitted.em.log_likelihood if fitted.em else None}
    shown = weights[0] if len(weights) == 1 else weights.mean(axis=0)
    lines = [f"mixture of {', '.join(args.models)} ({mode}) on {corpus.name}",
             "  weights " + ", ".join(f"{w:.3f}" for w in shown) + (" (mean over buckets)" if len(weights) > 1 else ""),
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    emit(args, result, lines)
    return 0
