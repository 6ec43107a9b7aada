"""Command-line interface: argument parsing and dispatch only; each subcommand calls library code."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

from nnlm.errors import NnlmError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line (exit 2) instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_corpus_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("corpus")
    g.add_argument("--corpus", default="brown",
                   help="'brown' (the bengio2003 protocol) or a directory with train.txt, valid.txt, test.txt")
    g.add_argument("--min-count", type=int, default=None,
                   help="text directories: tokens seen fewer times become <unk> (default 1)")
    g.add_argument("--max-vocab", type=int, default=None, help="text directories: keep at most this many tokens")
    g.add_argument("--vocab-from", choices=("train", "all"), default="train",
                   help="text directories: count the vocabulary on train (default) or on all splits")
    g.add_argument("--no-cache", action="store_true", help="rebuild the corpus instead of using the cache")


def _load_corpus(args: argparse.Namespace):
    from nnlm.data.corpus import load_corpus

    return load_corpus(args.corpus, min_count=args.min_count, max_vocab=args.max_vocab,
                       vocab_from=args.vocab_from, use_cache=not args.no_cache)


def _emit(args: argparse.Namespace, result: dict, lines: list[str]) -> None:
    print(json.dumps(result) if args.json else "\n".join(lines))


def cmd_stats(args: argparse.Namespace) -> int:
    corpus = _load_corpus(args)
    s = corpus.stats()
    lines = [f"corpus {s['corpus']}: |V| = {s['vocab']:,}, {s['tokens']:,} tokens, {s['unk']:,} <unk>"]
    for name, v in s["splits"].items():
        lines.append(f"  {name:<5} {v['tokens']:>10,} tokens {v['unk']:>8,} <unk> ({v['unk'] / v['tokens']:.2%})")
    _emit(args, s, lines)
    return 0


def _ngram_model(args: argparse.Namespace, corpus):
    """The model to evaluate: built from train, or loaded (--load DIR, --load-arpa FILE)."""
    from nnlm.ngram.arpa import read_arpa
    from nnlm.ngram.build import build_ngram, load_ngram

    if args.load and args.load_arpa:
        raise NnlmError("give --load or --load-arpa, not both")
    if not (args.load or args.load_arpa):
        return build_ngram(args.kind, corpus, args.order, **_kind_options(args)), args.kind
    if args.classes is not None:
        raise NnlmError("--classes applies only when building --kind class")
    model = load_ngram(args.load) if args.load else read_arpa(args.load_arpa, corpus.vocab)
    if args.order is not None and args.order != model.order:
        raise NnlmError(f"the loaded model has order {model.order}, not --order {args.order}")
    return model, None if args.load else "arpa"


def _kind_options(args: argparse.Namespace) -> dict:
    """Options that only some kinds take (--classes: class)."""
    if args.classes is None:
        return {}
    if args.kind != "class":
        raise NnlmError("--classes applies only when building --kind class")
    return {"classes": args.classes}


def cmd_ngram(args: argparse.Namespace) -> int:
    from nnlm.lm import perplexity
    from nnlm.ngram.build import save_ngram

    corpus = _load_corpus(args)
    t0 = time.perf_counter()
    model, kind = _ngram_model(args, corpus)
    kind = kind or getattr(model, "kind", type(model).__name__)
    build_seconds = time.perf_counter() - t0
    if args.save:
        save_ngram(model, args.save)
    if args.arpa:
        from nnlm.ngram.arpa import write_arpa
        from nnlm.ngram.backoff import BackoffModel

        if not isinstance(model, BackoffModel):
            raise NnlmError(f"only back-off models (kind kn, or an ARPA file) can be written as ARPA, not {kind}")
        write_arpa(model, args.arpa)
    ppl = {s: perplexity(model, corpus, s) for s in ("train", "valid", "test")}
    action = "loaded" if args.load or args.load_arpa else "built"
    result = {"corpus": corpus.name, "kind": kind, "order": model.order, "vocab": len(corpus.vocab),
              "perplexity": ppl, "build_seconds": build_seconds}
    lines = [f"{kind} (order {model.order}) on {corpus.name}, |V| = {len(corpus.vocab):,}; "
             f"{action} in {build_seconds:.2f} s",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    if hasattr(model, "details"):  # what the build did, e.g. EM steps or clustering time
        result["details"], text = model.details()
        lines.append("  " + text)
    _emit(args, result, lines)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nnlm", description="Neural and n-gram language models (Bengio et al. 2003).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("stats", help="split sizes, vocabulary size, <unk> counts")
    _add_corpus_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("ngram", help="build a count-based model and print its perplexities")
    _add_corpus_options(p)
    p.add_argument("--kind", default="addone",
                   help="uniform, addone, kn (modified Kneser-Ney), interpolated (deleted-interpolation trigram), "
                        "class (class-based back-off)")
    p.add_argument("--classes", type=int, default=None, metavar="C",
                   help="--kind class: number of word classes (default 500)")
    p.add_argument("--order", type=int, default=None, help="n-gram order (default: the kind's own)")
    p.add_argument("--save", metavar="DIR", help="save the model to DIR (loads again without retraining)")
    p.add_argument("--arpa", metavar="FILE", help="also write the model as an ARPA file (back-off models: kn)")
    p.add_argument("--load", metavar="DIR", help="evaluate a model saved with --save instead of building one")
    p.add_argument("--load-arpa", metavar="FILE", help="evaluate an ARPA file on the corpus (its words must be the corpus vocabulary)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_ngram)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except NnlmError as exc:
        print(f"nnlm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nnlm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
