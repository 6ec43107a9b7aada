"""Large generated corpora for benchmarks/scale.py: Zipf-distributed words with bigram structure.

The source, chosen so that its n-gram statistics look like text's (a few very common words, a long
tail, and histories that make some continuations far likelier than others) while being cheap to draw:
  - W word types `w0 .. w{W-1}`; the unigram law is Zipf, P(rank r) proportional to 1 / (r + 1)^s;
  - every word v has K successors succ[v, 0..K-1], drawn once from the unigram law;
  - a line starts with a unigram draw; after word v the next word is succ[v, j] with probability
    `follow` (j drawn with P(j) proportional to 1 / (j + 1)), else a fresh unigram draw;
  - line lengths are 1 + Poisson(mean_length - 1); each line is one paragraph to the corpus reader.
Because successors are drawn from the unigram law, word frequencies stay Zipf-like; the successor
tables make distinct n-grams grow more slowly than for independent words, as in real text.

Lines are drawn a block at a time (all lines of a block advance one position per NumPy step, no
loop over tokens) and written as they are drawn, so memory does not grow with the corpus.

    python benchmarks/scale_corpus.py OUT_DIR --tokens 14000000 [--valid 1000000] [--seed 0] [--words 18000]

--words sets the lexicon: 18,000 (the default) keeps AP News' capped vocabulary; a lexicon of 120,000
gives 8M tokens a natural vocabulary of over 100k words at min-count 2 (the Zipf tail's rarest word is
still expected ~5 times), the size a real 8.9M-token text has before any cap (issue 32).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TextIO

import numpy as np

LINES_PER_BLOCK = 100_000


class ZipfBigramSource:
    """The generator described in the module docstring, fixed by its seed."""

    def __init__(self, words: int = 18_000, exponent: float = 1.0, successors: int = 64,
                 follow: float = 0.6, mean_length: float = 20.0, seed: int = 0) -> None:
        rng = np.random.default_rng([seed, 0])
        self.words, self.follow, self.mean_length = words, follow, mean_length
        unigram = 1.0 / np.arange(1, words + 1) ** exponent
        self.unigram_cdf = np.cumsum(unigram / unigram.sum())
        self.successor = np.searchsorted(self.unigram_cdf, rng.random((words, successors)), side="right")
        self.successor = np.minimum(self.successor, words - 1)
        choice = 1.0 / np.arange(1, successors + 1)
        self.choice_cdf = np.cumsum(choice / choice.sum())
        self.names = np.array([f"w{i}" for i in range(words)] + ["\n"], dtype=object)

    def _unigram(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.minimum(np.searchsorted(self.unigram_cdf, rng.random(n), side="right"), self.words - 1)

    def block(self, rng: np.random.Generator, lines: int) -> np.ndarray:
        """`lines` lines as word ids, each followed by -1 (end of line), flat."""
        lengths = 1 + rng.poisson(self.mean_length - 1, lines)
        width = int(lengths.max()) + 1
        grid = np.full((lines, width), -1, dtype=np.int64)
        word = self._unigram(rng, lines)
        grid[:, 0] = word
        for col in range(1, width):
            live = np.flatnonzero(lengths > col)
            if len(live) == 0:
                break
            prev = grid[live, col - 1]
            pick = np.minimum(np.searchsorted(self.choice_cdf, rng.random(len(live)), side="right"),
                              self.successor.shape[1] - 1)
            follows = rng.random(len(live)) < self.follow
            grid[live, col] = np.where(follows, self.successor[prev, pick], self._unigram(rng, len(live)))
        keep = np.arange(width)[None, :] <= lengths[:, None]  # the words and one -1 after them
        return grid[keep]

    def write(self, path: Path, tokens: int, seed: int) -> int:
        """Write lines to `path` until at least `tokens` tokens (words and line ends); returns the count."""
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            written = self.write_to(fh, tokens, seed)
        os.replace(tmp, path)
        return written

    def write_to(self, fh: TextIO, tokens: int, seed: int) -> int:
        """`write` into an open text stream (e.g. a pipe into gzip: benchmarks/corpus_file.py)."""
        rng = np.random.default_rng([seed, 1])
        written = 0
        while written < tokens:
            ids = self.block(rng, LINES_PER_BLOCK)
            ends = np.flatnonzero(ids < 0)
            need = tokens - written  # stop at the first line end that reaches the target
            cut = int(ends[min(np.searchsorted(ends, need - 1), len(ends) - 1)]) + 1
            ids = ids[:cut]
            fh.write(" ".join(self.names[ids].tolist()))
            written += len(ids)
        return written


def write_scale_corpus(out: Path, tokens: int, valid: int, seed: int = 0, words: int = 18_000) -> dict:
    """train.txt of about `tokens` tokens, valid.txt and test.txt of about `valid`, and source.json."""
    out.mkdir(parents=True, exist_ok=True)
    source = ZipfBigramSource(words=words, seed=seed)
    sizes = {split: source.write(out / f"{split}.txt", n, seed * 3 + i)
             for i, (split, n) in enumerate((("train", tokens), ("valid", valid), ("test", valid)))}
    info = {"source": "zipf-bigram (benchmarks/scale_corpus.py)", "words": words, "seed": seed, "tokens": sizes,
            "follow": source.follow, "mean_length": source.mean_length, "successors": source.successor.shape[1]}
    (out / "source.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--valid", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--words", type=int, default=18_000, help="word types of the Zipf lexicon (default 18000)")
    args = ap.parse_args()
    print(json.dumps(write_scale_corpus(args.out, args.tokens, args.valid, args.seed, args.words)))


if __name__ == "__main__":
    main()
