"""Exchange clustering: the likelihood it reports is the real one, never decreases, and finds planted classes."""
import numpy as np
import pytest

from nnlm.errors import NnlmError
from nnlm.wordclasses.exchange import exchange_clusters


def class_bigram_log_likelihood(train: np.ndarray, classes: np.ndarray) -> float:
    """Mean log P(w_t | w_{t-1}) of the relative-frequency class bigram model, straight from its definition."""
    g, h = classes[train[:-1]], classes[train[1:]]
    pair = {}
    for key in zip(g.tolist(), h.tolist(), strict=True):
        pair[key] = pair.get(key, 0) + 1
    left = np.bincount(g)
    right_class = np.bincount(h)
    word = np.bincount(train[1:])
    total = 0.0
    for a, b, w in zip(g.tolist(), h.tolist(), train[1:].tolist(), strict=True):
        total += np.log(pair[(a, b)] / left[a]) + np.log(word[w] / right_class[b])
    return total / (len(train) - 1)


def planted_corpus(rng: np.random.Generator, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """4 classes of 5 words; class g is followed by class g+1 (mod 4) 90% of the time."""
    truth = np.repeat(np.arange(4), 5)
    cls = np.empty(tokens, dtype=np.int64)
    cls[0] = 0
    jumps = np.where(rng.random(tokens) < 0.9, 1, rng.integers(0, 4, size=tokens))
    cls = np.cumsum(jumps) % 4
    words = cls * 5 + rng.integers(0, 5, size=tokens)
    return words, truth


def test_reported_likelihood_is_the_real_one_and_never_decreases(random_corpus):
    train = random_corpus.train.astype(np.int64)
    wc = exchange_clusters(train, len(random_corpus.vocab), 8, progress=False)
    assert all(b >= a - 1e-12 for a, b in zip(wc.log_likelihood, wc.log_likelihood[1:], strict=False))
    assert wc.log_likelihood[-1] > wc.log_likelihood[0]
    assert wc.log_likelihood[-1] == pytest.approx(class_bigram_log_likelihood(train, wc.classes), rel=1e-9)


def test_recovers_planted_classes():
    words, truth = planted_corpus(np.random.default_rng(0), 20_000)
    wc = exchange_clusters(words, 20, 4, progress=False)
    found = wc.classes
    # the same partition, up to the names of the classes
    assert len({(a, b) for a, b in zip(found.tolist(), truth.tolist(), strict=True)}) == 4
    assert len(set(found.tolist())) == 4


def test_beats_random_classes(random_corpus):
    train = random_corpus.train.astype(np.int64)
    v = len(random_corpus.vocab)
    wc = exchange_clusters(train, v, 6, progress=False)
    random_classes = np.random.default_rng(0).integers(0, 6, size=v)
    assert wc.log_likelihood[-1] > class_bigram_log_likelihood(train, random_classes)


def test_unseen_words_are_dealt_out_and_classes_stay_non_empty():
    train = np.array([2, 3, 4, 2, 3, 5, 2, 4, 3, 5, 2, 7, 8, 9], dtype=np.int64)  # 0, 1, 6 never occur
    wc = exchange_clusters(train, 10, 3, progress=False)
    assert wc.n_classes == 3
    seen = np.array([2, 3, 4, 5, 7, 8, 9])
    assert set(wc.classes[seen].tolist()) == {0, 1, 2}
    assert set(wc.classes[[0, 1, 6]].tolist()) <= {0, 1, 2}
    # more classes than words in train: one class per train word
    wc = exchange_clusters(train, 10, 10, progress=False)
    assert wc.n_classes == 7 and sorted(wc.classes[seen].tolist()) == list(range(7))


def test_unseen_words_follow_class_sizes():
    # class sizes 3 : 1 after clustering a corpus of 4 words into 2 classes; 8 unseen words
    from nnlm.wordclasses.exchange import deal_out

    got = deal_out(np.arange(8), np.array([3.0, 1.0]))
    assert np.bincount(got).tolist() == [6, 2]
    got = deal_out(np.arange(5), np.array([1.0, 1.0, 1.0]))
    assert np.bincount(got).tolist() == [2, 2, 1]


def test_deterministic(random_corpus):
    a = exchange_clusters(random_corpus.train, len(random_corpus.vocab), 5, progress=False)
    b = exchange_clusters(random_corpus.train, len(random_corpus.vocab), 5, progress=False)
    assert (a.classes == b.classes).all()


@pytest.mark.parametrize("c", [0, 8])
def test_class_count_out_of_range(c):
    with pytest.raises(NnlmError, match="between 1 and"):
        exchange_clusters(np.array([1, 2, 3]), 7, c)


def test_a_deadline_cuts_the_passes_and_resuming_finishes_them(random_corpus, tmp_path, monkeypatch):
    """Cut before any word: nothing done, incomplete; continued, it is exactly the uncut run. Cut mid-pass:
    continued, the likelihood still never decreases and the result is complete."""
    from nnlm.wordclasses import exchange as clusters

    train, v = random_corpus.train.astype(np.int64), len(random_corpus.vocab)
    whole = exchange_clusters(train, v, 8, progress=False)
    cut = exchange_clusters(train, v, 8, progress=False, deadline=0.0)
    assert not cut.complete and cut.passes == 0
    assert cut.log_likelihood == whole.log_likelihood[:1]
    path = tmp_path / "c8.npz"
    clusters.save_word_classes(path, cut, 1.5)
    loaded, seconds = clusters.load_word_classes(path)
    assert seconds == 1.5 and not loaded.complete and np.array_equal(loaded.classes, cut.classes)
    resumed = exchange_clusters(train, v, 8, progress=False, resume_from=loaded)
    assert resumed.complete
    assert np.array_equal(resumed.classes, whole.classes) and resumed.log_likelihood == whole.log_likelihood

    ticks = iter(range(10**6))  # a clock that moves one second per look: the deadline falls mid-pass
    monkeypatch.setattr(clusters.time, "monotonic", lambda: float(next(ticks)))
    monkeypatch.setattr(clusters, "CLOCK_EVERY", 8)  # looks at words 0, 8, 16: cut at the third
    cut = exchange_clusters(train, v, 8, progress=False, deadline=2.0)
    assert not cut.complete and cut.passes == 1 and cut.moved[0] > 0
    resumed = exchange_clusters(train, v, 8, progress=False, resume_from=cut)
    assert resumed.complete and resumed.passes > 1
    assert all(b >= a - 1e-12 for a, b in zip(resumed.log_likelihood, resumed.log_likelihood[1:], strict=False))
    assert resumed.log_likelihood[-1] == pytest.approx(class_bigram_log_likelihood(train, resumed.classes), rel=1e-9)
    assert clusters.load_word_classes(tmp_path / "missing.npz") is None


def zipf_bigram_corpus(rng: np.random.Generator, tokens: int, words: int) -> np.ndarray:
    """Words drawn from a Zipf-like unigram, half the time repeating a word's favourite successor: many
    rare words with one or two neighbours, so exact and near ties between classes are common."""
    p = 1.0 / np.arange(1, words + 1)
    draws = rng.choice(words, size=tokens, p=p / p.sum())
    favourite = rng.permutation(words)
    follow = rng.random(tokens) < 0.5
    draws[1:][follow[1:]] = favourite[draws[:-1][follow[1:]]]
    return draws.astype(np.int64)


def same_as_reference(train: np.ndarray, v: int, c: int, **kwargs) -> None:
    from nnlm.wordclasses.exchange import exchange_clusters_reference

    ref = exchange_clusters_reference(train, v, c)
    new = exchange_clusters(train, v, c, progress=False, **kwargs)
    assert np.array_equal(new.classes, ref.classes)
    assert new.moved == ref.moved and new.complete
    assert new.log_likelihood == pytest.approx(ref.log_likelihood, rel=1e-12, abs=0)


@pytest.mark.parametrize("c", [1, 2, 5, 8, 30])
def test_compiled_moves_give_the_numpy_paths_classes(random_corpus, c):
    same_as_reference(random_corpus.train.astype(np.int64), len(random_corpus.vocab), c)


@pytest.mark.parametrize("seed, c", [(0, 4), (1, 20), (2, 60)])
def test_compiled_moves_give_the_numpy_paths_classes_on_zipf_bigrams(seed, c):
    train = zipf_bigram_corpus(np.random.default_rng(seed), 3000, 400)
    same_as_reference(train, 410, c)  # 10 words of V never in train, and some of the 400 never drawn


def test_words_rounding_could_decide_are_decided_by_the_reference_formula(random_corpus, monkeypatch):
    """With the rounding bound made huge, every word's decision is handed back to the NumPy formula
    (the path taken for near ties): still the reference's classes, and every visited word was handed back."""
    from nnlm.wordclasses import exchange as clusters

    made = []

    class EveryWordReferred(clusters._CompiledExchange):
        def __init__(self, *args):
            super().__init__(*args)
            self.log_largest = 1e300
            made.append(self)

    monkeypatch.setattr(clusters, "_CompiledExchange", EveryWordReferred)
    train, v = random_corpus.train.astype(np.int64), len(random_corpus.vocab)
    same_as_reference(train, v, 8)
    passes = exchange_clusters(train, v, 8, progress=False).passes
    words = len(np.unique(train))  # each pass decides every word but those alone in their class (at most 8)
    assert made[0].referred >= passes * (words - 8)


@pytest.mark.brown
def test_compiled_moves_give_the_numpy_paths_classes_on_brown(brown):
    same_as_reference(brown.train[:12_000].astype(np.int64), len(brown.vocab), 40)
