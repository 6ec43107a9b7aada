import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data import Corpus, Vocabulary, load_corpus
from nnlm.errors import NnlmError
from nnlm.lm import contexts, perplexity, split_log_probs
from nnlm.ngram.simple import AddOneBigram, UniformModel


def test_contexts_pad_before_the_stream_start():
    stream = np.array([5, 6, 7, 8])
    ctx = contexts(stream, np.array([0, 1, 3]), 2, pad_id=9)
    assert ctx.tolist() == [[9, 9], [9, 5], [6, 7]]
    assert contexts(stream, np.array([2]), 0, pad_id=9).shape == (1, 0)


def _tiny_corpus() -> Corpus:
    vocab = Vocabulary(("<unk>", "<p>", "a", "b"))
    ids = lambda s: np.array([vocab.id(t) for t in s.split()], dtype=np.int32)  # noqa: E731
    return Corpus("tiny", vocab, ids("a b a a <p>"), ids("b a <p>"), ids("a b"), pad_token="<p>")


def test_addone_perplexity_by_hand():
    c = _tiny_corpus()
    m = AddOneBigram.fit(c.vocab, c.train)
    # train bigrams: (a,b) (b,a) (a,a) (a,<p>); counts of contexts: a:3, b:1, <p>:0; |V| = 4.
    # valid "b a <p>" follows train's last token <p>: P(b|<p>) = 1/4, P(a|b) = 2/5, P(<p>|a) = 2/7.
    expected = math.exp(-(math.log(1 / 4) + math.log(2 / 5) + math.log(2 / 7)) / 3)
    assert perplexity(m, c, "valid") == pytest.approx(expected, rel=1e-12)
    # train's first token is predicted from padding (<p>): P(a|<p>) = 1/4.
    assert split_log_probs(m, c, "train")[0] == pytest.approx(math.log(1 / 4))


def test_uniform_perplexity_is_vocab_size_on_any_split(random_corpus):
    m = UniformModel(random_corpus.vocab)
    for split in ("train", "valid", "test"):
        assert perplexity(m, random_corpus, split) == pytest.approx(len(random_corpus.vocab), rel=1e-12)


@pytest.mark.brown
def test_uniform_test_perplexity_on_brown_is_17907(brown):
    assert perplexity(UniformModel(brown.vocab), brown, "test") == pytest.approx(17907, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=20))
def test_addone_distribution_sums_to_one_and_matches_log_prob(previous):
    vocab = Vocabulary(tuple(["<unk>"] + [f"w{i}" for i in range(9)]))
    rng = np.random.default_rng(len(previous))
    m = AddOneBigram.fit(vocab, rng.integers(0, 10, size=200))
    ctx = np.array(previous)[:, None]
    dist = m.distribution(ctx)
    assert np.allclose(dist.sum(axis=1), 1.0, atol=1e-12)
    targets = rng.integers(0, 10, size=len(previous))
    assert np.allclose(np.log(dist[np.arange(len(previous)), targets]), m.log_prob(ctx, targets))


def test_split_shorter_than_order_is_an_error():
    c = _tiny_corpus()
    short = Corpus("short", c.vocab, c.train, c.valid, c.test[:1], pad_token="<p>")
    with pytest.raises(NnlmError, match="fewer than the model's order"):
        perplexity(AddOneBigram.fit(c.vocab, c.train), short, "test")


def test_vocabulary_mismatch_is_an_error(toy_dir):
    c = load_corpus(str(toy_dir), use_cache=False)
    other = UniformModel(Vocabulary(("<unk>", "x")))
    with pytest.raises(NnlmError, match="vocabulary"):
        perplexity(other, c, "test")


def test_saved_addone_loads_and_scores_the_same(random_corpus, tmp_path):
    from nnlm.ngram.build import build_ngram, load_ngram, save_ngram

    m = build_ngram("addone", random_corpus)
    save_ngram(m, tmp_path / "m")
    save_ngram(m, tmp_path / "m")  # saving again over a model replaces it
    again = load_ngram(tmp_path / "m")
    assert perplexity(again, random_corpus, "test") == perplexity(m, random_corpus, "test")


def test_loading_a_non_model_is_an_error(tmp_path):
    from nnlm.ngram.build import load_ngram

    with pytest.raises(NnlmError, match="not a saved n-gram model"):
        load_ngram(tmp_path)
