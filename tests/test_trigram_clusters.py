"""The trigram refinement of word classes: each move's gain is the change of the class trigram's training
log-likelihood, no pass lowers it, no class empties, unseen words keep their class, and on text drawn
from a class-trigram source the refined classes give the class trigram a lower validation perplexity."""
from __future__ import annotations

import numpy as np
import pytest

from nnlm.data import load_corpus
from nnlm.data.synthetic import write_corpus
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural.net.feature_init import feature_classes
from nnlm.ngram.class_based import ClassNgram
from nnlm.wordclasses.exchange import WordClasses
from nnlm.wordclasses.trigram import _TrigramCounts, refine_by_trigrams


def log_likelihood(train: np.ndarray, classes: np.ndarray, k: int) -> float:
    return _TrigramCounts(train, np.asarray(classes), k).log_likelihood()


def test_each_gain_is_the_change_of_the_log_likelihood():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 12, size=400)
    train[::7] = 3  # a word that can sit twice in one trigram
    train[1::7] = 3
    k = 4
    classes = rng.integers(0, k, size=12)
    for word in (3, 5, 11):
        counts = _TrigramCounts(train, classes.copy(), k)
        before = counts.log_likelihood()
        at = np.flatnonzero(train == word)
        ends = np.unique(np.concatenate([at, at + 1, at + 2]))
        ends = ends[(ends >= 2) & (ends < len(train))]
        counts.add(ends, -1.0)
        gains = counts.gains(word, ends)
        for b in range(k):
            moved = classes.copy()
            moved[word] = b
            expected = log_likelihood(train, moved, k) - log_likelihood(train, classes, k)
            assert gains[b] - gains[classes[word]] == pytest.approx(expected, abs=1e-6)
        assert before == pytest.approx(log_likelihood(train, classes, k))


def test_passes_raise_the_likelihood_and_keep_every_class_and_unseen_word():
    rng = np.random.default_rng(1)
    train = rng.integers(0, 30, size=3000)
    classes = np.arange(32) % 5  # words 30 and 31 never occur in train
    refined, history = refine_by_trigrams(train, classes, 5)
    assert all(b >= a - 1e-9 for a, b in zip(history, history[1:], strict=False))
    assert history[-1] > history[0]
    assert (refined[30], refined[31]) == (classes[30], classes[31])
    assert set(refined[:30].tolist()) == set(range(5))
    assert refined_again_equal(train, classes)


def refined_again_equal(train, classes) -> bool:
    """No randomness: the same input gives the same classes."""
    return np.array_equal(refine_by_trigrams(train, classes, 5)[0], refine_by_trigrams(train, classes, 5)[0])


def test_bad_input_is_one_clear_error():
    with pytest.raises(NnlmError, match="at least three training tokens"):
        refine_by_trigrams(np.array([0, 1]), np.array([0, 1]), 2)
    with pytest.raises(NnlmError, match="ids from 0 to 1"):
        refine_by_trigrams(np.array([0, 1, 0, 1]), np.array([0, 2]), 2)


def test_on_class_trigram_text_the_refined_classes_predict_validation_better(tmp_path):
    write_corpus(tmp_path / "gen", 60_000, words=150, classes=8, seed=5)
    corpus = load_corpus(tmp_path / "gen", min_count=2)
    v, k = len(corpus.vocab), 10

    def valid(classes: np.ndarray) -> float:
        model = ClassNgram.fit(corpus.vocab, corpus.train, 3, k, progress=False, clusters=WordClasses(classes, k))
        return perplexity(model, corpus, "valid")

    exchange = feature_classes(corpus.train, v, k)
    refined = feature_classes(corpus.train, v, k, "trigram")
    assert valid(refined) < valid(exchange)


def test_too_many_classes_for_the_dense_table_is_one_clear_error():
    from nnlm.wordclasses.trigram import MAX_CLASSES

    train = np.arange(2000) % 1000
    with pytest.raises(NnlmError, match=f"at most {MAX_CLASSES} classes"):
        refine_by_trigrams(train, np.arange(1000) % (MAX_CLASSES + 1), MAX_CLASSES + 1)


def test_candidate_blocks_give_the_same_gains(monkeypatch):
    import nnlm.wordclasses.trigram as tc

    rng = np.random.default_rng(2)
    train = rng.integers(0, 20, size=1500)
    classes = np.arange(20) % 6
    whole = refine_by_trigrams(train, classes, 6)
    monkeypatch.setattr(tc, "BLOCK_CELLS", 50)  # a few classes a block
    np.testing.assert_array_equal(refine_by_trigrams(train, classes, 6)[0], whole[0])
    assert refine_by_trigrams(train, classes, 6)[1] == pytest.approx(whole[1])


def test_the_class_ngram_builds_on_refined_classes_and_refuses_the_option_elsewhere(tmp_path):
    from nnlm.ngram.evaluate import obtain_ngram

    write_corpus(tmp_path / "gen", 20_000, words=80, classes=6, seed=2)
    corpus = load_corpus(tmp_path / "gen", min_count=2)
    built = obtain_ngram(corpus, "class", 3, 8, clustering="trigram").model
    exchange = feature_classes(corpus.train, len(corpus.vocab), 8)
    np.testing.assert_array_equal(built.classes, refine_by_trigrams(corpus.train, exchange, 8)[0])
    np.testing.assert_allclose(built.distribution(np.array([[1, 2], [3, 3]])).sum(1), 1.0, atol=1e-9)
    with pytest.raises(NnlmError, match="--clustering applies only when building --kind class"):
        obtain_ngram(corpus, "kn", 3, clustering="trigram")
