"""`nnlm`: the parser made of every command's module, and the one place errors become exit codes.

A command is a module of nnlm.cli with `add_parser(sub)` (or `add_parsers` for a small family) that
sets `handler`, a function of the parsed arguments returning the exit code. Command modules import
only argparse at the top; their handlers import the library, so `nnlm --help` loads no numpy or torch."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from nnlm.cli import decode, export, features, mix, ngram, reproduce, rescore, score, serve, stats, text, train, tune
from nnlm.cli import eval as eval_command
from nnlm.cli import prune as prune_command
from nnlm.cli.common import Parser
from nnlm.cli.crash import report_unexpected
from nnlm.cli.version import add_version_option
from nnlm.errors import NnlmError
from nnlm.neural.stop_signals import StoppedBySignal

# In the order `nnlm --help` lists them.
REGISTER = (stats.add_parser, ngram.add_parser, prune_command.add_parser, train.add_parser, eval_command.add_parser,
            tune.add_parser, mix.add_parser, reproduce.add_parser, score.add_parser, text.add_parsers,
            features.add_parsers, export.add_parser, rescore.add_parser, decode.add_parser, serve.add_parser)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nnlm", description="Neural and n-gram language models (Bengio et al. 2003).")
    add_version_option(parser)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for register in REGISTER:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "argv", False) is None and argv is not None:
        args.argv = list(argv)  # reproduce records the command it was given
    try:
        code = args.handler(args)
    except NnlmError as exc:
        print(f"nnlm: error: {exc}", file=sys.stderr)
        code = 2
    except StoppedBySignal as exc:  # training saved a checkpoint first
        print(f"nnlm: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("nnlm: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # never a traceback: one line, the trace in a log file (NNLM_DEBUG=1: on stderr)
        if os.environ.get("NNLM_DEBUG") == "1":
            raise
        code = report_unexpected(exc)
    finish = getattr(args, "finish", None)  # a command's last word on its process (train: a torchrun rank's exit)
    if finish is not None:
        finish(code)
    return code
