"""benchmarks/text_like_corpus.py: the generated source's stated probabilities are a distribution (they sum
to 1 over the vocabulary, `<unk>` included, for any context) and its draws follow them."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

spec = importlib.util.spec_from_file_location("text_like_corpus",
                                              Path(__file__).parent.parent / "benchmarks" / "text_like_corpus.py")
text_like = importlib.util.module_from_spec(spec)
spec.loader.exec_module(text_like)


@pytest.fixture(scope="module")
def source():
    return text_like.TextLikeSource(words=60, classes=5, successors=4, next_classes=3, seed=3)


@pytest.mark.parametrize("w1, w2", [(-1, -1), (-1, 7), (3, 0), (59, 12)])
def test_the_word_probabilities_sum_to_one_for_any_context(source, w1, w2):
    every = np.arange(source.words)
    ones = np.ones(source.words, dtype=bool)
    p = source.word_probs(np.full(source.words, w1), np.full(source.words, w2), every, ones)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    known = every % 3 != 0  # a third of the words as <unk>: the known words plus <unk> once
    q = source.word_probs(np.full(source.words, w1), np.full(source.words, w2), every, known)
    assert q[known].sum() + q[0] == pytest.approx(1.0, abs=1e-12)


def test_the_draws_follow_the_stated_probabilities(source):
    rng = np.random.default_rng(0)
    n = 200_000
    drawn = source._draw(rng, np.full(n, 3), np.full(n, 11))
    every = np.arange(source.words)
    p = source.word_probs(np.full(source.words, 3), np.full(source.words, 11), every,
                          np.ones(source.words, dtype=bool))
    assert np.abs(np.bincount(drawn, minlength=source.words) / n - p).max() < 0.005


def test_the_line_end_hazard_is_that_of_one_plus_poisson(source):
    t = np.arange(1, 60)
    still = np.cumprod(np.concatenate([[1.0], 1 - source.end_hazard(t)]))  # P(L > t), t = 0 .. 59
    ends = still[:-1] * source.end_hazard(t)  # P(L = t)
    assert ends.sum() == pytest.approx(1.0, abs=1e-9)
    assert (t * ends).sum() == pytest.approx(source.mean_length, rel=1e-6)


def test_without_collocations_is_a_distribution_and_scores_above_the_limit(source, tmp_path):
    """The blind source (collocations scored as unigram draws) still sums to 1 for any context, and the text
    the full source wrote is less likely under it: its perplexity is above the limit."""
    blind = source.without_collocations()
    every = np.arange(source.words)
    p = blind.word_probs(np.full(source.words, 4), np.full(source.words, 9), every, np.ones(source.words, dtype=bool))
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and source.p_word > 0 and blind.p_word == 0
    rng = np.random.default_rng(1)
    ids = source.block(rng, 400)
    lines = [list(part) for part in np.split(ids, np.flatnonzero(ids < 0) + 1) if len(part) > 1]
    lines = [[w for w in line if w >= 0] for line in lines]
    known = np.ones(source.words, dtype=bool)
    assert blind.limit(lines, known) > source.limit(lines, known) * 1.05
