"""`nnlm rescore`: add nnlm models' scores to n-best lists, combine with the decoder's, write them reranked."""
from __future__ import annotations

import argparse

from nnlm.cli import arg_types as T
from nnlm.cli.common import THREADS_HELP, add_json_option, emit, govern_threads
from nnlm.errors import NnlmError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rescore", help="rerank n-best lists (SRILM, Moses, Kaldi) with nnlm models' scores",
                       intermixed=True)
    p.add_argument("nbest", nargs="+", help="srilm: files or directories of files, one per utterance; "
                                            "moses: the n-best file; kaldi: the text file `uttid-N words`")
    p.add_argument("--lm", action="append", required=True, metavar="MODEL",
                   help="a saved model (neural run, n-gram directory, ARPA file); repeat for several: "
                        "their scores become features nnlm0, nnlm1, ...")
    p.add_argument("--format", choices=("srilm", "moses", "kaldi"), required=True, help="the n-best format")
    p.add_argument("--scores", help="kaldi: the scores file, `uttid-N score...` per hypothesis (default: none)")
    p.add_argument("--score-names", default="ac_cost",
                   help="kaldi: names of the scores file's columns, comma-separated (default ac_cost)")
    p.add_argument("--out", required=True,
                   help="directory for the reranked lists and one-best.txt (created; never an input, nor inside or "
                        "around one; written only when everything succeeded)")
    p.add_argument("--force", action="store_true",
                   help="replace files in --out that nnlm did not write (default: refused); never an input")
    p.add_argument("--log-base", choices=("10", "e"), default="10",
                   help="base of the added log probabilities (default 10, as SRILM's and ARPA's scores)")
    p.add_argument("--weights", help="name=value,... over the features (default: the decoder's score 1 "
                                     "(kaldi's cost -1), each --lm 1, others 0)")
    p.add_argument("--tune", nargs="+", metavar="NBEST", help="dev n-best lists (same format) to tune the weights "
                                                             "on, with --tune-refs (default: no tuning)")
    p.add_argument("--tune-scores", help="kaldi: the dev lists' scores file (default: none)")
    p.add_argument("--tune-refs", help="dev references, `uttid words` per line (default: none)")
    p.add_argument("--objective", choices=("wer", "likelihood"), default="wer",
                   help="tuning: minimize the 1-best's word error rate, or maximize the log-likelihood of each "
                        "list's lowest-error hypothesis (default wer)")
    p.add_argument("--tune-features", help="the features to tune, comma-separated, each starting at 0 unless "
                                           "--weights gives it (default: every --lm and nwords)")
    p.add_argument("--refs", help="references of the lists rescored: report word error rate before and after "
                                   "(default: none)")
    p.add_argument("--unnormalized", action="store_true",
                   help="neural models: score y[word] without the softmax sum (self-normalized models trained "
                        "with --loss sampled or nce) (default: off)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    add_json_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from nnlm.io import atomic_write_text, staged_directory
    from nnlm.loading import load
    from nnlm.output_guard import guard_outputs
    from nnlm.rescore import add_lm_features, corpus_wer, file_order, parse_weights, rerank
    from nnlm.rescore.formats import ONE_BEST, one_best_text, output_names, read_nbest, write_reranked
    from nnlm.rescore.tuning import read_references, require_references
    from nnlm.use import use_unnormalized

    if bool(args.tune) != bool(args.tune_refs):
        raise NnlmError("--tune and --tune-refs go together")
    out = Path(args.out)
    inputs = [*args.nbest, args.scores, *(args.tune or []), args.tune_scores, args.tune_refs, args.refs, *args.lm]
    guard_outputs(directories=[("--out", out)], inputs=inputs)
    if out.exists() and not out.is_dir():
        raise NnlmError(f"--out {out} is a file, not a directory")
    # Everything is read and checked before any scoring, and nothing is written before everything succeeded.
    names = [n.strip() for n in args.score_names.split(",") if n.strip()]
    nbest = read_nbest(args.format, args.nbest, args.scores, names)
    dev = read_nbest(args.format, args.tune, args.tune_scores, names) if args.tune else None
    refs = read_references(args.refs) if args.refs else None
    if refs is not None:
        require_references(nbest, refs, "--refs")
    tune_refs = read_references(args.tune_refs) if dev is not None else None
    if dev is not None:
        require_references(dev, tune_refs, "--tune-refs")
    if out.is_dir():
        guard_outputs(files=[("--out", out / name) for name in output_names(nbest)], force=args.force)
    models = [load(path) for path in args.lm]
    govern_threads(args)
    if args.unnormalized:
        models = [use_unnormalized(model) for model in models]
    started = time.perf_counter()
    lm_names = add_lm_features(nbest, models, args.log_base)
    seconds = time.perf_counter() - started
    weights = parse_weights(args.weights, nbest, lm_names)
    result = {"utterances": len(nbest.utterances), "hypotheses": sum(len(u.hypotheses) for u in nbest.utterances),
              "scoring_seconds": seconds, "log_base": args.log_base}
    if dev is not None:
        weights = _tuned(args, dev, models, weights, lm_names, tune_refs)
    orders = rerank(nbest, weights)
    result["weights"] = dict(zip(nbest.names, weights.tolist(), strict=True))
    lines = [f"{result['utterances']} utterances, {result['hypotheses']} hypotheses scored in {seconds:.2f} s "
             f"(log{args.log_base})", "weights: " + " ".join(f"{n}={w:.4g}" for n, w in result["weights"].items())]
    if refs is not None:
        (e0, n), (e1, _) = corpus_wer(nbest, file_order(nbest), refs), corpus_wer(nbest, orders, refs)
        result |= {"wer_before": e0 / n if n else 0.0, "wer_after": e1 / n if n else 0.0, "reference_words": n}
        lines.append(f"WER {100 * e0 / max(n, 1):.2f}% -> {100 * e1 / max(n, 1):.2f}% "
                     f"({e0} -> {e1} errors in {n} words)")
    with staged_directory(out) as staging:  # moved into --out only once every file is written
        write_reranked(nbest, weights, orders, staging, lm_names)
        atomic_write_text(staging / ONE_BEST, one_best_text(nbest, orders))
    lines.append(f"reranked lists and {ONE_BEST} written to {out}")
    emit(args, result, lines)
    return 0


def _tuned(args, dev, models, weights, lm_names, refs):
    import numpy as np

    from nnlm.rescore import add_lm_features
    from nnlm.rescore.formats import DEFAULT_WEIGHTS
    from nnlm.rescore.tuning import DevSet, tune_weights

    add_lm_features(dev, models, args.log_base)
    chosen = ([n.strip() for n in args.tune_features.split(",")] if args.tune_features
              else [*lm_names, "nwords"])
    tunable = [dev.column(n) for n in chosen]
    fixed = dev.column(next(iter(DEFAULT_WEIGHTS[dev.format])))
    if len(dev.names) != len(weights):
        raise NnlmError("the dev lists' features differ from the lists rescored")
    given = {item.partition("=")[0].strip() for item in (args.weights or "").split(",")}
    start = np.asarray(weights, dtype=np.float64).copy()
    for j in tunable:  # from the decoder's score alone, unless --weights gave a start: a search started with
        if dev.names[j] not in given:  # every model at 1 gets stuck where one model's weight drowns the others
            start[j] = 0.0
    return tune_weights(DevSet.build(dev, refs), start, tunable, fixed, args.objective)
