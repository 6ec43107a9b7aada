from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.errors import NnlmError
from nnlm.ngram.counts import count_ngrams


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=6, max_size=80), st.integers(1, 6))
def test_counts_match_brute_force(seq, order):
    ids = np.array(seq)
    c = count_ngrams(ids, order, vocab_size=7)
    for k in range(1, order + 1):
        ref = Counter(tuple(seq[i:i + k]) for i in range(len(seq) - k + 1))
        grams = c.words(k)
        assert [tuple(g) for g in grams] == sorted(ref)  # lexicographic table order
        assert c.counts[k - 1].tolist() == [ref[tuple(g)] for g in grams]
        assert (c.index(grams) == np.arange(len(grams))).all()
        if k > 1:
            assert (c.words(k - 1)[c.prefix[k - 1]] == grams[:, :-1]).all()
            assert (c.words(k - 1)[c.suffix[k - 1]] == grams[:, 1:]).all()


def test_unseen_grams_are_minus_one_and_count_zero():
    c = count_ngrams(np.array([0, 1, 2, 0, 1]), 3, vocab_size=4)
    assert c.index(np.array([[0, 1], [1, 0], [3, 3]])).tolist()[1:] == [-1, -1]
    assert c.count(np.array([[0, 1, 2], [0, 1, 3]])).tolist() == [1, 0]


@pytest.mark.parametrize("order", [0, 7])
def test_order_out_of_range(order):
    with pytest.raises(NnlmError):
        count_ngrams(np.arange(10), order, 10)


def test_large_vocabulary_does_not_overflow():
    # 6 words of 2**20 ids would need 120 bits if packed naively.
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 2**20, size=5000)
    c = count_ngrams(ids, 6, vocab_size=2**20)
    assert c.counts[5].sum() == len(ids) - 5
    assert (c.words(6)[:, 0] == np.sort(c.words(6)[:, 0])).all()
