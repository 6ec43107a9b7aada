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
loop over tokens) and written as they are drawn (benchmarks/generated_corpus.py), so memory does not grow with
the corpus.

    python benchmarks/scale_corpus.py OUT_DIR --tokens 14000000 [--valid 1000000] [--seed 0] [--words 18000]

--words sets the lexicon: 18,000 (the default) keeps AP News' capped vocabulary; a lexicon of 120,000
gives 8M tokens a natural vocabulary of over 100k words at min-count 2 (the Zipf tail's rarest word is
still expected ~5 times), the size a real 8.9M-token text has before any cap (issue 32).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_corpus import corpus_main, write_source_info, write_splits  # noqa: E402


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


def write_scale_corpus(out: Path, tokens: int, valid: int, seed: int = 0, words: int = 18_000) -> dict:
    """train.txt of about `tokens` tokens, valid.txt and test.txt of about `valid`, and source.json."""
    source = ZipfBigramSource(words=words, seed=seed)
    sizes = write_splits(out, source, tokens, valid, seed)
    info = {"source": "zipf-bigram (benchmarks/scale_corpus.py)", "words": words, "seed": seed, "tokens": sizes,
            "follow": source.follow, "mean_length": source.mean_length, "successors": source.successor.shape[1]}
    return write_source_info(out, info)


def main() -> None:
    corpus_main(__doc__, write_scale_corpus, valid=1_000_000, words=18_000)


if __name__ == "__main__":
    main()
