"""Speed of exchange word clustering: nnlm's vectorized pass vs a plain dict implementation.

Run from the repository root (about a minute on one core):
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/cluster_speed.py [--tokens N] [--classes C]

Both run one exchange pass over the first N tokens of Brown train, from the same starting
classes and visiting the words in the same order; the reference computes the gain of every
candidate class with dicts, the obvious way. They must end with the same classes. Then nnlm
clusters all of Brown train into 500 classes (the paper's best c), as `nnlm ngram --kind class` does.
"""
from __future__ import annotations

import argparse
import math
import time
from collections import Counter, defaultdict

import numpy as np

from nnlm.data.corpus import load_corpus
from nnlm.ngram.clusters import _initial_classes, exchange_clusters


def xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


def plain_exchange_pass(train: list[int], classes: dict[int, int], k: int, order: list[int]) -> dict[int, int]:
    """One pass of the exchange algorithm with dicts: for each word, try every class."""
    succ: dict[int, dict[int, int]] = defaultdict(dict)
    pred: dict[int, dict[int, int]] = defaultdict(dict)
    for (x, y), n in Counter(zip(train[:-1], train[1:], strict=True)).items():
        succ[x][y] = n
        pred[y][x] = n
    m: dict[tuple[int, int], float] = defaultdict(float)
    left: dict[int, float] = defaultdict(float)
    right: dict[int, float] = defaultdict(float)
    for x, row in succ.items():
        for y, n in row.items():
            m[classes[x], classes[y]] += n
            left[classes[x]] += n
            right[classes[y]] += n
    size = Counter(classes.values())
    for w in order:
        a = classes[w]
        if size[a] == 1:
            continue
        r: dict[int, float] = defaultdict(float)
        left_of: dict[int, float] = defaultdict(float)
        for y, n in succ[w].items():
            if y != w:
                r[classes[y]] += n
        for x, n in pred[w].items():
            if x != w:
                left_of[classes[x]] += n
        s = succ[w].get(w, 0)
        lw, rw = sum(succ[w].values()), sum(pred[w].values())

        def move(b: int, sign: int, r=r, left_of=left_of, s=s, lw=lw, rw=rw) -> None:  # this iteration's w
            for d, n in r.items():
                m[b, d] += sign * n
            for d, n in left_of.items():
                m[d, b] += sign * n
            m[b, b] += sign * s
            left[b] += sign * lw
            right[b] += sign * rw

        move(a, -1)
        gains = []
        for b in range(k):
            change: dict[tuple[int, int], float] = defaultdict(float)
            for d, n in r.items():
                change[b, d] += n
            for d, n in left_of.items():
                change[d, b] += n
            change[b, b] += s
            g = sum(xlogx(m[cell] + n) - xlogx(m[cell]) for cell, n in change.items())
            g -= xlogx(left[b] + lw) - xlogx(left[b]) + xlogx(right[b] + rw) - xlogx(right[b])
            gains.append(g)
        b = max(range(k), key=lambda j: (gains[j], -j))
        if gains[b] <= gains[a] + 1e-9:
            b = a
        move(b, +1)
        if b != a:
            classes[w] = b
            size[a] -= 1
            size[b] += 1
    return classes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000, help="Brown train tokens for the comparison")
    parser.add_argument("--classes", type=int, default=100, help="classes for the comparison")
    args = parser.parse_args()
    corpus = load_corpus("brown")
    v = len(corpus.vocab)
    train = corpus.train[: args.tokens].astype(np.int64)
    freq = np.bincount(train, minlength=v)
    seen = np.flatnonzero(freq)
    k = min(args.classes, len(seen))
    start = _initial_classes(freq, seen, k)
    order = seen[np.argsort(-freq[seen], kind="stable")].tolist()

    t0 = time.perf_counter()
    ours = exchange_clusters(train, v, k, max_passes=1, progress=False)
    t1 = time.perf_counter()
    plain = plain_exchange_pass(train.tolist(), {w: int(start[w]) for w in seen.tolist()}, k, order)
    t2 = time.perf_counter()
    same = np.mean([ours.classes[w] == c for w, c in plain.items()])
    print(f"one exchange pass, {len(train):,} tokens, {len(seen):,} words, {k} classes:")
    print(f"  nnlm {t1 - t0:.2f} s   plain dicts {t2 - t1:.2f} s   speed-up {(t2 - t1) / (t1 - t0):.0f}x   "
          f"same class for {same:.2%} of the words")

    t0 = time.perf_counter()
    full = exchange_clusters(corpus.train, v, 500, progress=False)
    t1 = time.perf_counter()
    print(f"nnlm, all of Brown train ({len(corpus.train):,} tokens), 500 classes: {t1 - t0:.1f} s, "
          f"{len(full.moved)} passes, class-bigram train perplexity {math.exp(-full.log_likelihood[0]):.1f} "
          f"-> {math.exp(-full.log_likelihood[-1]):.1f}")


if __name__ == "__main__":
    main()
