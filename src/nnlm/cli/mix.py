"""`nnlm mix`: mix saved models and n-gram specs with fixed or EM weights, print perplexities, and save the mixture
as one model (--save DIR) or merge back-off parts into one ARPA file (--arpa FILE)."""
from __future__ import annotations

import argparse
from pathlib import Path

from nnlm.cli import arg_types as T
from nnlm.cli.common import (
    THREADS_HELP,
    add_corpus_options,
    add_json_option,
    corpus_and_options,
    corpus_path,
    emit,
    govern_threads,
)
from nnlm.errors import NnlmError

MERGEABLE_KINDS = ("kn", "backoff")  # saved kinds (and the spec kind kn) that are back-off models


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mix", help="mix models (fixed weights, or EM on validation), print perplexities, save the "
                                   "mixture or merge back-off models into one ARPA file")
    p.add_argument("models", nargs="+", help="saved models or specs like kn:5, interpolated:3 (specs are built on "
                                             "the corpus)")
    p.add_argument("--weights", default="em",
                   help="comma-separated fixed weights (e.g. 0.5,0.5), em, or em-buckets (default em)")
    p.add_argument("--save", metavar="DIR", help="write the mixture (its parts, weights and buckets) as one model "
                                                 "that nnlm.load, score, serve, rescore and decode read "
                                                 "(default: not saved)")
    p.add_argument("--arpa", metavar="FILE",
                   help="back-off parts only (kn, ARPA files): merge them into one back-off ARPA file with the "
                        "mixture's weights, like SRILM's ngram -mix-lm (default: not written)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --arpa file nnlm did not write (default: refused); never an input")
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


def _first_saved(args: argparse.Namespace) -> str | None:
    saved = [m for m in args.models if Path(m).exists()]
    return saved[0] if saved else None


def _refuse_unmergeable(models: list[str], mode: str) -> None:
    """--arpa: refuse, before anything is loaded or built, a part that is no back-off model and per-bucket weights."""
    import json

    from nnlm.io import JSON_LIMIT, read_input
    from nnlm.loading import is_arpa, is_ngram_dir

    if mode == "em-buckets":
        raise NnlmError("--arpa needs one weight per model: per-bucket weights (em-buckets) have no static back-off "
                        "form; use --weights em or fixed weights")
    for spec in models:
        path = Path(spec)
        if path.exists():
            kind = None
            if is_arpa(path):
                continue
            if is_ngram_dir(path):
                try:
                    kind = json.loads(read_input(path / "config.json", "config", JSON_LIMIT)).get("kind")
                except (NnlmError, ValueError, AttributeError):
                    kind = None
            if kind in MERGEABLE_KINDS:
                continue
            what = f"a {kind} model" if kind else "not a back-off n-gram model (a neural run or a mixture?)"
        else:
            kind = spec.partition(":")[0]
            if kind == "kn":
                continue
            what = f"a {kind} spec"
        raise NnlmError(f"--arpa merges back-off n-gram models only (kn, ARPA files); {spec} is {what}: mix it "
                        "dynamically with --save instead")


def run(args: argparse.Namespace) -> int:
    from nnlm.loading import load_or_build
    from nnlm.output_guard import guard_outputs

    mode, fixed = _weights(args.weights)
    guard_outputs(files=[("--arpa", args.arpa)], directories=[("--save", args.save)],
                  inputs=[*args.models, corpus_path(args.corpus, _first_saved(args))], force=args.force)
    if args.arpa:
        _refuse_unmergeable(args.models, mode)
    corpus, options = corpus_and_options(args, _first_saved(args))
    components = [load_or_build(spec, corpus) for spec in args.models]
    govern_threads(args)
    same_vocab = all(c.vocab.fingerprint == corpus.vocab.fingerprint for c in components)
    if args.arpa and not same_vocab and mode == "fixed":
        result, lines = _merge_only(args, components, fixed)
    else:
        result, lines = _mix(args, corpus, options, components, mode, fixed)
    emit(args, result, lines)
    return 0


def _mix(args, corpus, options, components, mode, fixed) -> tuple[dict, list[str]]:
    """Weights fitted (or given) on the corpus, perplexities, then --save and --arpa."""
    from nnlm.mixture import mix_on_corpus

    fitted = mix_on_corpus(components, corpus, mode, fixed)
    ppl = fitted.perplexity
    weights = fitted.model.weights
    result = {"corpus": corpus.name, "models": args.models, "mode": mode, "weights": weights.tolist(),
              "perplexity": ppl, "em_log_likelihood": fitted.em.log_likelihood if fitted.em else None}
    shown = weights[0] if len(weights) == 1 else weights.mean(axis=0)
    lines = [f"mixture of {', '.join(args.models)} ({mode}) on {corpus.name}",
             "  weights " + ", ".join(f"{w:.3f}" for w in shown) + (" (mean over buckets)" if len(weights) > 1 else ""),
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    merged = _merged(components, weights) if args.arpa else None  # before anything is written
    if args.save:
        from nnlm.mixture_store import save_mixture

        sources = [spec if Path(spec).exists() else None for spec in args.models]
        save_mixture(fitted.model, args.save, sources, options)
        result["saved"] = args.save
        lines.append(f"  mixture saved to {args.save}")
    if merged is not None:
        from nnlm.lm import perplexity

        _write(merged, args.arpa)
        merged_ppl = {s: perplexity(merged, corpus, s) for s in ppl}
        result |= {"arpa": args.arpa, "arpa_perplexity": merged_ppl, "arpa_ngrams": merged.tables.sizes()}
        lines.append(f"  merged back-off model ({sum(merged.tables.sizes()):,} n-grams) written to {args.arpa}: "
                     + "  ".join(f"{s} {p:,.2f}" for s, p in merged_ppl.items()))
    return result, lines


def _merge_only(args, components, fixed) -> tuple[dict, list[str]]:
    """Parts over different vocabularies, fixed weights: merged over the union of their words (no corpus scoring:
    the parts cannot all score one corpus)."""
    if args.save:
        raise NnlmError("--save needs parts over one vocabulary (the corpus's); these differ: --arpa alone merges "
                        "them over the union of their words")
    merged = _merged(components, fixed)
    _write(merged, args.arpa)
    result = {"models": args.models, "mode": "fixed", "weights": [fixed], "arpa": args.arpa,
              "arpa_vocabulary": len(merged.vocab), "arpa_ngrams": merged.tables.sizes()}
    lines = [f"merged {', '.join(args.models)} (weights {', '.join(f'{w:.3f}' for w in fixed)}) over the union of "
             f"their vocabularies ({len(merged.vocab):,} words, {sum(merged.tables.sizes()):,} n-grams) into "
             f"{args.arpa}"]
    return result, lines


def _merged(components, weights):
    from nnlm.ngram.backoff_mix import merge_backoff

    return merge_backoff(components, weights)


def _write(model, path: str) -> None:
    from nnlm.ngram.arpa import write_arpa

    write_arpa(model, path)
