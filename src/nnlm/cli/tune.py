"""`nnlm tune`: search lr / weight decay / dropout on validation within a time budget.

The options are defined here as they always were; the typed run configuration will generate them."""
from __future__ import annotations

import argparse

from nnlm import cli_types as T
from nnlm.cli.common import THREADS_HELP, add_corpus_options, corpus_path, emit


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search lr / weight decay / dropout on validation within a time budget")
    add_corpus_options(p)
    p.add_argument("--out", required=True, help="directory of the search: tune.json and one run per trial")
    p.add_argument("--minutes", type=T.minutes, required=True,
                   help="total training time: equal parts for the rounds of successive halving")
    p.add_argument("--trials", type=T.int_range(1, 1000), default=6,
                   help="trials in the first round: the default recipe, plain Adam, then a grid; each later round "
                        "continues the better half (6)")
    for flag, kind, text in (("--preset", str, "mlp1 ... mlp10"), ("--order", T.int_range(2, 64), "n"),
                             ("--hidden", T.int_range(0, 100_000), "h"), ("--features", T.int_range(1, 100_000), "m"),
                             ("--batch-size", T.int_range(1, 1 << 24), "examples per update"),
                             ("--seed", T.seed, "random seed (also orders the grid)"),
                             ("--epochs", T.int_range(1, 1_000_000), "epochs per trial at most (default 30)"),
                             ("--threads", T.threads, THREADS_HELP),
                             ("--samples", T.positive_int, "K for --loss sampled/nce")):
        p.add_argument(flag, type=kind, help=text)
    p.add_argument("--direct", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--loss", choices=("full", "sampled", "nce"))
    p.add_argument("--json", action="store_true", help="print tune.json")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.data.provenance import default_min_count
    from nnlm.io import guard_outputs
    from nnlm.neural.tune import report, tune

    guard_outputs(directories=[("--out", args.out)], inputs=[corpus_path(args.corpus)])
    names = ("corpus", "min_count", "max_vocab", "vocab_from", "preset", "order", "hidden", "features", "direct",
             "loss", "samples", "batch_size", "seed", "epochs", "threads")
    requested = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if args.corpus != "brown" and args.min_count is None:
        requested["min_count"] = default_min_count(args.corpus)
    record = tune(args.out, requested, args.minutes, args.trials)
    emit(args, record, report(record))
    return 0
