"""Command-line interface: argument parsing and dispatch only; each subcommand calls library code."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from nnlm import cli_types as T
from nnlm.errors import NnlmError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line (exit 2) instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_corpus_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("corpus")
    g.add_argument("--corpus", default="brown",
                   help="'brown' (the bengio2003 protocol) or a directory with train.txt, valid.txt, test.txt")
    g.add_argument("--min-count", type=T.positive_int, default=None,
                   help="text directories: tokens seen fewer times become <unk> (default 1)")
    g.add_argument("--max-vocab", type=T.count, default=None, help="text directories: keep at most this many tokens")
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


def _ngram_model(args: argparse.Namespace, corpus):
    """The model to evaluate: built from train, or loaded (--load DIR, --load-arpa FILE)."""
    from nnlm.ngram.arpa import read_arpa
    from nnlm.ngram.build import build_ngram, load_ngram

    if args.load and args.load_arpa:
        raise NnlmError("give --load or --load-arpa, not both")
    if not (args.load or args.load_arpa):
        return build_ngram(args.kind, corpus, args.order, **_kind_options(args)), args.kind
    if args.classes is not None:
        raise NnlmError("--classes applies only when building --kind class")
    model = load_ngram(args.load) if args.load else read_arpa(args.load_arpa, corpus.vocab)
    if args.order is not None and args.order != model.order:
        raise NnlmError(f"the loaded model has order {model.order}, not --order {args.order}")
    return model, None if args.load else "arpa"


def _kind_options(args: argparse.Namespace) -> dict:
    """Options that only some kinds take (--classes: class; --memory: kn)."""
    options: dict = {}
    if args.memory is not None:
        if args.kind != "kn":
            raise NnlmError("--memory applies only when building --kind kn")
        options["memory_gb"] = args.memory
    if args.classes is None:
        return options
    if args.kind != "class":
        raise NnlmError("--classes applies only when building --kind class")
    return options | {"classes": args.classes}


def cmd_ngram(args: argparse.Namespace) -> int:
    from nnlm.io import check_output
    from nnlm.lm import perplexity
    from nnlm.ngram.build import save_ngram
    from nnlm.ngram.store import save_target

    if args.save:  # refused before the (long) build, not after it
        save_target(Path(args.save))
    if args.arpa:
        check_output(args.arpa)
    corpus = _load_corpus(args)
    t0 = time.perf_counter()
    model, kind = _ngram_model(args, corpus)
    kind = kind or getattr(model, "kind", type(model).__name__)
    build_seconds = time.perf_counter() - t0
    if args.save:
        save_ngram(model, args.save)
    if args.arpa:
        from nnlm.ngram.arpa import write_arpa
        from nnlm.ngram.backoff import BackoffModel

        if not isinstance(model, BackoffModel):
            raise NnlmError(f"only back-off models (kind kn, or an ARPA file) can be written as ARPA, not {kind}")
        write_arpa(model, args.arpa)
    ppl = {s: perplexity(model, corpus, s) for s in ("train", "valid", "test")}
    action = "loaded" if args.load or args.load_arpa else "built"
    result = {"corpus": corpus.name, "kind": kind, "order": model.order, "vocab": len(corpus.vocab),
              "perplexity": ppl, "build_seconds": build_seconds}
    lines = [f"{kind} (order {model.order}) on {corpus.name}, |V| = {len(corpus.vocab):,}; "
             f"{action} in {build_seconds:.2f} s",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    if hasattr(model, "details"):  # what the build did, e.g. EM steps or clustering time
        result["details"], text = model.details()
        lines.append("  " + text)
    fallback = getattr(model, "params", {}).get("fallback_orders")
    if fallback:  # as KenLM's --discount_fallback: the data are too small or too odd for estimated discounts
        result["discount_fallback"] = fallback
        print(f"nnlm: note: modified Kneser-Ney used the fallback discounts 0.5, 1, 1.5 for order(s) "
              f"{', '.join(map(str, fallback))}: too few distinct counts in train to estimate them", file=sys.stderr)
    _emit(args, result, lines)
    return 0


def _read_lines(source: str) -> list[str]:
    """Lines of a UTF-8 file or stdin ('-'); undecodable lines are kept as None-free markers."""
    from nnlm.io import read_input

    raw = read_input(source, "text file", streams=True)
    lines = []
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        try:
            lines.append(chunk.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError:
            lines.append(f"\x00bad-utf8 line {number}")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def cmd_score(args: argparse.Namespace) -> int:
    from nnlm.loading import load
    from nnlm.use import score_lines

    model = load(args.model)
    _govern(args)
    if getattr(args, "unnormalized", False):
        from nnlm.neural.model import NeuralLM

        if not isinstance(model, NeuralLM):
            raise NnlmError(f"--unnormalized applies to neural models only, not to {type(model).__name__}")
        model.unnormalized = True
    if args.split is not None:
        return _score_split(args, model)
    if args.file is None:
        args.file = "-"
    lines = _read_lines(args.file)
    bad_bytes = [i for i, line in enumerate(lines, 1) if line.startswith("\x00bad-utf8")]
    if bad_bytes and not args.skip_bad:
        raise NnlmError(f"line {bad_bytes[0]} is not valid UTF-8 (use --skip-bad to skip such lines)")
    lines = ["" if line.startswith("\x00bad-utf8") else line for line in lines]
    scores, bad = score_lines(model, lines, carry_context=not args.independent, skip_bad=args.skip_bad,
                              oov_vector=args.oov_vector)
    if not scores:  # a perplexity of nothing is no number: say so instead of printing nan
        raise NnlmError(f"{'standard input' if args.file == '-' else args.file} has no line to score"
                        + (f" ({len(bad)} skipped)" if bad else ""))
    for number, reason in bad:
        if number not in bad_bytes:
            print(f"nnlm: skipped line {number}: {reason}", file=sys.stderr)
    for number in bad_bytes:
        print(f"nnlm: skipped line {number}: not valid UTF-8", file=sys.stderr)
    total_lp = sum(s.log10_prob for s in scores)
    total_tokens = sum(s.tokens for s in scores)
    total_oov = sum(s.oov for s in scores)
    total_ppl = float(10 ** (-total_lp / total_tokens)) if total_tokens else float("nan")
    if args.json:
        out = {"lines": [{"line": s.line_number, "log10_prob": s.log10_prob, "tokens": s.tokens, "oov": s.oov,
                          "perplexity": s.perplexity,
                          **({"word_log10": s.word_log10.tolist()} if args.per_word else {})} for s in scores],
               "total": {"log10_prob": total_lp, "tokens": total_tokens, "oov": total_oov,
                         "perplexity": total_ppl, "skipped": [n for n, _ in bad]}}
        print(json.dumps(out))
        return 0
    for s in scores:
        if args.per_word:
            words = lines[s.line_number - 1].split() + ["<p>"]
            print("\t".join(f"{w}={p:.4f}" for w, p in zip(words, s.word_log10, strict=True)))
        print(f"line {s.line_number}\tlog10 {s.log10_prob:.4f}\ttokens {s.tokens}\tOOV {s.oov}\tppl {s.perplexity:.2f}")
    print(f"Total\tlog10 {total_lp:.4f}\ttokens {total_tokens}\tOOV {total_oov}\tppl {total_ppl:.2f}"
          + (f"\tskipped {len(bad)}" if bad else ""))
    return 0


def _corpus_for_model(args: argparse.Namespace, model_path: str):
    """--corpus (with its options) if given; else a neural run's own corpus; else Brown."""
    from nnlm.data.corpus import load_corpus

    if args.corpus is None and (Path(model_path) / "run.json").is_file():
        from nnlm.neural.checkpoint import read_run

        run, _, _ = read_run(Path(model_path))
        return load_corpus(run["corpus"], min_count=run["min_count"], max_vocab=run["max_vocab"],
                           vocab_from=run["vocab_from"])
    args.corpus = args.corpus or "brown"
    return _load_corpus(args)


def _score_split(args: argparse.Namespace, model) -> int:
    """Score a corpus split as one stream: the very function `nnlm eval` and `nnlm ngram` use."""
    from nnlm.lm import perplexity_from_log_probs, split_log_probs
    from nnlm.use import LOG10_E

    if args.file is not None:
        raise NnlmError("give a FILE or --split, not both")
    if args.oov_vector or args.independent or args.skip_bad:
        raise NnlmError("--oov-vector, --independent and --skip-bad apply to text files, not to --split")
    corpus = _corpus_for_model(args, args.model)
    if model.vocab.fingerprint != corpus.vocab.fingerprint and Path(args.model).is_file():
        from nnlm.ngram.arpa import read_arpa

        model = read_arpa(args.model, corpus.vocab)  # an ARPA file: its words mapped onto the corpus's ids
    log_probs = split_log_probs(model, corpus, args.split)
    ids = corpus.split(args.split)
    word_log10 = log_probs * LOG10_E
    total = {"corpus": corpus.name, "split": args.split, "log10_prob": float(word_log10.sum()),
             "tokens": len(ids), "oov": int((ids == corpus.vocab.unk_id).sum()),
             "perplexity": perplexity_from_log_probs(log_probs)}
    if args.json:
        print(json.dumps(total | ({"word_log10": word_log10.tolist()} if args.per_word else {})))
        return 0
    if args.per_word:
        print("\n".join(f"{w}\t{p:.4f}" for w, p in zip(corpus.vocab.decode(ids), word_log10, strict=True)))
    print(f"Total {corpus.name} {args.split}\tlog10 {total['log10_prob']:.4f}\ttokens {total['tokens']}"
          f"\tOOV {total['oov']}\tppl {total['perplexity']:.2f}")
    return 0


def cmd_neighbors(args: argparse.Namespace) -> int:
    from nnlm.loading import load
    from nnlm.neural.features import neighbors

    ranked = neighbors(load(args.model), args.word, args.k)
    _emit(args, {"word": args.word, "neighbors": [{"word": w, "cosine": c} for w, c in ranked]},
          [f"{c:+.4f}  {w}" for w, c in ranked])
    return 0


def cmd_map(args: argparse.Namespace) -> int:
    from nnlm.io import check_output
    from nnlm.loading import load
    from nnlm.neural.features import draw_map, most_frequent_words, pca_2d, read_word_list, word_features

    check_output(args.out)
    model = load(args.model)
    features = word_features(model)
    words = read_word_list(args.words, model.vocab) if args.words else most_frequent_words(model.vocab, args.top)
    coords = pca_2d(features[[model.vocab.id(w) for w in words]])
    draw_map(args.out, words, coords, f"word features of {Path(args.model).name} (PCA, {len(words)} words)")
    print(f"map of {len(words)} words written to {args.out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from nnlm.io import check_output
    from nnlm.loading import load
    from nnlm.neural.features import word_features, write_embeddings
    from nnlm.ngram.arpa import write_arpa
    from nnlm.ngram.backoff import BackoffModel

    if not (args.embeddings or args.arpa):
        raise NnlmError("nothing to export: give --embeddings FILE and/or --arpa FILE")
    for target in (args.embeddings, args.arpa):
        if target:
            check_output(target)
    model = load(args.model)
    if args.embeddings:
        word_features(model)  # refuse a model without features before writing anything
    if args.arpa and not isinstance(model, BackoffModel):
        kind = getattr(model, "kind", type(model).__name__)
        raise NnlmError(f"only back-off n-gram models (kn, or a loaded ARPA file) can be written as ARPA, not {kind}")
    if args.embeddings:
        count = write_embeddings(model, args.embeddings)
        print(f"{count} word vectors written to {args.embeddings} (word2vec text format)")
    if args.arpa:
        write_arpa(model, args.arpa)
        print(f"order-{model.order} ARPA model written to {args.arpa}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    import itertools

    from nnlm.loading import load
    from nnlm.use import render_stream, sample

    model = load(args.model)
    prompt = args.prompt.split()
    if prompt and all(w not in model.vocab for w in prompt):
        raise NnlmError("every word of the prompt is outside the model's vocabulary")
    tokens = sample(model, prompt, args.tokens, args.temperature, args.top_k, args.seed)
    for i, piece in enumerate(render_stream(itertools.chain(prompt, tokens))):  # printed as it is drawn
        sys.stdout.write(piece)
        if i % 64 == 63:
            sys.stdout.flush()
    print()
    return 0


def cmd_next(args: argparse.Namespace) -> int:
    from nnlm.loading import load
    from nnlm.use import next_words

    model = load(args.model)
    ranked = next_words(model, args.context.split(), args.k)
    _emit(args, {"context": args.context, "next": [{"word": w, "p": p} for w, p in ranked]},
          [f"{p:.5f}  {w}" for w, p in ranked])
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    from nnlm.lm import perplexity_from_log_probs
    from nnlm.loading import load_or_build
    from nnlm.mixture import mix_on_corpus

    corpus = _load_corpus(args)
    components = [load_or_build(spec, corpus) for spec in args.models]
    _govern(args)
    if args.weights in ("em", "em-buckets"):
        mode, fixed = args.weights, None
    else:
        mode = "fixed"
        try:
            fixed = [float(w) for w in args.weights.split(",")]
        except ValueError:
            raise NnlmError(f"--weights must be em, em-buckets or numbers like 0.5,0.5; got {args.weights!r}") from None
    fitted = mix_on_corpus(components, corpus, mode, fixed)
    ppl = {s: perplexity_from_log_probs(lp) for s, lp in fitted.split_log_probs.items()}
    weights = fitted.model.weights
    result = {"corpus": corpus.name, "models": args.models, "mode": mode, "weights": weights.tolist(),
              "perplexity": ppl, "em_log_likelihood": fitted.em.log_likelihood if fitted.em else None}
    shown = weights[0] if len(weights) == 1 else weights.mean(axis=0)
    lines = [f"mixture of {', '.join(args.models)} ({mode}) on {corpus.name}",
             "  weights " + ", ".join(f"{w:.3f}" for w in shown) + (" (mean over buckets)" if len(weights) > 1 else ""),
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items())]
    _emit(args, result, lines)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from nnlm.neural.train import RUN_DEFAULTS, SESSION_DEFAULTS, train

    names = list(RUN_DEFAULTS) + list(SESSION_DEFAULTS)
    requested = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    from nnlm.neural.distributed import under_torchrun

    if getattr(args, "parallel", None) not in (None, "none") or getattr(args, "workers", None) is not None \
            or under_torchrun():
        from nnlm.neural.parallel import train_parallel

        state = train_parallel(args.out, requested, args.parallel or "none", args.workers, resume=args.resume,
                               progress=not args.no_progress, timeout=args.dist_timeout)
        if state is None:  # a torchrun rank other than 0: rank 0 reports
            return 0
    else:
        state = train(args.out, requested, resume=args.resume, progress=not args.no_progress)
    if args.json:
        print(json.dumps({k: state[k] for k in ("epoch", "step", "best", "finished", "stop_reason", "history")}))
    return 0


def _govern(args: argparse.Namespace, device: str = "cpu"):
    """This command's torch threads: --threads, else the cores other processes leave free now,
    re-checked while scoring (nnlm.threads). Nothing when no model loaded torch (n-gram models)."""
    requested = getattr(args, "threads", None)
    if requested is not None and requested < 1:
        raise NnlmError(f"--threads must be at least 1, got {requested}")
    if "torch" not in sys.modules:
        return None
    from nnlm.threads import govern

    return govern(requested, device)


SPLITS = ("train", "valid", "test")


def _eval_splits(text: str) -> list[str]:
    """'valid,test' -> ['valid', 'test'], in the order given, each once."""
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    wrong = [n for n in names if n not in SPLITS]
    if wrong or not names:
        raise NnlmError(f"--split takes a comma-separated list of train, valid, test; got {text!r}")
    return names


def cmd_eval(args: argparse.Namespace) -> int:
    from nnlm.lm import perplexity
    from nnlm.neural.checkpoint import load_neural, read_run
    from nnlm.neural.train import pick_device

    splits = _eval_splits(args.split)
    device = pick_device(args.device)
    governor = _govern(args, device)
    lm = load_neural(args.run, device=device)
    run, _, config = read_run(Path(args.run))
    from nnlm.data.corpus import load_corpus

    corpus = load_corpus(run["corpus"], min_count=run["min_count"], max_vocab=run["max_vocab"],
                         vocab_from=run["vocab_from"])
    started = time.perf_counter()
    ppl = {s: perplexity(lm, corpus, s) for s in splits}
    seconds = time.perf_counter() - started
    result = {"run": str(args.run), "corpus": corpus.name, "preset": run["preset"], "model": config.to_dict(),
              "parameters": config.parameter_count(), "perplexity": ppl, "seconds": round(seconds, 2),
              "threads": governor.describe()}
    tokens = sum(len(corpus.split(s)) for s in splits)
    lines = [f"{run['preset']} (n={config.order}, h={config.hidden}, m={config.features}, direct={config.direct}) "
             f"on {corpus.name}, |V| = {len(corpus.vocab):,}",
             "  " + "  ".join(f"{s} {p:,.2f}" for s, p in ppl.items()),
             f"  {tokens:,} tokens scored in {seconds:.1f} s, {governor.describe()}"]
    if getattr(args, "log_z", False) or run.get("loss", "full") != "full":  # self-normalization: how near 0 log Z is
        from nnlm.neural.sampled import log_partition_stats

        mean, std = log_partition_stats(lm, corpus, "valid")
        result["valid_log_z"] = {"mean": mean, "std": std}
        lines.append(f"  valid log Z: mean {mean:.3f}, std {std:.3f} (0 = self-normalized: "
                     "`nnlm score --unnormalized` is then close to exact)")
    _emit(args, result, lines)
    return 0


THREADS_HELP = "torch CPU threads (default: the cores other processes leave free, re-checked as the load changes)"


def _add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="train a neural model (Bengio et al. 2003) into a run directory")
    _add_corpus_options(p)
    p.set_defaults(corpus=None)
    p.add_argument("--out", required=True, help="run directory (weights, config, vocabulary, checkpoints, metrics)")
    p.add_argument("--preset", help="mlp1 ... mlp10 (Table 1; default mlp1)")
    p.add_argument("--order", type=T.int_range(2, 64), help="n, overriding the preset")
    p.add_argument("--hidden", type=T.int_range(0, 100_000), help="h (0 = no hidden layer), overriding the preset")
    p.add_argument("--features", type=T.int_range(1, 100_000), help="m, overriding the preset")
    p.add_argument("--direct", action=argparse.BooleanOptionalAction, default=None,
                   help="direct connections W, overriding the preset")
    p.add_argument("--recipe", help="adaptive, adaptive-sampled, paper, modern or sampled (default: adaptive with "
                                    "--loss full, sampled with --loss sampled / nce)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 output layer and softmax in training (default: modern recipe on bf16 hardware)")
    p.add_argument("--epochs", type=T.int_range(1, 1_000_000), help="stop after this many epochs (default 30)")
    p.add_argument("--time-budget", type=T.minutes, metavar="MINUTES", help="stop after this much training time")
    p.add_argument("--batch-size", type=T.int_range(1, 1 << 24), help="examples per update (default 256)")
    p.add_argument("--lr", type=T.learning_rate, help="learning rate (default: the recipe's)")
    p.add_argument("--patience", type=T.count,
                   help="early stopping: epochs without a better valid perplexity (default 3)")
    g = p.add_argument_group("recipe fields (default: the recipe's; stored in run.json, kept by --resume)")
    g.add_argument("--lr-schedule", choices=("epoch", "plateau", "constant"),
                   help="epoch: lr x --lr-factor after every epoch; plateau: x --lr-factor when validation stalls; "
                        "constant (the paper recipe has its own eps_t)")
    g.add_argument("--lr-factor", type=T.float_range(0.0, 1.0, lo_open=True), help="the schedule's factor, in (0, 1]")
    g.add_argument("--plateau-patience", type=T.count,
                   help="plateau: epochs without a --min-improvement better validation before the rate drops")
    g.add_argument("--weight-decay", type=T.float_range(0.0, 1e3), help="(decoupled) weight decay on C, H, U, W")
    g.add_argument("--dropout", type=T.float_range(0.0, 1.0), help="dropout on x and on the hidden layer, in [0, 1)")
    g.add_argument("--min-improvement", type=T.float_range(0.0, 1.0), metavar="FRACTION",
                   help="an epoch counts as better only if valid perplexity < best x (1 - FRACTION)")
    p.add_argument("--seed", type=T.seed, help="random seed (default 0)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="default auto: CUDA when present")
    p.add_argument("--checkpoint-minutes", type=T.minutes, help="checkpoint every this many minutes (default 5)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--parallel", choices=("none", "hogwild", "ddp", "vocab"),
                   help="hogwild: asynchronous shared-memory workers; ddp: synchronous data-parallel; vocab: "
                        "output layer split by words over the processes (under torchrun, or --workers local ones)")
    p.add_argument("--workers", type=T.procs, help="local processes for --parallel (default 2; torchrun sets its own)")
    p.add_argument("--dist-timeout", type=T.seconds, default=600.0, metavar="SECONDS",
                   help="ddp/vocab: how long a rank waits for the others before stopping with an error (default 600)")
    p.add_argument("--loss", choices=("full", "sampled", "nce"),
                   help="output layer in training: full softmax (default), sampled (importance-sampled softmax) "
                        "or nce (noise-contrastive estimation); validation and eval are always exact")
    p.add_argument("--samples", type=T.positive_int, metavar="K",
                   help="--loss sampled/nce: words drawn per batch from unigram^0.75 (default 128)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final state as one JSON object")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="valid/test (or train) perplexity of a trained neural run")
    p.add_argument("run", help="run directory written by `nnlm train`")
    p.add_argument("--split", default="valid,test",
                   help="comma-separated splits to score (default valid,test; train,valid,test adds the long "
                        "train split)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    p.add_argument("--log-z", action="store_true",
                   help="also report mean and std of log Z on valid (always done for --loss sampled/nce runs)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)


def cmd_tune(args: argparse.Namespace) -> int:
    from nnlm.neural.tune import report, tune

    names = ("corpus", "min_count", "max_vocab", "vocab_from", "preset", "order", "hidden", "features", "direct",
             "loss", "samples", "batch_size", "seed", "epochs", "threads")
    requested = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    record = tune(args.out, requested, args.minutes, args.trials)
    lines = report(record)
    _emit(args, record, lines)
    return 0


def _add_tune_parser(sub) -> None:
    p = sub.add_parser("tune", help="search lr / weight decay / dropout on validation within a time budget")
    _add_corpus_options(p)
    p.add_argument("--out", required=True, help="directory of the search: tune.json and one run per trial")
    p.add_argument("--minutes", type=T.minutes, required=True, help="total training time, shared equally by the trials")
    p.add_argument("--trials", type=T.int_range(1, 1000), default=6,
                   help="trials: the default recipe, plain Adam, then a grid (6)")
    for flag, kind, text in (("--preset", str, "mlp1 ... mlp10"), ("--order", T.int_range(2, 64), "n"),
                             ("--hidden", T.int_range(0, 100_000), "h"), ("--features", T.int_range(1, 100_000), "m"),
                             ("--batch-size", T.int_range(1, 1 << 24), "examples per update"),
                             ("--seed", T.seed, "random seed (also orders the grid)"),
                             ("--epochs", T.int_range(1, 1_000_000), "epochs per trial at most (default 30)"),
                             ("--threads", T.threads, THREADS_HELP),
                             ("--samples", T.positive_int, "K for --loss sampled/nce")):
        p.add_argument(flag, type=kind, help=text)
    p.add_argument("--direct", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--loss", choices=("full", "sampled", "nce"))
    p.add_argument("--json", action="store_true", help="print tune.json")
    p.set_defaults(func=cmd_tune)


def cmd_reproduce(args: argparse.Namespace) -> int:
    import shlex

    from nnlm.reproduce import report_only, reproduce

    if args.report_only:
        print(f"report written to {report_only(args.out)}")
        return 0
    command = "nnlm " + " ".join(shlex.quote(a) for a in (args.argv or sys.argv[1:]))
    report = reproduce(args.corpus, args.out, args.budget_minutes, args.models, args.full, command,
                       progress=not args.no_progress, threads=args.threads, device=args.device, loss=args.loss,
                       samples=args.samples, hogwild=args.hogwild)
    print(f"report written to {report}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nnlm", description="Neural and n-gram language models (Bengio et al. 2003).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("stats", help="split sizes, vocabulary size, <unk> counts")
    _add_corpus_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("ngram", help="build a count-based model and print its perplexities")
    _add_corpus_options(p)
    p.add_argument("--kind", default="addone",
                   help="uniform, addone, kn (modified Kneser-Ney), interpolated (deleted-interpolation trigram), "
                        "class (class-based back-off)")
    p.add_argument("--classes", type=T.positive_int, default=None, metavar="C",
                   help="--kind class: number of word classes (default 500)")
    p.add_argument("--order", type=T.ngram_order, default=None, help="n-gram order (default: the kind's own)")
    p.add_argument("--memory", type=T.positive_float, metavar="GB",
                   help="--kind kn: count out of core within about GB of memory (chunks sorted on disk and "
                        "merged, like lmplz -S); the same model")
    p.add_argument("--save", metavar="DIR", help="save the model to DIR (loads again without retraining)")
    p.add_argument("--arpa", metavar="FILE", help="also write the model as an ARPA file (back-off models: kn)")
    p.add_argument("--load", metavar="DIR", help="evaluate a model saved with --save instead of building one")
    p.add_argument("--load-arpa", metavar="FILE",
                   help="evaluate an ARPA file on the corpus (its words must be the corpus vocabulary)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_ngram)

    _add_train_parser(sub)
    _add_tune_parser(sub)

    p = sub.add_parser("mix", help="mix models (fixed weights, or EM on validation) and print perplexities")
    p.add_argument("models", nargs="+", help="saved models or specs like kn:5, interpolated:3")
    p.add_argument("--weights", default="em", help="comma-separated fixed weights (e.g. 0.5,0.5), em, or em-buckets")
    _add_corpus_options(p)
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP + "; neural components only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_mix)

    p = sub.add_parser("reproduce", help="Table 1 of the paper on Brown: n-gram rows, MLPs, mixtures, report")
    p.add_argument("--corpus", default="brown", help="'brown' (default) or a text directory")
    p.add_argument("--out", required=True, help="report directory (README.md, plots, results.json, runs/)")
    p.add_argument("--budget-minutes", type=T.minutes, default=None,
                   help="wall-clock budget for the whole call (default 30); rows it shortens are marked")
    p.add_argument("--models", default=None, help="nets to train, e.g. mlp1,mlp3 (default mlp1,mlp3; --full: all)")
    p.add_argument("--full", action="store_true", help="all five nets, each trained until early stopping")
    p.add_argument("--loss", default="sampled", choices=("sampled", "nce", "full"),
                   help="the nets' output layer in training (default sampled: faster, and lower perplexity on Brown "
                        "than the full softmax; scoring is always exact)")
    p.add_argument("--samples", type=T.positive_int, default=None, help="K for --loss sampled / nce (default 128)")
    p.add_argument("--hogwild", type=T.procs, default=None, metavar="WORKERS",
                   help="train each net with this many asynchronous Hogwild workers, one thread each (about "
                        "WORKERS x a one-thread process on as many cores, less against torch's default "
                        "threads; runs are no longer reproducible bit for bit)")
    p.add_argument("--threads", type=T.threads, default=None, help=THREADS_HELP)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite OUT/README.md and its plots from OUT/results.json; build and train nothing")
    p.set_defaults(func=cmd_reproduce, argv=None)

    p = sub.add_parser("score", help="score text, one line (paragraph) at a time, like KenLM's query")
    p.add_argument("model", help="a saved model (directory or file)")
    p.add_argument("file", nargs="?", default=None, help="UTF-8 text, one paragraph per line (default: stdin)")
    p.add_argument("--per-word", action="store_true", help="also print each word's log10 probability")
    p.add_argument("--independent", action="store_true",
                   help="score each line from the start of a text instead of after the previous line")
    p.add_argument("--skip-bad", action="store_true", help="skip (and report) empty or undecodable lines")
    p.add_argument("--oov-vector", action="store_true",
                   help="neural models: words outside V enter later contexts with the paper's feature vector "
                        "(sum_i C(i) P(i | context)) instead of <unk>'s")
    p.add_argument("--split", choices=("train", "valid", "test"), default=None,
                   help="score this split of --corpus as one stream, exactly as `nnlm eval` does")
    p.add_argument("--unnormalized", action="store_true",
                   help="neural models: score y[word] without the softmax sum (approximate; for self-normalized "
                        "models trained with --loss sampled or nce, see `nnlm eval`'s log Z)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_corpus_options(p)
    p.set_defaults(func=cmd_score, corpus=None)

    p = sub.add_parser("generate", help="sample text from a model")
    p.add_argument("model")
    p.add_argument("--prompt", default="", help="words to continue")
    p.add_argument("--tokens", type=T.int_range(1, 10**9), default=50)
    p.add_argument("--temperature", type=T.float_range(0.0, 1e6, lo_open=True), default=1.0)
    p.add_argument("--top-k", type=T.positive_int, default=None)
    p.add_argument("--seed", type=T.seed, default=0)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("next", help="the most likely next words after a context")
    p.add_argument("model")
    p.add_argument("context", help="the preceding words")
    p.add_argument("-k", type=T.positive_int, default=10)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_next)

    p = sub.add_parser("neighbors", help="nearest words in a neural model's feature space (cosine)")
    p.add_argument("model", help="a neural run directory")
    p.add_argument("word")
    p.add_argument("-k", type=T.positive_int, default=10)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_neighbors)

    p = sub.add_parser("map", help="a labeled 2-D map (PCA) of a neural model's word features, as PNG")
    p.add_argument("model", help="a neural run directory")
    p.add_argument("--out", required=True, help="PNG file to write")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--top", type=T.positive_int, default=100, help="the N most frequent words (default 100)")
    which.add_argument("--words", metavar="FILE", help="the words listed in FILE (whitespace-separated)")
    p.set_defaults(func=cmd_map)

    p = sub.add_parser("export", help="write word features (word2vec text) or a back-off model (ARPA)")
    p.add_argument("model")
    p.add_argument("--embeddings", metavar="FILE", help="neural models: word feature vectors, word2vec text format")
    p.add_argument("--arpa", metavar="FILE", help="back-off n-gram models: an ARPA file")
    p.set_defaults(func=cmd_export)
    return parser


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0][:200] if text else "") or type(exc).__name__


def _report_unexpected(exc: Exception) -> int:
    """An exception no check turned into an NnlmError: out of memory and OS errors the user can act on
    are one line, exit 2; anything else is an internal error, exit 1, with the trace kept in a log file."""
    import errno
    import traceback

    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "not enough memory" in str(exc):
        print(f"nnlm: error: out of memory ({_first_line(exc)}): use smaller options or a machine with more memory",
              file=sys.stderr)
        return 2
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        reason = "no space left on device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
        print(f"nnlm: error: cannot access{where}: {reason or _first_line(exc)}", file=sys.stderr)
        return 2
    trace = "".join(traceback.format_exception(exc))
    try:
        import tempfile

        fd, log = tempfile.mkstemp(prefix="nnlm-crash-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"nnlm {' '.join(sys.argv[1:])}\n{trace}")
        where = f"the full trace is in {log}"
    except OSError:
        where = "run again with NNLM_DEBUG=1 to see the full trace"
    print(f"nnlm: internal error: {type(exc).__name__}: {_first_line(exc)} ({where}; please report it)",
          file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "file", "") is None and len(extra) == 1 and not extra[0].startswith("-"):
        args.file = extra[0]  # `nnlm score MODEL --per-word FILE`: argparse binds an optional positional early
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "argv", False) is None and argv is not None:
        args.argv = list(argv)
    try:
        code = args.func(args)
    except NnlmError as exc:
        print(f"nnlm: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("nnlm: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # never a traceback: one line, the trace in a log file (NNLM_DEBUG=1: on stderr)
        if os.environ.get("NNLM_DEBUG") == "1":
            raise
        code = _report_unexpected(exc)
    if args.func is cmd_train:  # a torchrun rank ends here, without interpreter finalization
        from nnlm.neural.distributed import exit_torchrun_rank

        exit_torchrun_rank(code)
    return code
