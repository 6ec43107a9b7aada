"""`nnlm prune`: relative-entropy pruning of a back-off model (Stolcke 1998; SRILM's -prune)."""
from __future__ import annotations

import argparse

from nnlm.cli import arg_types as T
from nnlm.cli.common import add_json_option, emit
from nnlm.errors import NnlmError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prune", help="prune a back-off n-gram model by relative entropy (as SRILM's ngram -prune)")
    p.add_argument("model", help="a saved back-off model (an n-gram directory of kind kn or backoff) or an ARPA file")
    p.add_argument("--threshold", type=T.positive_float, required=True, metavar="T",
                   help="remove an n-gram when the training-set perplexity grows by less than this fraction without "
                        "it (SRILM's semantics; typical values 1e-9 .. 1e-6; Brown KN5: docs/pruning.md)")
    p.add_argument("--history-lm", metavar="MODEL",
                   help="take the probability of each n-gram's history from this back-off model (same words), as "
                        "SRILM's -prune-history-lm (default: the pruned model's own probabilities)")
    p.add_argument("--save", metavar="DIR", help="save the pruned model to DIR (default: not saved)")
    p.add_argument("--arpa", metavar="FILE", help="write the pruned model as an ARPA file (default: not written)")
    p.add_argument("--force", action="store_true",
                   help="--arpa: replace an existing file nnlm did not write (default: refused); never an input")
    add_json_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nnlm.data.provenance import recorded_corpus
    from nnlm.loading import load
    from nnlm.ngram.arpa import read_arpa, write_arpa
    from nnlm.ngram.build import save_ngram
    from nnlm.ngram.prune import prune_model
    from nnlm.ngram.store import save_target
    from nnlm.output_guard import guard_outputs

    if not (args.save or args.arpa):
        raise NnlmError("nowhere to put the pruned model: give --save DIR and/or --arpa FILE")
    if args.save:
        save_target(Path(args.save))
    guard_outputs(files=[("--arpa", args.arpa)], directories=[("--save", args.save)],
                  inputs=[args.model, args.history_lm], force=args.force)
    model = load(args.model)
    history = load(args.history_lm) if args.history_lm else None
    if history is not None and history.vocab.fingerprint != model.vocab.fingerprint and Path(args.history_lm).is_file():
        history = read_arpa(args.history_lm, model.vocab)  # an ARPA file's words, in the pruned model's order
    pruned = prune_model(model, args.threshold, history)
    if args.save:
        save_ngram(pruned.model, args.save, recorded_corpus(args.model))
    if args.arpa:
        write_arpa(pruned.model, args.arpa)
    before, after = sum(pruned.before), sum(pruned.after)
    result = {"model": args.model, "threshold": args.threshold, "history_lm": args.history_lm,
              "ngrams_before": pruned.before, "ngrams_after": pruned.after, "kept_fraction": after / before,
              "seconds": pruned.seconds, "save": args.save, "arpa": args.arpa}
    lines = [f"pruned {args.model} at threshold {args.threshold:g} in {pruned.seconds:.2f} s: "
             f"{after:,} of {before:,} n-grams kept ({100 * after / before:.1f}%)",
             "  order      before       after    kept"]
    lines += [f"  {k:5d} {b:11,d} {a:11,d} {100 * a / b:6.1f}%" if b else f"  {k:5d} {b:11,d} {a:11,d}"
              for k, (b, a) in enumerate(zip(pruned.before, pruned.after, strict=True), start=1)]
    lines += [f"  saved to {args.save}"] * bool(args.save) + [f"  ARPA written to {args.arpa}"] * bool(args.arpa)
    emit(args, result, lines)
    return 0
