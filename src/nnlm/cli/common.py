"""What several commands share: the parser class, the corpus options, the threads option, and the
one printer for text or JSON. Nothing here imports numpy or torch, so `nnlm --help` stays fast."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from nnlm.cli import arg_types as T
from nnlm.errors import NnlmError

THREADS_HELP = "torch CPU threads (default: the cores other processes leave free, re-checked as the load changes)"
TEXT_DIR_MIN_COUNT_HELP = ("text directories: tokens seen fewer times in the counted splits become <unk> "
                           "(default 2, so that <unk> has training examples; 1 if train already holds <unk>)")


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line (exit 2) instead of usage + error.

    `intermixed=True` lets positionals follow options (`nnlm score MODEL --per-word FILE`): argparse
    alone binds an optional positional at the first option and then calls FILE unrecognized."""

    def __init__(self, *args: Any, intermixed: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._intermixed = intermixed
        self._in_intermixed = False

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        if not self._intermixed or self._in_intermixed:
            return super().parse_known_args(args, namespace)
        self._in_intermixed = True  # parse_known_intermixed_args calls parse_known_args itself
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._in_intermixed = False


OWN_CORPUS = "(default: the model's own corpus, recorded when it was built; brown if none is recorded)"


def add_corpus_options(p: argparse.ArgumentParser, default: str | None = "brown", where: str = OWN_CORPUS) -> None:
    """--corpus and the text-directory vocabulary options. `default=None`: the model's own corpus
    (`where` says which, for the help)."""
    g = p.add_argument_group("corpus")
    where = where if default is None else f"(default {default})"
    g.add_argument("--corpus", default=default,
                   help="'brown' (the bengio2003 protocol), a directory with train.txt, valid.txt, test.txt, one text "
                        "file (plain, .gz, .xz or .bz2; one paragraph a line) or - for standard input " + where)
    g.add_argument("--min-count", type=T.positive_int, default=None, help=TEXT_DIR_MIN_COUNT_HELP)
    g.add_argument("--max-vocab", type=T.count, default=None,
                   help="text directories: keep at most this many tokens (default: no limit)")
    g.add_argument("--vocab-from", choices=("train", "all"), default="train",
                   help="text directories: count the vocabulary on train (default) or on all splits")
    g.add_argument("--heldout", type=T.count, default=None, metavar="TOKENS",
                   help="a text file or stdin: test is the fewest last lines holding at least TOKENS tokens, valid "
                        "the fewest lines before them holding as many, train the rest (default: 5%% of the tokens "
                        "each, at most 1,000,000)")
    g.add_argument("--no-heldout", dest="heldout", action="store_const", const=0,
                   help="a text file or stdin: train on all of it, no valid or test part (default: held out)")
    g.add_argument("--no-cache", action="store_true",
                   help="rebuild the corpus instead of using the cache (default: use the cache)")


def corpus_path(corpus: str | None, model_path: str | None = None) -> str | None:
    """The corpus directory or file a command reads, for `nnlm.output_guard.guard_outputs`: --corpus if it is a
    path, else the one the model at `model_path` records; None for Brown (the guard skips '-' and names that
    are no path, such as a recorded `stdin:<sha256>`)."""
    if corpus is None and model_path is not None:
        from nnlm.data.provenance import recorded_corpus

        try:
            corpus = (recorded_corpus(model_path) or {}).get("corpus")
        except NnlmError:
            corpus = None  # an unreadable record is reported when the model is loaded
    return None if corpus in (None, "brown") else corpus


def corpus_options(args: argparse.Namespace) -> dict[str, Any]:
    """The corpus options as given on the command line (the default --min-count resolved)."""
    from nnlm.data.provenance import corpus_options as resolve

    return resolve(args.corpus, args.min_count, args.max_vocab, args.vocab_from, args.heldout)


def corpus_and_options(args: argparse.Namespace, model_path: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The corpus to use and the options that name it: --corpus (with its options) if given, else the
    corpus the model at `model_path` records, else Brown."""
    from nnlm.data.provenance import load_recorded_corpus, recorded_corpus, settled

    if args.corpus is None and model_path is not None:
        recorded = recorded_corpus(model_path)
        if recorded is not None:
            return load_recorded_corpus(recorded, use_cache=not args.no_cache), recorded
    if args.corpus is None:
        args.corpus = "brown"
    options = corpus_options(args)
    corpus = load_recorded_corpus(options, use_cache=not args.no_cache)
    return corpus, settled(options, corpus)


def load_corpus(args: argparse.Namespace):
    """The corpus --corpus and its options name."""
    return corpus_and_options(args)[0]


def model_corpus(args: argparse.Namespace, model_path: str | None):
    """--corpus (with its options) if given, else the corpus the model at `model_path` records, else Brown."""
    return corpus_and_options(args, model_path)[0]


def add_json_option(p: argparse.ArgumentParser, what: str = "one JSON object") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} instead of text (default: text)")


def emit(args: argparse.Namespace, result: Any, lines: Sequence[str]) -> None:
    """The one way a command prints its result: `result` as one JSON object with --json, else `lines`."""
    if getattr(args, "json", False):
        print(json.dumps(result))
    elif lines:
        print("\n".join(lines))


def note(message: str) -> None:
    """A remark on stderr that is not an error (stdout stays the result)."""
    print(f"nnlm: {message}", file=sys.stderr)


def govern_threads(args: argparse.Namespace, device: str = "cpu"):
    """This command's torch threads: --threads, else the cores other processes leave free now,
    re-checked while scoring (nnlm.threads). Nothing when no model loaded torch (n-gram models)."""
    requested = getattr(args, "threads", None)
    if requested is not None and requested < 1:
        raise NnlmError(f"--threads must be at least 1, got {requested}")
    if "torch" not in sys.modules:
        return None
    from nnlm.threads import govern

    return govern(requested, device)
