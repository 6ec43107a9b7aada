"""Command-line interface: argument parsing and dispatch only; each subcommand calls library code."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from nnlm.errors import NnlmError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line (exit 2) instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_corpus_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("corpus")
    g.add_argument("--corpus", default="brown",
                   help="'brown' (the bengio2003 protocol) or a directory with train.txt, valid.txt, test.txt")
    g.add_argument("--min-count", type=int, default=None,
                   help="text directories: tokens seen fewer times become <unk> (default 1)")
    g.add_argument("--max-vocab", type=int, default=None, help="text directories: keep at most this many tokens")
    g.add_argument("--vocab-from", choices=("train", "all"), default="train",
                   help="text directories: count the vocabulary on train (default) or on all splits")
    g.add_argument("--no-cache", action="store_true", help="rebuild the corpus instead of using the cache")


def _load_corpus(args: argparse.Namespace):
    from nnlm.data.corpus import load_corpus

    return load_corpus(args.corpus, min_count=args.min_count, max_vocab=args.max_vocab,
                       vocab_from=args.vocab_from, use_cache=not args.no_cache)


def _emit(args: argparse.Namespace, result: dict, lines: list[str]) -> None:
    print(json.dumps(result) if args.json else "\n".join(lines))


def cmd_stats(args: argparse.Namespace) -> int:
    corpus = _load_corpus(args)
    s = corpus.stats()
    lines = [f"corpus {s['corpus']}: |V| = {s['vocab']:,}, {s['tokens']:,} tokens, {s['unk']:,} <unk>"]
    for name, v in s["splits"].items():
        lines.append(f"  {name:<5} {v['tokens']:>10,} tokens {v['unk']:>8,} <unk> ({v['unk'] / v['tokens']:.2%})")
    _emit(args, s, lines)
    return 0


def cmd_ngram(args: argparse.Namespace) -> int:
    from nnlm.lm import perplexity
    from nnlm.ngram.build import build_ngram, save_ngram

    corpus = _load_corpus(args)
    t0 = time.perf_counter()
    model = build_ngram(args.kind, corpus, args.order)
    build_seconds = time.perf_counter() - t0
    if args.save:
        save_ngram(model, args.save)
    ppl = {s: perplexity(model, corpus, s) for s in ("train", "valid", "test")}
    result = {"corpus": corpus.name, "kind": args.kind, "order": model.order, "vocab": len(corpus.vocab),
              "perplexity": ppl, "build_seconds": build_seconds}
    lines = [f"{args.kind} (order {model.order}) on {corpus.name}, |V| = {len(corpus.vocab):,}; "
             f"built in {build_seconds:.2f} s",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    _emit(args, result, lines)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from nnlm.neural.train import RUN_DEFAULTS, SESSION_DEFAULTS, train

    names = list(RUN_DEFAULTS) + list(SESSION_DEFAULTS)
    requested = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    state = train(args.out, requested, resume=args.resume, progress=not args.no_progress)
    if args.json:
        print(json.dumps({k: state[k] for k in ("epoch", "step", "best", "finished", "stop_reason", "history")}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from nnlm.lm import perplexity
    from nnlm.neural.checkpoint import load_neural, read_run
    from nnlm.neural.train import pick_device

    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    lm = load_neural(args.run, device=pick_device(args.device))
    run, _, config = read_run(Path(args.run))
    from nnlm.data.corpus import load_corpus

    corpus = load_corpus(run["corpus"], min_count=run["min_count"], max_vocab=run["max_vocab"],
                         vocab_from=run["vocab_from"])
    ppl = {s: perplexity(lm, corpus, s) for s in ("train", "valid", "test")}
    result = {"run": str(args.run), "corpus": corpus.name, "preset": run["preset"], "model": config.to_dict(),
              "parameters": config.parameter_count(), "perplexity": ppl}
    lines = [f"{run['preset']} (n={config.order}, h={config.hidden}, m={config.features}, direct={config.direct}) "
             f"on {corpus.name}, |V| = {len(corpus.vocab):,}",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    _emit(args, result, lines)
    return 0


def _add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="train a neural model (Bengio et al. 2003) into a run directory")
    _add_corpus_options(p)
    p.set_defaults(corpus=None)
    p.add_argument("--out", required=True, help="run directory (weights, config, vocabulary, checkpoints, metrics)")
    p.add_argument("--preset", help="mlp1 ... mlp10 (Table 1; default mlp1)")
    p.add_argument("--order", type=int, help="n, overriding the preset")
    p.add_argument("--hidden", type=int, help="h (0 = no hidden layer), overriding the preset")
    p.add_argument("--features", type=int, help="m, overriding the preset")
    p.add_argument("--direct", action=argparse.BooleanOptionalAction, default=None,
                   help="direct connections W, overriding the preset")
    p.add_argument("--recipe", help="paper or modern (default modern)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast of the training forward pass (default: modern recipe on bf16 hardware)")
    p.add_argument("--epochs", type=int, help="stop after this many epochs (default 30)")
    p.add_argument("--time-budget", type=float, metavar="MINUTES", help="stop after this much training time")
    p.add_argument("--batch-size", type=int, help="examples per update (default 256)")
    p.add_argument("--lr", type=float, help="learning rate (default: the recipe's)")
    p.add_argument("--patience", type=int, help="early stopping: epochs without a better valid perplexity (default 3)")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="default auto: CUDA when present")
    p.add_argument("--checkpoint-minutes", type=float, help="checkpoint every this many minutes (default 5)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final state as one JSON object")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="train/valid/test perplexity of a trained neural run")
    p.add_argument("run", help="run directory written by `nnlm train`")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nnlm", description="Neural and n-gram language models (Bengio et al. 2003).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("stats", help="split sizes, vocabulary size, <unk> counts")
    _add_corpus_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("ngram", help="build a count-based model and print its perplexities")
    _add_corpus_options(p)
    p.add_argument("--kind", default="addone", help="uniform, addone")
    p.add_argument("--order", type=int, default=None, help="n-gram order (default: the kind's own)")
    p.add_argument("--save", metavar="DIR", help="save the model to DIR (loads again without retraining)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_ngram)

    _add_train_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except NnlmError as exc:
        print(f"nnlm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nnlm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
