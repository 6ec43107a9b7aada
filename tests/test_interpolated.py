"""Deleted-interpolation trigram: the formula by hand, proper distributions everywhere, monotone EM."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.lm import perplexity
from nnlm.ngram.build import build_ngram, load_ngram, save_ngram
from nnlm.ngram.interpolated import InterpolatedTrigram

# ids: 0 <unk>, 1 <p>, 2 a, 3 b, 4 c, 5 never-seen
VOCAB = Vocabulary(("<unk>", "<p>", "a", "b", "c", "zz"))
TRAIN = np.array([2, 3, 4, 2, 3, 2, 3, 4, 1, 2, 2, 3], dtype=np.int64)  # T = 12


def toy_model() -> InterpolatedTrigram:
    model = InterpolatedTrigram.fit(VOCAB, TRAIN)
    rng = np.random.default_rng(1)
    model.weights = rng.dirichlet(np.ones(4), size=len(model.weights))
    model.weights[model.no_trigram_bucket, 3] = 0
    model.weights[model.no_bigram_bucket, 2:] = 0
    model.weights /= model.weights.sum(axis=1, keepdims=True)
    return model


def test_probability_matches_the_formula_by_hand():
    model = toy_model()
    # P(c | a, b): c(a,b) = 3 followed, c(a,b,c) = 2; c(b) followed = 3, c(b,c) = 2; c(c) = 2, T = 12
    q = math.ceil(-math.log((1 + 3) / 12))
    a0, a1, a2, a3 = model.weights[q]
    expected = a0 / 6 + a1 * 2 / 12 + a2 * 2 / 3 + a3 * 2 / 3
    got = model.log_prob(np.array([[2, 3]]), np.array([4]))
    assert np.exp(got[0]) == pytest.approx(expected, rel=1e-12)


def test_unseen_context_uses_only_defined_components():
    model = toy_model()
    # (c, c) never seen as a trigram context; c is followed by a word twice (c a, c <p>)
    a0, a1, a2, _ = model.weights[model.no_trigram_bucket]
    got = np.exp(model.log_prob(np.array([[4, 4]]), np.array([2])))[0]
    assert got == pytest.approx(a0 / 6 + a1 * 5 / 12 + a2 * 1 / 2, rel=1e-12)
    # 'zz' (5) never seen at all: only uniform and unigram remain
    a0, a1, _, _ = model.weights[model.no_bigram_bucket]
    got = np.exp(model.log_prob(np.array([[5, 5]]), np.array([3])))[0]
    assert got == pytest.approx(a0 / 6 + a1 * 4 / 12, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=20))
def test_distribution_sums_to_one_and_matches_log_prob(rows):
    model = toy_model()
    ctx = np.array(rows, dtype=np.int64)
    dist = model.distribution(ctx)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=1e-12)
    assert (dist > 0).all()
    for w in range(len(VOCAB)):
        targets = np.full(len(ctx), w)
        np.testing.assert_allclose(np.log(dist[:, w]), model.log_prob(ctx, targets), rtol=1e-12)


def test_em_never_decreases_and_weights_stay_distributions(random_corpus):
    model = InterpolatedTrigram.fit_corpus(random_corpus, iterations=8)
    history = model.em_history
    assert len(history) == 9
    assert all(b >= a - 1e-12 for a, b in zip(history, history[1:], strict=False))
    assert history[-1] > history[0]
    np.testing.assert_allclose(model.weights.sum(axis=1), 1.0)
    assert (model.weights[model.no_bigram_bucket, 2:] == 0).all()
    # the fitted weights are the likelihood EM reported
    assert -history[-1] == pytest.approx(math.log(perplexity(model, random_corpus, "valid")), rel=1e-9)


def test_save_and_load(random_corpus, tmp_path):
    model = build_ngram("interpolated", random_corpus)
    save_ngram(model, tmp_path / "m")
    loaded = load_ngram(tmp_path / "m")
    assert isinstance(loaded, InterpolatedTrigram) and loaded.em_history == model.em_history
    assert perplexity(loaded, random_corpus, "test") == perplexity(model, random_corpus, "test")


def test_order_must_be_three(random_corpus):
    from nnlm.errors import NnlmError

    with pytest.raises(NnlmError, match="--order 3"):
        build_ngram("interpolated", random_corpus, 4)


@pytest.mark.brown
def test_brown_close_to_the_paper(brown):
    model = build_ngram("interpolated", brown)
    assert all(b >= a for a, b in zip(model.em_history, model.em_history[1:], strict=False))
    # paper: train 31, valid 352, test 336 (its tokenization differs slightly from NLTK's)
    assert 25 < perplexity(model, brown, "train") < 40
    assert 320 < perplexity(model, brown, "valid") < 390


def test_cli_prints_the_em_trace(toy_dir):
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "nnlm", "ngram", "--corpus", str(toy_dir), "--no-cache",
                           "--kind", "interpolated", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    trace = json.loads(proc.stdout)["details"]["em_valid_log_likelihood"]
    assert len(trace) == 6 and all(b >= a - 1e-12 for a, b in zip(trace, trace[1:], strict=False))
