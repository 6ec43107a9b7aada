"""`nnlm score`: score text line by line like KenLM's query, or a corpus split as one stream."""
from __future__ import annotations

import argparse

from nnlm import cli_types as T
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
        use_unnormalized(model)
    if args.split is not None:
        return _score_split(args, model)
    return _score_file(args, model)


def _score_file(args: argparse.Namespace, model) -> int:
    from nnlm.textfile import read_lines
    from nnlm.use import score_text

    source = args.file or "-"
    text = read_lines(source)
    if text.bad_utf8 and not args.skip_bad:
        raise NnlmError(f"line {text.bad_utf8[0]} is not valid UTF-8 (use --skip-bad to skip such lines)")
    scored = score_text(model, text.lines, carry_context=not args.independent, skip_bad=args.skip_bad,
                        oov_vector=args.oov_vector)
    if not scored.lines:  # a perplexity of nothing is no number: say so instead of printing nan
        counts = [f"{n} blank line{'s' if n != 1 else ''}" for n in (scored.blank - len(text.bad_utf8),) if n]
        counts += [f"{n} undecodable" for n in (len(text.bad_utf8),) if n]
        raise NnlmError(f"{'standard input' if source == '-' else source} has no line to score"
                        + (f" ({', '.join(counts)} skipped)" if counts else ""))
    for number, reason in scored.skipped:
        note(f"skipped line {number}: {reason}")
    for number in text.bad_utf8:
        note(f"skipped line {number}: not valid UTF-8")
    skipped = len(scored.skipped) + len(text.bad_utf8)
    blank = scored.blank - len(text.bad_utf8)  # undecodable lines reach the scorer as blank ones
    total = {"log10_prob": scored.log10_prob, "tokens": scored.tokens, "oov": scored.oov,
             "perplexity": scored.perplexity,
             "skipped": sorted([n for n, _ in scored.skipped] + text.bad_utf8), "blank": blank}
    lines = []
    for s in scored.lines:
        if args.per_word:
            words = text.lines[s.line_number - 1].split() + ["<p>"]
            lines.append("\t".join(f"{w}={p:.4f}" for w, p in zip(words, s.word_log10, strict=True)))
        lines.append(f"line {s.line_number}\tlog10 {s.log10_prob:.4f}\ttokens {s.tokens}\tOOV {s.oov}"
                     f"\tppl {s.perplexity:.2f}")
    lines.append(f"Total\tlog10 {scored.log10_prob:.4f}\ttokens {scored.tokens}\tOOV {scored.oov}"
                 f"\tppl {scored.perplexity:.2f}" + (f"\tskipped {skipped}" if skipped else "")
                 + (f"\tblank {blank}" if blank else ""))
    per_line = [{"line": s.line_number, "log10_prob": s.log10_prob, "tokens": s.tokens, "oov": s.oov,
                 "perplexity": s.perplexity, **({"word_log10": s.word_log10.tolist()} if args.per_word else {})}
                for s in scored.lines]
    emit(args, {"lines": per_line, "total": total}, lines)
    return 0


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
