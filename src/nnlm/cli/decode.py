"""`nnlm decode`: CTC beam search over frame log-probabilities with nnlm models as the word LM."""
from __future__ import annotations

import argparse

from nnlm.cli import arg_types as T
from nnlm.cli.common import THREADS_HELP, add_json_option, emit, govern_threads
from nnlm.errors import NnlmError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="CTC beam search with nnlm models as the word language model "
                                      "(shallow fusion; WER against references; alpha/beta tuned on dev)",
                       intermixed=True)
    p.add_argument("logits", nargs="+", metavar="LOGITS",
                   help="frame log-probabilities [T, C]: .npy files named by utterance, .npz files with an "
                        "array per utterance, or directories of them")
    p.add_argument("--labels", required=True, help="one label per line in column order: <blank> or <pad> is the "
                                                   "CTC blank, | the word boundary")
    p.add_argument("--lm", action="append", required=True, metavar="MODEL",
                   help="a saved model (neural run, n-gram directory, ARPA file); repeat to mix several")
    p.add_argument("--weights", help="several --lm: their mixture weights, comma-separated, summing to 1 "
                                     "(default: equal)")
    p.add_argument("--alpha", type=T.finite_float, default=0.5,
                   help="LM weight on ln P(word) (default 0.5; --tune-dev starts from it)")
    p.add_argument("--beta", type=T.finite_float, default=1.0, help="bonus per word (default 1.0)")
    p.add_argument("--beam-width", type=T.int_range(1, 4096), default=64, help="hypotheses kept (default 64)")
    p.add_argument("--unk-offset", type=T.finite_float, default=-10.0,
                   help="a word outside the LM's vocabulary is scored as <unk> plus alpha * ln(10) * this, a "
                        "partial word that begins no LM word costs this (pyctcdecode's rules) (default -10)")
    p.add_argument("--known-words-only", action="store_true",
                   help="keep only hypotheses spelled with the LM's words (default: off, others score as <unk>)")
    p.add_argument("--out", required=True, help="directory for transcripts.txt and decode.json (created)")
    p.add_argument("--refs", help="references `uttid words` per line: print the word error rate (default: none)")
    p.add_argument("--tune-dev", metavar="LOGITS", help="dev logits (file or directory) to choose alpha and beta "
                                                        "on by WER, with --tune-refs (default: no tuning)")
    p.add_argument("--tune-refs", help="the dev references, `uttid words` per line (default: none)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    add_json_option(p)
    p.set_defaults(handler=run)


def _model(args: argparse.Namespace):
    from nnlm.loading import load
    from nnlm.mixture import Mixture

    models = [load(path) for path in args.lm]
    if args.weights is None:
        return models[0] if len(models) == 1 else Mixture(models, [1.0 / len(models)] * len(models))
    try:
        weights = [float(w) for w in args.weights.split(",")]
    except ValueError:
        raise NnlmError(f"--weights must be numbers like 0.7,0.3; got {args.weights!r}") from None
    if len(weights) != len(models):
        raise NnlmError(f"--weights gives {len(weights)} weights for {len(models)} --lm models")
    return Mixture(models, weights)


def run(args: argparse.Namespace) -> int:
    import time

    from nnlm.decode import CTCWordDecoder, DecodeOptions, corpus_wer, read_labels, read_logits
    from nnlm.decode.outputs import check_apart, check_replaceable, write_outputs
    from nnlm.decode.tuning import tune_alpha_beta
    from nnlm.decode.wer import read_references

    if bool(args.tune_dev) != bool(args.tune_refs):
        raise NnlmError("--tune-dev and --tune-refs go together")
    inputs = [*args.logits, args.labels, *args.lm, *(p for p in (args.refs, args.tune_dev, args.tune_refs) if p)]
    check_apart(args.out, inputs)
    check_replaceable(args.out)
    alphabet = read_labels(args.labels)
    utterances = read_logits(args.logits, len(alphabet))
    refs = read_references(args.refs) if args.refs else None
    if refs is not None:
        corpus_wer({uid: [] for uid in utterances}, refs)  # every utterance has a reference, before any work
    dev, dev_refs = None, None
    if args.tune_dev:
        dev, dev_refs = read_logits([args.tune_dev], len(alphabet)), read_references(args.tune_refs)
        corpus_wer({uid: [] for uid in dev}, dev_refs)
    model = _model(args)
    govern_threads(args)
    options = DecodeOptions(alpha=args.alpha, beta=args.beta, beam_width=args.beam_width,
                            unk_offset=args.unk_offset, known_words_only=args.known_words_only)

    def decode_set(opts: DecodeOptions, data: dict) -> dict[str, list[str]]:
        decoder = CTCWordDecoder(alphabet, model, opts)
        return {uid: decoder.decode(lp).words for uid, lp in data.items()}

    result: dict = {"utterances": len(utterances), "lm": args.lm}
    if dev is not None:
        options, dev_wer, trials = tune_alpha_beta(lambda o: decode_set(o, dev), dev_refs, options)
        result |= {"dev_wer": dev_wer, "tuning_trials": trials}
    started = time.perf_counter()
    transcripts = decode_set(options, utterances)
    seconds = time.perf_counter() - started
    frames = sum(len(lp) for lp in utterances.values())
    result |= {"alpha": options.alpha, "beta": options.beta, "beam_width": options.beam_width,
               "decode_seconds": seconds, "frames": frames}
    lines = [f"{len(utterances)} utterances ({frames:,} frames) decoded in {seconds:.2f} s "
             f"(alpha {options.alpha:g}, beta {options.beta:g}, beam {options.beam_width})"]
    if dev is not None:
        lines.append(f"tuned on {len(dev)} dev utterances: dev WER {100 * result['dev_wer']:.2f}%")
    if refs is not None:
        errors, words = corpus_wer(transcripts, refs)
        result |= {"wer": errors / max(words, 1), "word_errors": errors, "reference_words": words}
        lines.append(f"WER {100 * result['wer']:.2f}% ({errors} errors in {words} words)")
    write_outputs(args.out, transcripts, result)
    lines.append(f"transcripts written to {args.out}/transcripts.txt")
    emit(args, result, lines)
    return 0
