"""`nnlm train`: train a neural model into a run directory (one process, or --parallel).

The options are defined here as they always were; the typed run configuration will generate them."""
from __future__ import annotations

import argparse

from nnlm import cli_types as T
from nnlm.cli.common import THREADS_HELP, add_corpus_options, emit


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a neural model (Bengio et al. 2003) into a run directory")
    add_corpus_options(p)
    p.set_defaults(corpus=None)
    p.add_argument("--out", required=True, help="run directory (weights, config, vocabulary, checkpoints, metrics)")
    p.add_argument("--preset", help="mlp1 ... mlp10 (Table 1; default mlp1)")
    p.add_argument("--order", type=T.int_range(2, 64), help="n, overriding the preset")
    p.add_argument("--hidden", type=T.int_range(0, 100_000), help="h (0 = no hidden layer), overriding the preset")
    p.add_argument("--features", type=T.int_range(1, 100_000), help="m, overriding the preset")
    p.add_argument("--direct", action=argparse.BooleanOptionalAction, default=None,
                   help="direct connections W, overriding the preset")
    p.add_argument("--recipe", help="adaptive, adaptive-sampled, paper, modern or sampled (default: adaptive with "
                                    "--loss full, sampled with --loss sampled / nce)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 output layer and softmax in training (default: modern recipe on bf16 hardware)")
    p.add_argument("--epochs", type=T.int_range(1, 1_000_000), help="stop after this many epochs (default 30)")
    p.add_argument("--time-budget", type=T.minutes, metavar="MINUTES", help="stop after this much training time")
    p.add_argument("--batch-size", type=T.int_range(1, 1 << 24), help="examples per update (default 256)")
    p.add_argument("--lr", type=T.learning_rate, help="learning rate (default: the recipe's)")
    p.add_argument("--patience", type=T.count,
                   help="early stopping: epochs without a better valid perplexity (default 3)")
    g = p.add_argument_group("recipe fields (default: the recipe's; stored in run.json, kept by --resume)")
    g.add_argument("--lr-schedule", choices=("epoch", "plateau", "constant"),
                   help="epoch: lr x --lr-factor after every epoch; plateau: x --lr-factor when validation stalls; "
                        "constant (the paper recipe has its own eps_t)")
    g.add_argument("--lr-factor", type=T.float_range(0.0, 1.0, lo_open=True), help="the schedule's factor, in (0, 1]")
    g.add_argument("--plateau-patience", type=T.count,
                   help="plateau: epochs without a --min-improvement better validation before the rate drops")
    g.add_argument("--weight-decay", type=T.float_range(0.0, 1e3), help="(decoupled) weight decay on C, H, U, W")
    g.add_argument("--dropout", type=T.float_range(0.0, 1.0), help="dropout on x and on the hidden layer, in [0, 1)")
    g.add_argument("--min-improvement", type=T.float_range(0.0, 1.0), metavar="FRACTION",
                   help="an epoch counts as better only if valid perplexity < best x (1 - FRACTION)")
    p.add_argument("--seed", type=T.seed, help="random seed (default 0)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="default auto: CUDA when present")
    p.add_argument("--checkpoint-minutes", type=T.minutes, help="checkpoint every this many minutes (default 5)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--parallel", choices=("none", "hogwild", "ddp", "vocab"),
                   help="hogwild: asynchronous shared-memory workers; ddp: synchronous data-parallel; vocab: "
                        "output layer split by words over the processes (under torchrun, or --workers local ones)")
    p.add_argument("--workers", type=T.procs, help="local processes for --parallel (default 2; torchrun sets its own)")
    p.add_argument("--dist-timeout", type=T.seconds, default=600.0, metavar="SECONDS",
                   help="ddp/vocab: how long a rank waits for the others before stopping with an error (default 600)")
    p.add_argument("--loss", choices=("full", "sampled", "nce"),
                   help="output layer in training: full softmax (default), sampled (importance-sampled softmax) "
                        "or nce (noise-contrastive estimation); validation and eval are always exact")
    p.add_argument("--samples", type=T.positive_int, metavar="K",
                   help="--loss sampled/nce: words drawn per batch from unigram^0.75 (default 128)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final state as one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.data.provenance import default_min_count
    from nnlm.neural.distributed import under_torchrun
    from nnlm.neural.train import RUN_DEFAULTS, SESSION_DEFAULTS, train

    names = list(RUN_DEFAULTS) + list(SESSION_DEFAULTS)
    requested = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if not args.resume and args.corpus not in (None, "brown") and args.min_count is None:
        requested["min_count"] = default_min_count(args.corpus)  # recorded in run.json; a resume keeps it
    if getattr(args, "parallel", None) not in (None, "none") or getattr(args, "workers", None) is not None \
            or under_torchrun():
        from nnlm.neural.parallel import train_parallel

        state = train_parallel(args.out, requested, args.parallel or "none", args.workers, resume=args.resume,
                               progress=not args.no_progress, timeout=args.dist_timeout)
        if state is None:  # a torchrun rank other than 0: rank 0 reports
            return 0
    else:
        state = train(args.out, requested, resume=args.resume, progress=not args.no_progress)
    if args.json:
        emit(args, {k: state[k] for k in ("epoch", "step", "best", "finished", "stop_reason", "history")}, [])
    return 0
