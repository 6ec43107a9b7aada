"""`nnlm neighbors` and `nnlm map`: a neural model's word feature space, as a list or a picture."""
from __future__ import annotations

import argparse
from pathlib import Path

from nnlm.cli import arg_types as T
from nnlm.cli.common import add_json_option, emit


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("neighbors", help="nearest words in a neural model's feature space (cosine)")
    p.add_argument("model", help="a neural run directory")
    p.add_argument("word", help="the word whose neighbors to list")
    p.add_argument("-k", type=T.positive_int, default=10, help="how many neighbors to list (default 10)")
    add_json_option(p)
    p.set_defaults(handler=run_neighbors)

    p = sub.add_parser("map", help="a labeled 2-D map (PCA) of a neural model's word features, as PNG")
    p.add_argument("model", help="a neural run directory")
    p.add_argument("--out", required=True, help="PNG file to write (its directory must exist)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--top", type=T.positive_int, default=100, help="the N most frequent words (default 100)")
    which.add_argument("--words", metavar="FILE",
                       help="the words listed in FILE (whitespace-separated) (default: --top)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing file nnlm did not write (default: refused); never an input")
    p.set_defaults(handler=run_map)


def run_neighbors(args: argparse.Namespace) -> int:
    from nnlm.loading import load
    from nnlm.neural.net.features import neighbors

    ranked = neighbors(load(args.model), args.word, args.k)
    emit(args, {"word": args.word, "neighbors": [{"word": w, "cosine": c} for w, c in ranked]},
         [f"{c:+.4f}  {w}" for w, c in ranked])
    return 0


def run_map(args: argparse.Namespace) -> int:
    from nnlm.io import require_parent
    from nnlm.loading import load
    from nnlm.neural.net.features import draw_map, most_frequent_words, pca_2d, read_word_list, word_features
    from nnlm.output_guard import guard_outputs

    guard_outputs(files=[("--out", args.out)], inputs=[args.model, args.words], force=args.force)
    require_parent(args.out)
    model = load(args.model)
    features = word_features(model)
    words = read_word_list(args.words, model.vocab) if args.words else most_frequent_words(model.vocab, args.top)
    coords = pca_2d(features[[model.vocab.id(w) for w in words]])
    draw_map(args.out, words, coords, f"word features of {Path(args.model).name} (PCA, {len(words)} words)")
    emit(args, {"map": args.out, "words": len(words)}, [f"map of {len(words)} words written to {args.out}"])
    return 0
