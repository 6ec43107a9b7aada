"""Modified Kneser-Ney: the formula (against a slow dict-based version written here), proper
distributions for any context, unseen vocabulary words, degenerate data, saving."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.errors import NnlmError
from nnlm.lm import contexts, perplexity
from nnlm.ngram.build import build_ngram, load_ngram, save_ngram
from nnlm.ngram.kn_discounts import FALLBACK_DISCOUNTS, discounts_from
from nnlm.ngram.kneser_ney import KneserNeyModel, fit_kneser_ney

VOCAB = 12  # ids 10 and 11 never occur in the synthetic stream


def synthetic_stream(length: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.choice(10, size=length, p=np.arange(10, 0, -1) / 55)
    ids[1::3] = (ids[0::3][: len(ids[1::3])] + 1) % 10  # some structure for higher orders
    return ids


STREAM = synthetic_stream(3000, seed=1)
MODELS = {n: fit_kneser_ney(STREAM, n, VOCAB) for n in range(1, 7)}


# ---- a direct, slow implementation of the formula in the module docstring ----------------------

def reference_kn(ids: list[int], order: int, vocab_size: int):
    """p(w | h) by the interpolated modified Kneser-Ney recursion, with dicts and loops."""
    grams = [defaultdict(int) for _ in range(order + 1)]  # grams[k][tuple] = adjusted count
    for k in range(1, order + 1):
        seen = {tuple(ids[i:i + k]) for i in range(len(ids) - k + 1)}
        if k == order:
            for i in range(len(ids) - k + 1):
                grams[k][tuple(ids[i:i + k])] += 1
        else:
            left = defaultdict(set)
            for i in range(1, len(ids) - k + 1):
                left[tuple(ids[i:i + k])].add(ids[i - 1])
            for g in seen:
                grams[k][g] = len(left[g]) + (g == tuple(ids[:k]))

    def discounts(k: int) -> tuple[float, float, float]:
        n = [sum(1 for a in grams[k].values() if a == j) for j in range(1, 5)]
        if all(x > 0 for x in n):
            y = n[0] / (n[0] + 2 * n[1])
            d = tuple(j - (j + 1) * y * n[j] / n[j - 1] for j in (1, 2, 3))
            if all(0 < d[j - 1] <= j for j in (1, 2, 3)):
                return d
        return FALLBACK_DISCOUNTS

    disc = {k: discounts(k) for k in range(1, order + 1)}

    def d_of(k: int, a: int) -> float:
        return 0.0 if a == 0 else disc[k][min(a, 3) - 1]

    def prob(w: int, h: tuple[int, ...]) -> float:
        k = len(h) + 1
        lower = 1.0 / vocab_size if k == 1 else prob(w, h[1:])
        followers = {g[-1]: a for g, a in grams[k].items() if g[:-1] == h}
        total = sum(followers.values())
        if total == 0:
            return lower
        a = followers.get(w, 0)
        gamma = sum(d_of(k, x) for x in followers.values()) / total
        return (a - d_of(k, a)) / total + gamma * lower

    return prob


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_matches_the_direct_formula_on_every_context_and_word(order):
    ids = synthetic_stream(150, seed=order)
    vocab_size = 11  # id 10 never occurs
    ref = reference_kn(ids.tolist(), order, vocab_size)
    model = fit_kneser_ney(ids, order, vocab_size)
    seen_contexts = {tuple(ids[i:i + order - 1]) for i in range(len(ids) - order + 2)}
    rng = np.random.default_rng(0)
    unseen = [tuple(rng.integers(0, vocab_size, order - 1)) for _ in range(5)]
    for h in sorted(seen_contexts)[:40] + unseen:
        ctx = np.tile(np.array(h, dtype=np.int64).reshape(1, -1), (vocab_size, 1))
        got = np.exp(model.log_prob(ctx, np.arange(vocab_size)))
        want = [ref(w, tuple(int(x) for x in h)) for w in range(vocab_size)]
        np.testing.assert_allclose(got, want, rtol=1e-10, err_msg=f"context {h}")


def test_discounts_by_hand():
    # counts of counts n1..n4 = 4, 2, 1, 1: Y = 4/8; D1 = 1 - 2(1/2)(2/4); D2 = 2 - 3(1/2)(1/2); D3 = 3 - 4(1/2)(1/1)
    adjusted = np.array([1, 1, 1, 1, 2, 2, 3, 4, 0, 0])
    d = discounts_from(adjusted)
    assert (d.d1, d.d2, d.d3, d.fallback) == (pytest.approx(0.5), pytest.approx(1.25), pytest.approx(1.0), False)
    assert discounts_from(np.array([1, 1, 2, 4])).fallback  # no 3s: D2 undefined
    assert discounts_from(np.array([1, 2] + [3] * 10 + [4] * 10)).fallback  # D2 = 2 - 3 (1/3) 10 < 0


@settings(max_examples=40, deadline=None)
@given(order=st.integers(1, 6), rows=st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=6, max_size=6),
                                               min_size=1, max_size=8))
def test_distribution_sums_to_one_and_matches_log_prob(order, rows):
    model = MODELS[order]
    ctx = np.array(rows, dtype=np.int64)[:, 6 - (order - 1):] if order > 1 else np.zeros((len(rows), 0), np.int64)
    dist = model.distribution(ctx)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(dist > 0)
    targets = np.arange(len(rows)) % VOCAB
    np.testing.assert_allclose(model.log_prob(ctx, targets), np.log(dist[np.arange(len(rows)), targets]), rtol=1e-12)


def test_words_never_seen_share_one_probability_in_every_context():
    model = MODELS[3]
    ctx = np.array([[0, 1], [5, 5], [11, 10]], dtype=np.int64)
    dist = model.distribution(ctx)
    np.testing.assert_array_equal(dist[:, 10], dist[:, 11])
    assert np.all(dist[:, 10] < dist[:, :10].min(axis=1))


def test_longer_contexts_fit_train_better():
    ids = STREAM
    train_ppl = []
    for n in (1, 2, 3, 4):
        pos = np.arange(n - 1, len(ids))
        train_ppl.append(np.exp(-MODELS[n].log_prob(contexts(ids, pos, n - 1, 0), ids[pos]).mean()))
    assert train_ppl == sorted(train_ppl, reverse=True)


@pytest.mark.parametrize("length", [1, 2, 5])
def test_tiny_data_falls_back_and_stays_a_distribution(length):
    ids = np.arange(length) % 3
    model = fit_kneser_ney(ids, 1 if length < 2 else 2, 4)
    dist = model.distribution(np.zeros((4, model.order - 1), dtype=np.int64) + np.arange(4)[:, None] % 4)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(dist > 0)


@pytest.mark.parametrize("order", [0, 7])
def test_order_out_of_range_is_an_error(order):
    with pytest.raises(NnlmError, match="between 1 and 6"):
        fit_kneser_ney(STREAM, order, VOCAB)


def test_ids_outside_the_vocabulary_are_an_error():
    with pytest.raises(NnlmError, match="must lie in"):
        fit_kneser_ney(STREAM, 3, 5)


def test_saved_model_loads_and_scores_the_same(random_corpus, tmp_path):
    model = build_ngram("kn", random_corpus, 4)
    save_ngram(model, tmp_path / "kn4")
    loaded = load_ngram(tmp_path / "kn4")
    assert isinstance(loaded, KneserNeyModel) and loaded.order == 4
    assert loaded.params == model.params
    for split in ("valid", "test"):
        assert perplexity(loaded, random_corpus, split) == perplexity(model, random_corpus, split)


def test_kn_beats_add_one_on_held_out(random_corpus):
    addone = perplexity(build_ngram("addone", random_corpus, 2), random_corpus, "valid")
    kn = [perplexity(build_ngram("kn", random_corpus, n), random_corpus, "valid") for n in (2, 3)]
    assert max(kn) < addone


@pytest.mark.brown
def test_brown_kn_orders_improve_and_sum_to_one(brown):
    ppl = {}
    for n in (3, 5):
        model = build_ngram("kn", brown, n)
        ppl[n] = perplexity(model, brown, "valid")
        rows = contexts(brown.stream(), np.arange(800_000, 800_100), n - 1, brown.pad_id)
        np.testing.assert_allclose(model.distribution(rows).sum(axis=1), 1.0, atol=1e-10)
    addone = perplexity(build_ngram("addone", brown, 2), brown, "valid")
    assert ppl[5] < ppl[3] < addone
