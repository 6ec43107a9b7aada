"""`nnlm train`: train a neural model into a run directory (one process, or --parallel).

The run and session options come from the typed configuration (nnlm.neural.run.config), which holds each
option's default and help once; this module adds only what belongs to the command (--out, --resume, --parallel)."""
from __future__ import annotations

import argparse
import sys

from nnlm.cli import arg_types as T
from nnlm.cli.common import add_corpus_options, emit
from nnlm.neural.run.config import add_train_options, request_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a neural model (Bengio et al. 2003) into a run directory")
    add_corpus_options(p)
    p.set_defaults(corpus=None)
    p.add_argument("--out", required=True, help="run directory (weights, config, vocabulary, checkpoints, metrics)")
    add_train_options(p)  # every run and session option, from the typed configuration
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out exactly where it stopped (default: off)")
    p.add_argument("--parallel", choices=("none", "hogwild", "ddp", "vocab"),  # = parallel.MODES (tested)
                   help="hogwild: asynchronous shared-memory workers; ddp: synchronous data-parallel; vocab: "
                        "output layer split by words over the processes (under torchrun, or --workers local ones) "
                        "(default: none, one process)")
    p.add_argument("--workers", type=T.procs, help="local processes for --parallel (default 2; torchrun sets its own)")
    p.add_argument("--dist-timeout", type=T.seconds, default=600.0, metavar="SECONDS",
                   help="ddp/vocab: how long a rank waits for the others before stopping with an error (default 600)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, a plain line a minute in a log)")
    p.add_argument("--json", action="store_true", help="print the final state as one JSON object (default: text)")
    p.set_defaults(handler=run, finish=finish)


def run(args: argparse.Namespace) -> int:
    # (the run directory is checked against the corpus by the library, before anything is written)
    # --parallel none (the default) trains in this process, without loading the parallel package;
    # under torchrun it is refused with a hint
    request, progress = request_from_args(args), not args.no_progress
    if (args.parallel or "none") == "none" and args.workers is None:
        from nnlm.neural.run.train import train

        state = train(args.out, request, resume=args.resume, progress=progress)
    else:
        from nnlm.neural.parallel.ranks import train_parallel

        state = train_parallel(args.out, request, args.parallel or "none", args.workers, resume=args.resume,
                               progress=progress, timeout=args.dist_timeout)
    if state is None:  # a torchrun rank other than 0: rank 0 reports
        return 0
    if args.json:
        emit(args, {k: state[k] for k in ("epoch", "step", "best", "finished", "stop_reason", "history")}, [])
    return 0


def finish(code: int) -> None:
    """After the command, whatever its outcome: a torchrun rank ends here, without interpreter finalization.
    (A rank joins its group in nnlm.neural.parallel.ranks: where that module was never loaded, nothing to do.)"""
    ranks = sys.modules.get("nnlm.neural.parallel.ranks")
    if ranks is not None:
        ranks.exit_torchrun_rank(code)
