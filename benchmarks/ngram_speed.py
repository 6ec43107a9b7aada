"""Speed of modified Kneser-Ney on Brown: counting + estimation + test perplexity, orders 3-5.

Run from the repository root (about a minute on one core):
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/ngram_speed.py [--orders 3 4 5]

The reference, timed in the same run, is a plain dict-and-Counter implementation of the same
estimator (same adjusted counts, discounts and interpolation), written the obvious way with a
Python loop over tokens. It also checks nnlm: both must give the same test perplexity.
"""
from __future__ import annotations

import argparse
import math
import time
from collections import Counter, defaultdict

from nnlm.data.corpus import load_corpus
from nnlm.lm import perplexity
from nnlm.ngram.kn_discounts import FALLBACK_DISCOUNTS
from nnlm.ngram.kneser_ney import KneserNeyModel


def plain_kn_test_perplexity(train: list[int], stream: list[int], start: int, stop: int,
                             order: int, vocab_size: int, pad: int) -> float:
    """Estimate interpolated modified KN with dicts, then score stream[start:stop] token by token."""
    raw = Counter(zip(*[train[i:] for i in range(order)], strict=False))
    adjusted: dict[int, dict[tuple, int]] = {order: dict(raw)}
    for k in range(order - 1, 0, -1):
        cont = Counter(g[1:] for g in adjusted[k + 1])  # distinct left neighbours
        grams = set(zip(*[train[i:] for i in range(k)], strict=False))
        opening = tuple(train[:k])
        adjusted[k] = {g: cont[g] + (g == opening) for g in grams}
    discounts, total, left = {}, {}, {}
    for k, table in adjusted.items():
        n = Counter(min(a, 5) for a in table.values())
        d = FALLBACK_DISCOUNTS
        if all(n[j] for j in (1, 2, 3, 4)):
            y = n[1] / (n[1] + 2 * n[2])
            est = tuple(j - (j + 1) * y * n[j + 1] / n[j] for j in (1, 2, 3))
            d = est if all(0 < est[j - 1] <= j for j in (1, 2, 3)) else d
        discounts[k] = (0.0,) + tuple(d)
        total[k], left[k] = defaultdict(float), defaultdict(float)
        for g, a in table.items():
            total[k][g[:-1]] += a
            left[k][g[:-1]] += discounts[k][min(a, 3)]
    log_sum = 0.0
    for t in range(start, stop):
        w = stream[t]
        history = tuple(stream[t - i] if t - i >= 0 else pad for i in range(order - 1, 0, -1))
        p = 1.0 / vocab_size
        for k in range(1, order + 1):
            h = history[len(history) - (k - 1):] if k > 1 else ()
            s = total[k].get(h)
            if s:
                a = adjusted[k].get(h + (w,), 0)
                p = (a - discounts[k][min(a, 3)]) / s + left[k][h] / s * p
        log_sum += math.log(p)
    return math.exp(-log_sum / (stop - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[3, 4, 5])
    args = parser.parse_args()
    corpus = load_corpus("brown")
    n_train, n_test = len(corpus.train), len(corpus.test)
    stream = corpus.stream()
    start = corpus.split_offset("test")
    train_list, stream_list = corpus.train.tolist(), stream.tolist()
    print(f"Brown: {n_train:,} train tokens, {n_test:,} test tokens, |V| = {len(corpus.vocab):,}")
    print(f"{'order':>5} {'nnlm build s':>12} {'test s':>7} {'tokens/s':>10} {'plain s':>8} {'tokens/s':>9} "
          f"{'speed-up':>8}  test ppl nnlm / plain")
    for order in args.orders:
        t0 = time.perf_counter()
        model = KneserNeyModel.fit(corpus.vocab, corpus.train, order)
        t1 = time.perf_counter()
        ppl = perplexity(model, corpus, "test")
        t2 = time.perf_counter()
        ref = plain_kn_test_perplexity(train_list, stream_list, start, start + n_test, order,
                                       len(corpus.vocab), corpus.pad_id)
        t3 = time.perf_counter()
        ours, plain = t2 - t0, t3 - t2
        rate = (n_train + n_test) / ours
        print(f"{order:>5} {t1 - t0:>12.2f} {t2 - t1:>7.2f} {rate:>10,.0f} {plain:>8.2f} "
              f"{(n_train + n_test) / plain:>9,.0f} {plain / ours:>7.1f}x  {ppl:.4f} / {ref:.4f}")
    print("tokens/s = (train + test tokens) / (counting + estimation + test perplexity)")


if __name__ == "__main__":
    main()
