"""`nnlm eval`: perplexities of a trained neural run on its own corpus."""
from __future__ import annotations

import argparse
import sys

from nnlm.cli import arg_types as T
from nnlm.cli.common import THREADS_HELP, add_json_option, emit, govern_threads


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="valid/test (or train) perplexity of a trained neural run")
    p.add_argument("run", help="run directory written by `nnlm train`")
    p.add_argument("--split", default="valid,test",
                   help="comma-separated splits to score (default valid,test; train,valid,test adds the long "
                        "train split)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to score (default auto: CUDA when present)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    p.add_argument("--log-z", action="store_true",
                   help="also report mean and std of log Z on valid (default: only for --loss sampled/nce runs, "
                        "where it is always done)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: the output product in bf16 with fp32 accumulation, still normalized over all "
                        "words, within about 2e-4 relative of fp32; faster only with CUDA or a CPU with AVX-512 "
                        "BF16 / AMX, several times slower on other CPUs; a long split of a net with direct "
                        "connections is scored exactly from per-position tables instead, which is faster "
                        "(default fp32, the precision of every reported figure)")
    add_json_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.neural.lm.evaluate import evaluate_run, parse_splits
    from nnlm.neural.run.run_config import bf16_is_fast, pick_device

    splits = parse_splits(args.split)
    device = pick_device(args.device)
    governor = govern_threads(args, device)
    if args.precision == "bf16" and not bf16_is_fast(device):
        print("nnlm: note: this CPU has no bf16 units (AVX-512 BF16 / AMX): --precision bf16 is slower than fp32 "
              "here", file=sys.stderr)
    result = evaluate_run(args.run, splits, device, log_z=args.log_z, precision=args.precision)
    m = result.model
    json_result = {"run": result.run, "corpus": result.corpus, "preset": result.preset, "name": result.name,
                   "model": m, "parameters": result.parameters, "perplexity": result.perplexity,
                   "seconds": round(result.seconds, 2), "threads": governor.describe(), "precision": args.precision}
    lines = [f"{result.name} (n={m['order']}, h={m['hidden']}, m={m['features']}, direct={m['direct']}) "
             f"on {result.corpus}, |V| = {result.vocab:,}",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in result.perplexity.items()),
             f"  {result.tokens:,} tokens scored in {result.seconds:.1f} s, {governor.describe()}"
             + ("" if args.precision == "fp32" else f", {args.precision} output product")]
    if result.valid_log_z is not None:  # self-normalization: how near 0 log Z is
        mean, std = result.valid_log_z
        json_result["valid_log_z"] = {"mean": mean, "std": std}
        lines.append(f"  valid log Z: mean {mean:.3f}, std {std:.3f} (0 = self-normalized: "
                     "`nnlm score --unnormalized` is then close to exact)")
    emit(args, json_result, lines)
    return 0
