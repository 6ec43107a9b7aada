"""Speed of exchange word clustering: nnlm's compiled moves vs the NumPy path and a plain dict implementation.

Run from the repository root (about 6 minutes on one core, nearly all of it the NumPy path):
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/cluster_speed.py [--tokens N] [--classes C]
        [--full 150 500 1000 2000] [--no-plain]

First, one exchange pass over the first N tokens of Brown train, from the same starting classes and
visiting the words in the same order; the plain reference computes the gain of every candidate class
with dicts, the obvious way. They must end with the same classes. Then all of Brown train clustered
into each of the --full class counts (Table 1's class rows), as `nnlm reproduce` does, by the NumPy
path one word at a time (`exchange_clusters_reference`, the path before the compiled one) and by
`exchange_clusters`, in this run, one after the other: CPU seconds of this process (the machine may
be shared), wall seconds, the ratio, and whether the classes and the log-likelihoods are the same.
numba's compilation (or loading its cache) is done first and reported apart.
"""
from __future__ import annotations

import argparse
import math
import time
from collections import Counter, defaultdict

import numpy as np

from nnlm.data.corpus import load_corpus
from nnlm.wordclasses.exchange import _initial_classes, exchange_clusters, exchange_clusters_reference


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


def timed(run, *args, **kwargs):
    """run(*args, **kwargs), its CPU seconds (this process) and wall seconds."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = run(*args, **kwargs)
    return out, time.process_time() - c0, time.perf_counter() - t0


def compare_plain(corpus, tokens: int, classes: int) -> None:
    v = len(corpus.vocab)
    train = corpus.train[:tokens].astype(np.int64)
    freq = np.bincount(train, minlength=v)
    seen = np.flatnonzero(freq)
    k = min(classes, len(seen))
    start = _initial_classes(freq, seen, k)
    order = seen[np.argsort(-freq[seen], kind="stable")].tolist()
    ours, ours_cpu, _ = timed(exchange_clusters, train, v, k, max_passes=1, progress=False)
    plain, plain_cpu, _ = timed(plain_exchange_pass, train.tolist(), {w: int(start[w]) for w in seen.tolist()}, k,
                                order)
    same = np.mean([ours.classes[w] == c for w, c in plain.items()])
    print(f"one exchange pass, {len(train):,} tokens, {len(seen):,} words, {k} classes (CPU s):")
    print(f"  nnlm {ours_cpu:.2f} s   plain dicts {plain_cpu:.2f} s   speed-up {plain_cpu / ours_cpu:.0f}x   "
          f"same class for {same:.2%} of the words")


def compare_full(corpus, class_counts: list[int]) -> None:
    v = len(corpus.vocab)
    _, compile_cpu, compile_wall = timed(exchange_clusters, corpus.train[:1000], v, 10, progress=False)
    print(f"numba compilation or cache load: {compile_cpu:.1f} CPU s ({compile_wall:.1f} s wall)")
    print(f"all of Brown train ({len(corpus.train):,} tokens, |V| = {v:,}); CPU s (wall s):")
    print("      c  passes    NumPy path        compiled     ratio  same classes  max rel. diff of log-likelihoods")
    totals = np.zeros(4)
    for c in class_counts:
        old, old_cpu, old_wall = timed(exchange_clusters_reference, corpus.train, v, c)
        new, new_cpu, new_wall = timed(exchange_clusters, corpus.train, v, c, progress=False)
        totals += (old_cpu, old_wall, new_cpu, new_wall)
        same = np.array_equal(old.classes, new.classes) and old.moved == new.moved
        diff = max(abs(a - b) / abs(a) for a, b in zip(old.log_likelihood, new.log_likelihood, strict=True))
        print(f"  {c:5d}  {new.passes:6d}  {old_cpu:6.1f} ({old_wall:6.1f})  {new_cpu:5.1f} ({new_wall:5.1f})  "
              f"{old_cpu / new_cpu:6.1f}x  {str(same):>12s}  {diff:.1e}")
    print(f"  total          {totals[0]:6.1f} ({totals[1]:6.1f})  {totals[2]:5.1f} ({totals[3]:5.1f})  "
          f"{totals[0] / totals[2]:6.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000, help="Brown train tokens for the plain comparison")
    parser.add_argument("--classes", type=int, default=100, help="classes for the plain comparison")
    parser.add_argument("--full", type=int, nargs="*", default=[150, 500, 1000, 2000],
                        help="class counts to cluster all of Brown train into, by both nnlm paths")
    parser.add_argument("--no-plain", action="store_true", help="skip the comparison with plain dicts")
    args = parser.parse_args()
    corpus = load_corpus("brown")
    with open("/proc/loadavg") as fh:
        print(f"load average at the start: {fh.read().split()[:3]}")
    compare_full(corpus, args.full)
    if not args.no_plain:
        compare_plain(corpus, args.tokens, args.classes)
    with open("/proc/loadavg") as fh:
        print(f"load average at the end: {fh.read().split()[:3]}")


if __name__ == "__main__":
    main()
