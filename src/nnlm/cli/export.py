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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.io import check_output
    from nnlm.loading import load
    from nnlm.neural.features import word_features, write_embeddings
    from nnlm.ngram.arpa import write_arpa
    from nnlm.ngram.backoff import BackoffModel

    if not (args.embeddings or args.arpa):
        raise NnlmError("nothing to export: give --embeddings FILE and/or --arpa FILE")
    for target in (args.embeddings, args.arpa):
        if target:
            check_output(target)
    model = load(args.model)
    if args.embeddings:
        word_features(model)  # refuse a model without features before writing anything
    if args.arpa and not isinstance(model, BackoffModel):
        raise NnlmError(f"only back-off n-gram models (kn, or a loaded ARPA file) can be written as ARPA, "
                        f"not {model.kind_name()}")
    if args.embeddings:
        count = write_embeddings(model, args.embeddings)
        emit(args, {"embeddings": args.embeddings, "words": count},
             [f"{count} word vectors written to {args.embeddings} (word2vec text format)"])
    if args.arpa:
        write_arpa(model, args.arpa)
        emit(args, {"arpa": args.arpa, "order": model.order},
             [f"order-{model.order} ARPA model written to {args.arpa}"])
    return 0
