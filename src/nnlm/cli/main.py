"""`nnlm`: the parser made of every command's module, and the one place errors become exit codes.

A command is a module of nnlm.cli with `add_parser(sub)` (or `add_parsers` for a small family) that
sets `handler`, a function of the parsed arguments returning the exit code. REGISTER names each command's
module and one-line help without importing it: `nnlm --help` lists every command from the register alone, and
`nnlm CMD ...` imports CMD's module only (its handler then imports the library it runs), so a command loads
no other command's code. Command modules import only argparse at the top, so `nnlm --help` loads no numpy or
torch."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

from nnlm.cli.common import Parser
from nnlm.errors import NnlmError
from nnlm.neural.run.stop_signals import StoppedBySignal


class Command(NamedTuple):
    """A command as the register knows it: its name, the nnlm.cli module that builds its parser (by name,
    imported only when the command runs) and the line `nnlm --help` shows for it (the module's own, which
    tests/test_cli_help.py holds it to)."""

    name: str
    module: str
    help: str


# In the order `nnlm --help` lists them. A module's function is `add_parser`, or `add_parsers` for a family.
REGISTER = (
    Command("stats", "stats", "split sizes, vocabulary size, <unk> counts"),
    Command("ngram", "ngram", "build a count-based model and print its perplexities"),
    Command("prune", "prune", "prune a back-off n-gram model by relative entropy (as SRILM's ngram -prune)"),
    Command("train", "train", "train a neural model (Bengio et al. 2003) into a run directory"),
    Command("eval", "eval", "valid/test (or train) perplexity of a trained neural run"),
    Command("tune", "tune", "search lr / weight decay / dropout on validation within a time budget"),
    Command("mix", "mix", "mix models (fixed weights, or EM on validation), print perplexities, save the mixture or "
                          "merge back-off models into one ARPA file"),
    Command("reproduce", "reproduce", "Table 1 of the paper on Brown: n-gram rows, MLPs, mixtures, report"),
    Command("score", "score", "score text, one line (paragraph) at a time, like KenLM's query"),
    Command("generate", "text", "sample text from a model"),
    Command("next", "text", "the most likely next words after a context"),
    Command("neighbors", "features", "nearest words in a neural model's feature space (cosine)"),
    Command("map", "features", "a labeled 2-D map (PCA) of a neural model's word features, as PNG"),
    Command("export", "export", "write word features (word2vec text) or a back-off model (ARPA)"),
    Command("rescore", "rescore", "rerank n-best lists (SRILM, Moses, Kaldi) with nnlm models' scores"),
    Command("decode", "decode", "CTC beam search with nnlm models as the word language model (shallow fusion; "
                                "WER against references; alpha/beta tuned on dev)"),
    Command("serve", "serve", "serve models over local HTTP: a JSON API and a page to explore them"),
)
COMMANDS = {command.name: command for command in REGISTER}


class VersionAction(argparse.Action):
    """argparse's version action, but the line is made (and nnlm.cli.version imported) only when the option is
    given."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from nnlm.cli.version import version_line

        print(version_line(), file=sys.stdout)
        parser.exit(0)


def register_module(sub: argparse._SubParsersAction, module: str) -> None:
    """Import nnlm.cli.`module` and add its command(s) to `sub` in full."""
    imported = importlib.import_module(f"nnlm.cli.{module}")
    (getattr(imported, "add_parser", None) or imported.add_parsers)(sub)


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The `nnlm` parser. The commands named in `load` (None: every command) get their module's full parser;
    the others a stand-in that carries only their name and help line, enough for `nnlm --help`."""
    parser = Parser(prog="nnlm", description="Neural and n-gram language models (Bengio et al. 2003).")
    parser.add_argument("--version", action=VersionAction,
                        help="print nnlm's version (and the git commit of a source checkout) and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    registered: set[str] = set()
    for command in REGISTER:
        if load is None or command.name in load:
            if command.module not in registered:  # (a family's module adds all of its commands at once)
                register_module(sub, command.module)
                registered.add(command.module)
        else:
            sub.add_parser(command.name, help=command.help)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs: its first word that is not an option (nnlm's own options, --help and
    --version, take no value), if it is a registered command."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    command = command_named(words)
    load = () if command is None else [c.name for c in REGISTER if c.module == COMMANDS[command].module]
    args = build_parser(load).parse_args(argv)
    if getattr(args, "argv", False) is None and argv is not None:
        args.argv = list(argv)  # reproduce records the command it was given
    try:
        if os.environ.get("NNLM_EXACT_PRODUCT", "").strip().lower() not in ("", "torch", "numpy"):
            from nnlm.neural.lm.exact_product import forced_library  # its one-line refusal, before any work

            forced_library()
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
        from nnlm.cli.crash import report_unexpected

        code = report_unexpected(exc)
    finish = getattr(args, "finish", None)  # a command's last word on its process (train: a torchrun rank's exit)
    if finish is not None:
        finish(code)
    return code
