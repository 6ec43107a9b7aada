"""`nnlm tune`: search lr / weight decay / dropout on validation within a time budget.

The run's options are the training options' own declarations (nnlm.neural.run.config), the ones a search
does not choose itself: the same types, limits and help as `nnlm train`'s."""
from __future__ import annotations

import argparse

from nnlm.cli import arg_types as T
from nnlm.cli.common import add_corpus_options, corpus_path, emit
from nnlm.neural.run.config import add_train_options

TUNED_RUN_OPTIONS = ("preset", "order", "hidden", "features", "direct", "loss", "samples", "batch_size", "seed",
                     "epochs", "threads")  # what `nnlm tune` passes on to each trial's run


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search lr / weight decay / dropout on validation within a time budget")
    add_corpus_options(p)
    p.add_argument("--out", required=True, help="directory of the search: tune.json and one run per trial")
    p.add_argument("--minutes", type=T.minutes, required=True,
                   help="total training time: equal parts for the rounds of successive halving")
    p.add_argument("--trials", type=T.int_range(1, 1000), default=6,
                   help="trials in the first round: the default recipe, plain Adam, then a grid; each later round "
                        "continues the better half (6)")
    add_train_options(p, only=TUNED_RUN_OPTIONS)
    p.add_argument("--json", action="store_true", help="print tune.json")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.neural.run.config import TrainRequest
    from nnlm.neural.run.tune import report, tune
    from nnlm.output_guard import guard_outputs

    guard_outputs(directories=[("--out", args.out)], inputs=[corpus_path(args.corpus)])
    names = ("corpus", "min_count", "max_vocab", "vocab_from", *TUNED_RUN_OPTIONS)
    request = TrainRequest.of({k: getattr(args, k) for k in names if getattr(args, k, None) is not None})
    record = tune(args.out, request, args.minutes, args.trials)
    emit(args, record, report(record))
    return 0
