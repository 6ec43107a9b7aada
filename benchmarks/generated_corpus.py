"""What the generated-corpus scripts share (scale_corpus.py, text_like_corpus.py): lines drawn a block at a time up
to a token count, written atomically, the three splits, source.json and the command line.

Each script then holds only its source: an object with `words` (its lexicon is w0 .. w{words-1}) and
`block(rng, lines)` (that many lines as word ids, flat, each line followed by -1). A source draws every line of a
block one position per NumPy step (no loop over tokens), and lines are written as they are drawn, so memory does
not grow with the corpus.
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TextIO

import numpy as np

LINES_PER_BLOCK = 100_000
SPLITS = ("train", "valid", "test")


class LineSource(Protocol):
    words: int

    def block(self, rng: np.random.Generator, lines: int) -> np.ndarray: ...


def write_lines_to(fh: TextIO, source: LineSource, tokens: int, seed: int, tight: bool = False) -> int:
    """Lines of `source` into an open text stream until at least `tokens` tokens (words and line ends), stopping
    at the first line end that reaches the count; returns the count. `tight`: line ends without the spaces
    around them (the text-like corpus); without it each line end stands between spaces, as the Zipf corpus's
    files always had it (the corpus reader splits on white space: both read the same)."""
    names = np.array([f"w{i}" for i in range(source.words)] + ["\n"], dtype=object)  # -1: the line end
    rng = np.random.default_rng([seed, 1])
    written = 0
    while written < tokens:
        ids = source.block(rng, LINES_PER_BLOCK)
        ends = np.flatnonzero(ids < 0)
        cut = int(ends[min(np.searchsorted(ends, tokens - written - 1), len(ends) - 1)]) + 1
        ids = ids[:cut]
        text = " ".join(names[ids].tolist())
        fh.write(text.replace(" \n ", "\n").replace(" \n", "\n") if tight else text)
        written += len(ids)
    return written


def write_lines(path: Path, source: LineSource, tokens: int, seed: int, tight: bool = False) -> int:
    """`write_lines_to` a file, through a temporary file renamed at the end."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        written = write_lines_to(fh, source, tokens, seed, tight)
    os.replace(tmp, path)
    return written


def write_splits(out: Path, source: LineSource, tokens: int, valid: int, seed: int,
                 tight: bool = False) -> dict[str, int]:
    """train.txt of about `tokens` tokens, valid.txt and test.txt of about `valid`, each from its own seed;
    the tokens each got."""
    out.mkdir(parents=True, exist_ok=True)
    return {split: write_lines(out / f"{split}.txt", source, n, seed * 3 + i, tight)
            for i, (split, n) in enumerate(zip(SPLITS, (tokens, valid, valid), strict=True))}


def write_source_info(out: Path, info: dict) -> dict:
    """source.json: what made the corpus."""
    (out / "source.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def corpus_main(doc: str, write: Callable[[Path, int, int, int, int], dict], valid: int, words: int) -> None:
    """The command line of a generator script: OUT_DIR --tokens N [--valid N] [--seed S] [--words W], then
    `write(out, tokens, valid, seed, words)`; prints what it returns as JSON."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--valid", type=int, default=valid)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--words", type=int, default=words, help=f"word types of the lexicon (default {words})")
    args = ap.parse_args()
    print(json.dumps(write(args.out, args.tokens, args.valid, args.seed, args.words)))
