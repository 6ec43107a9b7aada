"""A generated text-like corpus with a natural vocabulary and a known limit (issue 47's must-show).

Why not benchmarks/scale_corpus.py's ZipfBigramSource: there every word's successors are drawn at random,
so words share nothing a net's word features could generalize from, and Kneser-Ney is near what can be
learned. Real text has both: word-specific collocations (which counts learn) and class regularities --
words that behave alike (which a net's shared features learn, why Bengio et al.'s nets beat KN). This
source mixes the two per token, and is still a generated source, not text:

  - W word types, Zipf unigram law P(rank r) proportional to 1 / (r + 1)^s; each word is put in one of
    C classes at random (so every class holds frequent and rare words);
  - a line is 1 + Poisson(mean_length - 1) words, ended by the corpus's paragraph marker;
  - each word, given the previous two (w1, w2), is drawn from a mixture:
      p_word:  a successor of w2, succ[w2, j] with P(j) proportional to 1 / (j + 1) (the collocations;
               at a line's first word, a unigram draw);
      p_class: a class trigram: the class c from next[class(w1), class(w2), j] (j as above; a line's start
               is a class of its own), then a word of c with P proportional to its unigram weight;
      the rest: a unigram draw.
Its exact probability of every token is known, so `limit` gives the source's own perplexity of a split
(markers included; a word outside the vocabulary of train at --min-count counts as `<unk>`, the source's
probability of all such words; the source conditions on the true previous words, so this is a lower
bound on the perplexity any model of the `<unk>`-mapped text can reach).
`limit_without_collocations` is the same source's perplexity with its successor tables unknown: each word
drawn as a collocation scored by its unigram weight (what the tables average to, as they are drawn from the
unigram law), the classes and the class trigram known exactly. A model whose only memory of word pairs goes
through low-rank features (a net's C, H, U, W) cannot learn 136k x 16 random pairs: at the default sizes this
is ~967, above Kneser-Ney 5-gram's ~874, so a net alone can beat KN5 here only with pair memory of its own;
what a net can add is the classes, which a mix with KN5 shows (docs/large-vocab.md).

    python benchmarks/text_like_corpus.py OUT_DIR --tokens 9000000 --valid 250000 [--words 140000]
"""
from __future__ import annotations

import copy
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_corpus import corpus_main, write_source_info, write_splits  # noqa: E402


def zipf_choice(k: int) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1)
    return w / w.sum()


class TextLikeSource:
    """The generator described in the module docstring, fixed by its seed."""

    def __init__(self, words: int = 140_000, classes: int = 64, exponent: float = 1.0, successors: int = 16,
                 next_classes: int = 4, p_word: float = 0.3, p_class: float = 0.6, mean_length: float = 20.0,
                 seed: int = 0) -> None:
        rng = np.random.default_rng([seed, 7])
        self.words, self.classes, self.mean_length = words, classes, mean_length
        self.p_word, self.p_class, self.p_uni = p_word, p_class, 1.0 - p_word - p_class
        uni = 1.0 / np.arange(1, words + 1) ** exponent
        self.uni = uni / uni.sum()
        self.uni_cdf = np.cumsum(self.uni)
        self.word_class = rng.integers(0, classes, words)
        self.class_mass = np.bincount(self.word_class, weights=self.uni, minlength=classes)
        # words ordered by class: class c's cdf lives in [c, c + 1), so one searchsorted draws in any class
        self.members = np.argsort(self.word_class, kind="stable")
        within = self.uni[self.members] / self.class_mass[self.word_class[self.members]]
        starts = np.searchsorted(self.word_class[self.members], np.arange(classes))
        cum = np.cumsum(within)
        self.member_cdf = self.word_class[self.members] + cum - np.repeat(
            np.concatenate([[0.0], cum[starts[1:] - 1]]), np.diff(np.append(starts, words)))
        self.succ_p = zipf_choice(successors)
        self.succ = self._unigram(rng, (words, successors))
        self.next_p = zipf_choice(next_classes)
        class_cdf = np.cumsum(self.class_mass)
        self.next = np.minimum(np.searchsorted(class_cdf, rng.random((classes + 1, classes + 1, next_classes))),
                               classes - 1)

    def _unigram(self, rng, shape) -> np.ndarray:
        return np.minimum(np.searchsorted(self.uni_cdf, rng.random(shape), side="right"), self.words - 1)

    def _pick(self, rng, p: np.ndarray, n: int) -> np.ndarray:
        return np.minimum(np.searchsorted(np.cumsum(p), rng.random(n), side="right"), len(p) - 1)

    def _draw(self, rng, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
        """One word per line given its previous two (-1: before the line's start)."""
        n = len(w1)
        kind = rng.random(n)
        out = self._unigram(rng, n)
        by_word = (kind < self.p_word) & (w2 >= 0)
        out[by_word] = self.succ[w2[by_word], self._pick(rng, self.succ_p, int(by_word.sum()))]
        by_class = (kind >= self.p_word) & (kind < self.p_word + self.p_class)
        c1 = np.where(w1 >= 0, self.word_class[np.maximum(w1, 0)], self.classes)[by_class]
        c2 = np.where(w2 >= 0, self.word_class[np.maximum(w2, 0)], self.classes)[by_class]
        c = self.next[c1, c2, self._pick(rng, self.next_p, len(c1))]
        pos = np.searchsorted(self.member_cdf, c + rng.random(len(c)), side="right")
        out[by_class] = self.members[np.minimum(pos, self.words - 1)]
        return out

    def block(self, rng, lines: int) -> np.ndarray:
        """`lines` lines as word ids, each followed by -1 (end of line), flat."""
        lengths = 1 + rng.poisson(self.mean_length - 1, lines)
        width = int(lengths.max()) + 1
        grid = np.full((lines, width), -1, dtype=np.int64)
        for col in range(width - 1):
            live = np.flatnonzero(lengths > col)
            w1 = grid[live, col - 2] if col >= 2 else np.full(len(live), -1)
            w2 = grid[live, col - 1] if col >= 1 else np.full(len(live), -1)
            grid[live, col] = self._draw(rng, w1, w2)
        keep = np.arange(width)[None, :] <= lengths[:, None]
        return grid[keep]

    def end_hazard(self, t: np.ndarray) -> np.ndarray:
        """P(the line ends after its t-th word | it has t words), t >= 1: L = 1 + Poisson(mu)."""
        mu = self.mean_length - 1
        top = int(t.max()) + 2
        pmf = np.array([math.exp(k * math.log(mu) - mu - math.lgamma(k + 1)) for k in range(top)])
        at_least = 1.0 - np.concatenate([[0.0], np.cumsum(pmf)])  # P(X >= k)
        return pmf[t - 1] / np.maximum(at_least[t - 1], 1e-300)

    def word_probs(self, w1: np.ndarray, w2: np.ndarray, w: np.ndarray, known: np.ndarray) -> np.ndarray:
        """P(word w | previous two words w1, w2; the line goes on), -1 before a line's start; a word with
        known[w] False gets the probability of all such words (`<unk>`)."""
        oov = ~known
        unk_class = np.bincount(self.word_class, weights=self.uni * oov, minlength=self.classes) / self.class_mass
        c1 = np.where(w1 >= 0, self.word_class[np.maximum(w1, 0)], self.classes)
        c2 = np.where(w2 >= 0, self.word_class[np.maximum(w2, 0)], self.classes)
        nxt = self.next[c1, c2]  # (N, next_classes)
        cw = self.word_class[w]
        p_cls = np.where(known[w], ((nxt == cw[:, None]) @ self.next_p) * self.uni[w] / self.class_mass[cw],
                         unk_class[nxt] @ self.next_p)
        p_uni = np.where(known[w], self.uni[w], self.uni[oov].sum())
        succ = self.succ[np.maximum(w2, 0)]
        p_succ = np.where(known[w], (succ == w[:, None]) @ self.succ_p, oov[succ] @ self.succ_p)
        p_succ = np.where(w2 >= 0, p_succ, p_uni)
        return self.p_word * p_succ + self.p_class * p_cls + self.p_uni * p_uni

    def without_collocations(self) -> TextLikeSource:
        """This source with its collocation draws scored as unigram draws (see the module docstring)."""
        blind = copy.copy(self)
        blind.p_uni, blind.p_word = self.p_uni + self.p_word, 0.0
        return blind

    def limit(self, lines: list[list[int]], known: np.ndarray) -> float:
        """The source's perplexity of `lines` (word ids), a word with known[w] False scored as `<unk>`."""
        w1 = np.array([ln[i - 2] if i >= 2 else -1 for ln in lines for i in range(len(ln))])
        w2 = np.array([ln[i - 1] if i >= 1 else -1 for ln in lines for i in range(len(ln))])
        w = np.array([x for ln in lines for x in ln])
        t = np.array([i for ln in lines for i in range(len(ln))])
        p = self.word_probs(w1, w2, w, known)
        go_on = np.where(t >= 1, 1.0 - self.end_hazard(np.maximum(t, 1)), 1.0)
        lengths = np.array([len(ln) for ln in lines])
        ends = np.log(self.end_hazard(lengths))
        total = np.log(p * go_on).sum() + ends.sum()
        return float(math.exp(-total / (len(w) + len(lines))))


def read_lines(path: Path) -> list[list[int]]:
    return [[int(x[1:]) for x in line.split()] for line in path.read_text(encoding="utf-8").splitlines() if line]


def write_text_like_corpus(out: Path, tokens: int, valid: int, seed: int = 0, words: int = 140_000,
                           min_count: int = 2) -> dict:
    """train/valid/test.txt and source.json with the source's own perplexity of valid and test."""
    source = TextLikeSource(words=words, seed=seed)
    sizes = write_splits(out, source, tokens, valid, seed, tight=True)
    counts = Counter((out / "train.txt").read_text(encoding="utf-8").split())
    known = np.zeros(words, dtype=bool)
    known[[int(k[1:]) for k, c in counts.items() if c >= min_count]] = True
    info = {"source": "text-like (benchmarks/text_like_corpus.py)", "words": words, "seed": seed, "tokens": sizes,
            "vocabulary_at_min_count": {"min_count": min_count, "words": int(known.sum())},
            "classes": source.classes, "p_word": source.p_word, "p_class": source.p_class,
            "successors": len(source.succ_p), "next_classes": len(source.next_p), "mean_length": source.mean_length,
            "limit_perplexity": {}, "limit_without_collocations": {}}
    for split in ("valid", "test"):
        lines = read_lines(out / f"{split}.txt")
        info["limit_perplexity"][split] = round(source.limit(lines, known), 2)
        info["limit_without_collocations"][split] = round(source.without_collocations().limit(lines, known), 2)
    return write_source_info(out, info)


def main() -> None:
    corpus_main(__doc__, write_text_like_corpus, valid=250_000, words=140_000)


if __name__ == "__main__":
    main()
