"""`nnlm reproduce`: Table 1 (or 2) of the paper (n-gram rows, MLPs, mixtures) and its report."""
from __future__ import annotations

import argparse
import shlex
import sys

from nnlm.cli import arg_types as T
from nnlm.cli.common import TEXT_DIR_MIN_COUNT_HELP, THREADS_HELP, emit


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="Table 1 of the paper on Brown: n-gram rows, MLPs, mixtures, report")
    p.add_argument("--corpus", default="brown",
                   help="'brown' (default), a text directory, a text file (.gz, .xz, .bz2 too) or - for standard input")
    p.add_argument("--min-count", type=T.positive_int, default=None, help=TEXT_DIR_MIN_COUNT_HELP)
    p.add_argument("--max-vocab", type=T.count, default=None,
                   help="text directories: keep at most this many tokens, for every row (default: no limit; the "
                        "paper's AP News vocabulary was 17,964 words)")
    p.add_argument("--heldout", type=T.positive_int, default=None, metavar="TOKENS",
                   help="a text file or stdin: test is the fewest last lines holding at least TOKENS tokens, valid "
                        "the fewest lines before them holding as many, train the rest, for every row (default: 5%% "
                        "of the tokens each, at most 1,000,000; the nets are scored on valid and test exactly, so "
                        "large parts cost budget)")
    p.add_argument("--table", default="brown", choices=("brown", "apnews"),
                   help="the paper's table: brown (Table 1, default) or apnews (Table 2: deleted interpolation, "
                        "Kneser-Ney 3/4/5, the n = 6, h = 60, m = 100 net alone and mixed; give --corpus a text "
                        "directory of AP News' size)")
    p.add_argument("--out", required=True, help="report directory (README.md, plots, results.json, runs/)")
    p.add_argument("--budget-minutes", type=T.minutes, default=None,
                   help="wall-clock budget for the whole call (default 30); rows it shortens are marked")
    p.add_argument("--models", default=None, help="nets to train, e.g. mlp1,mlp3 (default mlp1,mlp3; --full: all)")
    p.add_argument("--full", action="store_true",
                   help="all five nets, each trained until early stopping (default: mlp1, mlp3 within the budget)")
    p.add_argument("--loss", default="sampled", choices=("sampled", "nce", "full"),
                   help="the nets' output layer in training (default sampled: faster, and lower perplexity on Brown "
                        "than the full softmax; scoring is always exact)")
    p.add_argument("--samples", type=T.positive_int, default=None, help="K for --loss sampled / nce (default 128)")
    p.add_argument("--hogwild", type=T.procs, default=None, metavar="WORKERS",
                   help="train each net with this many asynchronous Hogwild workers, one thread each (about "
                        "WORKERS x a one-thread process on as many cores, less against torch's default "
                        "threads; runs are no longer reproducible bit for bit) (default: one process)")
    p.add_argument("--threads", type=T.threads, default=None, help=THREADS_HELP)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where to train and score (default auto: CUDA when present)")
    p.add_argument("--beyond", action="store_true",
                   help="after Table 1, the 'Beyond the paper' section: more seeds, ensembles, mixtures with KN5, the "
                        "class model and the trigram (default: off)")
    p.add_argument("--beyond-minutes", type=T.minutes, default=None,
                   help="wall-clock budget of the --beyond section, apart from Table 1's (default 60; --full: none)")
    p.add_argument("--beyond-reference", default="beside", choices=("beside", "first", "last", "none"),
                   help="the --beyond section's LSTM reference (PyTorch's word_language_model recipe, not an nnlm net, "
                        "shown beside its nets): beside them in a process of its own for the section's budget "
                        "(default; the nets on one thread), planned last among them (what they leave), first (its "
                        "6 epochs before them, if the budget holds them), or none")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, a plain line a minute in a log)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite OUT/README.md and its plots from OUT/results.json; build and train nothing "
                        "(default: off)")
    p.set_defaults(handler=run, argv=None)


def run(args: argparse.Namespace) -> int:
    from nnlm.output_guard import guard_outputs
    from nnlm.reproduce import ReproduceRequest, report_only, reproduce

    guard_outputs(directories=[("--out", args.out)], inputs=[None if args.corpus == "brown" else args.corpus])

    if args.report_only:
        written = report_only(args.out)
        emit(args, {"report": str(written)}, [f"report written to {written}"])
        return 0
    from nnlm.neural.run.stop_signals import StoppedBySignal

    command = "nnlm " + " ".join(shlex.quote(a) for a in (args.argv or sys.argv[1:]))
    try:
        report = reproduce(ReproduceRequest(
            args.corpus, args.out, args.budget_minutes, args.models, args.full, command, progress=not args.no_progress,
            threads=args.threads, device=args.device, loss=args.loss, samples=args.samples, hogwild=args.hogwild,
            table=args.table, beyond=args.beyond, beyond_minutes=args.beyond_minutes,
            beyond_reference=args.beyond_reference, min_count=args.min_count,
            max_vocab=args.max_vocab, heldout=args.heldout))
    except StoppedBySignal as exc:  # the net's run saved a checkpoint; finished rows are in results.json
        raise StoppedBySignal(exc.signum, f"stopped by {exc.name}: finished rows and the training run's checkpoint "
                                          f"are saved in {args.out}; the same command continues: {command}") from None
    emit(args, {"report": str(report)}, [f"report written to {report}"])
    return 0
