"""`nnlm stats`: a corpus's split sizes, vocabulary and <unk> counts."""
from __future__ import annotations

import argparse
from pathlib import Path

from nnlm.cli.common import add_corpus_options, add_json_option, corpus_options, emit, load_corpus


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="split sizes, vocabulary size, <unk> counts")
    add_corpus_options(p)
    add_json_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    options = corpus_options(args)
    corpus = load_corpus(args)
    s = corpus.stats() | {"min_count": options["min_count"]}
    lines = [f"corpus {s['corpus']}: |V| = {s['vocab']:,}, {s['tokens']:,} tokens, {s['unk']:,} <unk>"]
    for name, v in s["splits"].items():
        share = v["unk"] / max(v["tokens"], 1)
        lines.append(f"  {name:<5} {v['tokens']:>10,} tokens {v['unk']:>8,} <unk> ({share:.2%})")
    if options["min_count"] is not None:
        given = "given" if args.min_count is not None else "the default for text directories"
        lines.append(f"  vocabulary: tokens seen at least {options['min_count']} times in "
                     f"{'train' if options['vocab_from'] == 'train' else 'all splits'} "
                     f"(--min-count {options['min_count']}, {given}); the others are <unk>")
    if corpus.name != "brown" and not Path(options["corpus"]).is_dir():  # a text file or standard input
        lines.append(heldout_line(options["heldout"], s["tokens"]))
    emit(args, s, lines)
    return 0


def heldout_line(heldout: int | None, tokens: int) -> str:
    """How a text file's valid and test parts were cut (nnlm.data.corpus_stream's held-out rule)."""
    from nnlm.data.corpus_stream import default_heldout

    if heldout == 0:
        return "  held out: nothing (--no-heldout): train is the whole text"
    given = "--heldout" if heldout is not None else "the default: 5% of the tokens, at most 1,000,000"
    return (f"  held out: test is the fewest last lines holding at least {heldout or default_heldout(tokens):,} "
            f"tokens, valid the fewest lines before them holding as many ({given})")
