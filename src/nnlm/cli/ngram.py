"""`nnlm ngram`: build (or load) a count-based model, save it, print its perplexities."""
from __future__ import annotations

import argparse
from pathlib import Path

from nnlm.cli import arg_types as T
from nnlm.cli.common import add_corpus_options, add_json_option, corpus_and_options, corpus_path, emit, note

KINDS_HELP = ("uniform, addone, kn (modified Kneser-Ney), interpolated (deleted-interpolation trigram), "
              "class (class-based back-off) (default addone)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ngram", help="build a count-based model and print its perplexities")
    add_corpus_options(p, default=None, where="(default: brown; with --load, the corpus the model records)")
    p.add_argument("--kind", default="addone", help=KINDS_HELP)
    p.add_argument("--classes", type=T.positive_int, default=None, metavar="C",
                   help="--kind class: number of word classes (default 500)")
    p.add_argument("--clustering", choices=("exchange", "trigram"), default=None,
                   help="--kind class: exchange (class bigram likelihood) or trigram (those classes refined by the "
                        "class trigram's likelihood) (default exchange)")
    p.add_argument("--order", type=T.ngram_order, default=None, help="n-gram order (default: the kind's own)")
    p.add_argument("--memory", type=T.positive_float, metavar="GB",
                   help="--kind kn or interpolated: count and estimate out of core within about GB of memory "
                        "(sorted chunks on disk, merged, like lmplz -S; tables on disk, memory-mapped); the same model "
                        "(default: in memory)")
    p.add_argument("--save", metavar="DIR",
                   help="save the model to DIR, with the corpus options it was built on (default: not saved)")
    p.add_argument("--arpa", metavar="FILE",
                   help="also write the model as an ARPA file (back-off models: kn) (default: none)")
    p.add_argument("--load", metavar="DIR", help="evaluate a model saved with --save instead of building one "
                                                 "(default: build)")
    p.add_argument("--load-arpa", metavar="FILE",
                   help="evaluate an ARPA file on the corpus (its words must be the corpus vocabulary) "
                        "(default: build)")
    p.add_argument("--force", action="store_true",
                   help="--arpa: replace an existing file nnlm did not write (default: refused); never an input")
    add_json_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.ngram.evaluate import evaluate_ngram, obtain_ngram, write_outputs
    from nnlm.ngram.store import save_target
    from nnlm.output_guard import guard_outputs

    # refused before the (long) build, not after it
    if args.save:
        save_target(Path(args.save))
    guard_outputs(files=[("--arpa", args.arpa)], directories=[("--save", args.save)],
                  inputs=[args.load, args.load_arpa, corpus_path(args.corpus, args.load)], force=args.force)
    corpus, options = corpus_and_options(args, args.load)
    obtained = obtain_ngram(corpus, args.kind, args.order, args.classes, args.load, args.load_arpa,
                            memory_gb=args.memory, clustering=args.clustering)
    write_outputs(obtained, save=args.save, arpa=args.arpa, corpus=options)
    result = evaluate_ngram(obtained, corpus)
    json_result = {"corpus": result.corpus, "kind": result.kind, "order": result.order, "vocab": result.vocab,
                   "perplexity": result.perplexity, "build_seconds": result.build_seconds}
    lines = [f"{result.kind} (order {result.order}) on {result.corpus}, |V| = {result.vocab:,}; "
             f"{obtained.action} in {result.build_seconds:.2f} s",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in result.perplexity.items())]
    if result.details is not None:  # what the build did, e.g. EM steps or clustering time
        json_result["details"], text = result.details
        lines.append("  " + text)
    if result.discount_fallback:  # as KenLM's --discount_fallback: too few distinct counts to estimate
        json_result["discount_fallback"] = result.discount_fallback
        note(f"note: modified Kneser-Ney used the fallback discounts 0.5, 1, 1.5 for order(s) "
             f"{', '.join(map(str, result.discount_fallback))}: too few distinct counts in train to estimate them")
    emit(args, json_result, lines)
    return 0
