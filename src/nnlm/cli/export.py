"""`nnlm export`: a model's word features (word2vec text) or a back-off model (ARPA)."""
from __future__ import annotations

import argparse

from nnlm.cli.common import emit
from nnlm.errors import NnlmError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write word features (word2vec text) or a back-off model (ARPA)")
    p.add_argument("model", help="a saved model (n-gram directory, ARPA file or neural run directory)")
    p.add_argument("--embeddings", metavar="FILE",
                   help="neural models: word feature vectors, word2vec text format (default: not written)")
    p.add_argument("--arpa", metavar="FILE", help="back-off n-gram models: an ARPA file (default: not written)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing file nnlm did not write (default: refused); never an input")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from nnlm.io import atomic_path
    from nnlm.loading import load
    from nnlm.neural.net.features import word_features, write_embeddings
    from nnlm.ngram.arpa import write_arpa
    from nnlm.ngram.backoff import BackoffModel
    from nnlm.output_guard import guard_outputs

    if not (args.embeddings or args.arpa):
        raise NnlmError("nothing to export: give --embeddings FILE and/or --arpa FILE")
    guard_outputs(files=[("--embeddings", args.embeddings), ("--arpa", args.arpa)], inputs=[args.model],
                  force=args.force)
    model = load(args.model)
    if args.embeddings:
        word_features(model)  # refuse a model without features before writing anything
    if args.arpa and not isinstance(model, BackoffModel):
        raise NnlmError(f"only back-off n-gram models (kn, or a loaded ARPA file) can be written as ARPA, "
                        f"not {model.kind_name()}")
    result, lines = {}, []
    with ExitStack() as stack:  # both files are written to temporaries first; either both appear or neither
        if args.embeddings:
            count = write_embeddings(model, stack.enter_context(atomic_path(args.embeddings)))
            result |= {"embeddings": args.embeddings, "words": count}
            lines.append(f"{count} word vectors written to {args.embeddings} (word2vec text format)")
        if args.arpa:
            write_arpa(model, stack.enter_context(atomic_path(args.arpa)))
            result |= {"arpa": args.arpa, "order": model.order}
            lines.append(f"order-{model.order} ARPA model written to {args.arpa}")
    emit(args, result, lines)
    return 0
