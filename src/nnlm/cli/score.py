"""`nnlm score`: score text line by line like KenLM's query, or a corpus split as one stream."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from nnlm.cli import arg_types as T
from nnlm.cli.common import (
    THREADS_HELP,
    add_corpus_options,
    add_json_option,
    emit,
    govern_threads,
    model_corpus,
    note,
)
from nnlm.errors import NnlmError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score text, one line (paragraph) at a time, like KenLM's query",
                       intermixed=True)
    p.add_argument("model", help="a saved model (directory or file)")
    p.add_argument("file", nargs="?", default=None, help="UTF-8 text, one paragraph per line; blank lines are "
                                                         "skipped and counted, as in corpora (default: stdin)")
    p.add_argument("--per-word", action="store_true", help="also print each word's log10 probability (default: off)")
    p.add_argument("--independent", action="store_true",
                   help="score each line from the start of a text instead of after the previous line (default: off)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip (and report) undecodable lines instead of stopping (default: stop)")
    p.add_argument("--oov-vector", action="store_true",
                   help="neural models: words outside V enter later contexts with the paper's feature vector "
                        "(sum_i C(i) P(i | context)) instead of <unk>'s (default: off)")
    p.add_argument("--split", choices=("train", "valid", "test"), default=None,
                   help="score this split of the model's corpus (or --corpus) as one stream, exactly as "
                        "`nnlm eval` does (default: score FILE)")
    p.add_argument("--unnormalized", action="store_true",
                   help="neural models: score y[word] without the softmax sum (approximate; for self-normalized "
                        "models trained with --loss sampled or nce, see `nnlm eval`'s log Z) (default: off)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    add_json_option(p)
    add_corpus_options(p, default=None)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.loading import load
    from nnlm.use import use_unnormalized

    model = load(args.model)
    govern_threads(args)
    if args.unnormalized:
        model = use_unnormalized(model)
    if args.split is not None:
        return _score_split(args, model)
    return _score_file(args, model)


def _score_file(args: argparse.Namespace, model) -> int:
    """Stream FILE through the model: each line's report is printed as soon as the line is scored,
    and memory stays one block of text whatever the input's size (nnlm.score_stream)."""
    from nnlm.use import score_file

    source = args.file or "-"
    stream = score_file(model, source, carry_context=not args.independent, skip_bad=args.skip_bad,
                        oov_vector=args.oov_vector, word_events=args.per_word)
    report = (_JsonReport if args.json else _TextReport)(sys.stdout)
    for event in stream.events():
        report.event(event)
    if not stream.lines:  # a perplexity of nothing is no number: say so instead of printing nan
        counts = [f"{n} blank line{'s' if n != 1 else ''}" for n in (stream.blank,) if n]
        counts += [f"{n} undecodable" for n in (len(stream.skipped),) if n]
        raise NnlmError(f"{'standard input' if source == '-' else source} has no line to score"
                        + (f" ({', '.join(counts)} skipped)" if counts else ""))
    report.finish(stream)
    return 0


class _TextReport:
    """`line N  log10 ...` per line as it is scored (after its words with --per-word), then the Total."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.words_open = out, False

    def event(self, event) -> None:
        from nnlm.score_stream import BadLine, LineScore

        if isinstance(event, LineScore):
            self._close_words()
            self.out.write(f"line {event.line_number}\tlog10 {event.log10_prob:.4f}\ttokens {event.tokens}"
                           f"\tOOV {event.oov}\tppl {event.perplexity:.2f}\n")
        elif isinstance(event, BadLine):
            self._close_words()
            self.out.flush()
            note(f"skipped line {event.line_number}: {event.reason}")
        else:
            self.out.write(("\t" if self.words_open else "")
                           + "\t".join(f"{w}={p:.4f}" for w, p in zip(event.tokens, event.word_log10, strict=True)))
            self.words_open = True

    def _close_words(self) -> None:
        if self.words_open:
            self.out.write("\n")
            self.words_open = False

    def finish(self, stream) -> None:
        skipped = len(stream.skipped)
        self.out.write(f"Total\tlog10 {stream.log10_prob:.4f}\ttokens {stream.tokens}\tOOV {stream.oov}"
                       f"\tppl {stream.perplexity:.2f}" + (f"\tskipped {skipped}" if skipped else "")
                       + (f"\tblank {stream.blank}" if stream.blank else "") + "\n")


class _JsonReport:
    """One JSON object, {"lines": [...], "total": {...}}, written as the lines are scored: a line's
    object is written when it is complete; with --per-word its "word_log10" list is written as its
    words are scored (so it comes right after "line"), and a line found undecodable after some of
    its words were written is closed with "skipped" instead of its totals."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.started, self.words_open = out, False, False

    def event(self, event) -> None:
        from nnlm.score_stream import BadLine, LineScore

        if isinstance(event, LineScore):
            fields = {"log10_prob": event.log10_prob, "tokens": event.tokens, "oov": event.oov,
                      "perplexity": event.perplexity}
            if self.words_open:
                self.out.write("], " + json.dumps(fields)[1:])
                self.words_open = False
            else:
                self._open_line(event.line_number)
                self.out.write(json.dumps(fields)[1:])
        elif isinstance(event, BadLine):
            note(f"skipped line {event.line_number}: {event.reason}")
            if self.words_open:
                self.out.write(f"], \"skipped\": {json.dumps(event.reason)}}}")
                self.words_open = False
        else:
            if not self.words_open:
                self._open_line(event.line_number)
                self.out.write('"word_log10": [')
                self.words_open = True
            else:
                self.out.write(", ")
            self.out.write(json.dumps(event.word_log10.tolist())[1:-1])

    def _open_line(self, number: int) -> None:
        self.out.write(("{\"lines\": [" if not self.started else ", ") + f'{{"line": {number}, ')
        self.started = True

    def finish(self, stream) -> None:
        total = {"log10_prob": stream.log10_prob, "tokens": stream.tokens, "oov": stream.oov,
                 "perplexity": stream.perplexity, "skipped": [n for n, _ in stream.skipped], "blank": stream.blank}
        self.out.write(f"], \"total\": {json.dumps(total)}}}\n")


def _score_split(args: argparse.Namespace, model) -> int:
    """Score a corpus split as one stream: the very function `nnlm eval` and `nnlm ngram` use."""
    from nnlm.loading import match_corpus
    from nnlm.use import score_split

    if args.file is not None:
        raise NnlmError("give a FILE or --split, not both")
    if args.oov_vector or args.independent or args.skip_bad:
        raise NnlmError("--oov-vector, --independent and --skip-bad apply to text files, not to --split")
    corpus = model_corpus(args, args.model)
    model = match_corpus(model, args.model, corpus)
    scored = score_split(model, corpus, args.split)
    total = {"corpus": corpus.name, "split": args.split, "log10_prob": scored.log10_prob, "tokens": scored.tokens,
             "oov": scored.oov, "perplexity": scored.perplexity}
    lines = []
    if args.per_word:
        lines += [f"{w}\t{p:.4f}" for w, p in zip(corpus.vocab.decode(scored.ids), scored.word_log10, strict=True)]
    lines.append(f"Total {corpus.name} {args.split}\tlog10 {scored.log10_prob:.4f}\ttokens {scored.tokens}"
                 f"\tOOV {scored.oov}\tppl {scored.perplexity:.2f}")
    emit(args, total | ({"word_log10": scored.word_log10.tolist()} if args.per_word else {}), lines)
    return 0
