import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnlm.errors import NnlmError
from nnlm.lm import perplexity, split_log_probs
from nnlm.mixture import Mixture, fit_weights_em
from nnlm.ngram.simple import AddOneBigram, UniformModel


@pytest.fixture
def two_models(random_corpus):
    return AddOneBigram.fit(random_corpus.vocab, random_corpus.train), UniformModel(random_corpus.vocab)


def test_mixture_log_prob_is_the_weighted_average(random_corpus, two_models):
    a, u = two_models
    mix = Mixture([a, u], [0.3, 0.7])
    pa = np.exp(split_log_probs(a, random_corpus, "valid"))
    pu = np.exp(split_log_probs(u, random_corpus, "valid"))
    assert np.allclose(np.exp(split_log_probs(mix, random_corpus, "valid")), 0.3 * pa + 0.7 * pu)
    assert mix.order == 2


# the fixtures are read-only, so sharing them across examples is safe
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(0.0, 1.0), st.lists(st.integers(0, 40), min_size=1, max_size=8))
def test_mixture_distribution_sums_to_one(random_corpus, two_models, w, prev):
    mix = Mixture(list(two_models), [w, 1 - w])
    ctx = np.array(prev)[:, None] % len(random_corpus.vocab)
    dist = mix.distribution(ctx)
    assert np.allclose(dist.sum(axis=1), 1.0)
    t = np.arange(len(prev)) % len(random_corpus.vocab)
    assert np.allclose(np.log(dist[np.arange(len(prev)), t]), mix.log_prob(ctx, t))


def test_em_never_decreases_and_beats_fixed_weights(random_corpus, two_models):
    models = list(two_models)
    lp = np.stack([split_log_probs(m, random_corpus, "valid") for m in models])
    fit = fit_weights_em(lp, iterations=30)
    assert all(b >= a - 1e-12 for a, b in zip(fit.log_likelihood, fit.log_likelihood[1:], strict=False))
    best = Mixture(models, fit.weights)
    even = perplexity(Mixture(models, [0.5, 0.5]), random_corpus, "valid")
    assert perplexity(best, random_corpus, "valid") <= even + 1e-9


def test_em_with_buckets_is_monotone_per_bucket():
    rng = np.random.default_rng(0)
    lp = np.log(rng.dirichlet(np.ones(5), size=(3, 400))[..., 0])
    buckets = rng.integers(0, 4, size=400)
    fit = fit_weights_em(lp, buckets, n_buckets=4, iterations=25)
    assert fit.weights.shape == (4, 3) and np.allclose(fit.weights.sum(axis=1), 1)
    assert all(b >= a - 1e-12 for a, b in zip(fit.log_likelihood, fit.log_likelihood[1:], strict=False))


def test_em_recovers_a_known_weight():
    # data drawn from 0.8 * A + 0.2 * B where A and B are disjoint point masses
    rng = np.random.default_rng(1)
    from_a = rng.random(5000) < 0.8
    lp = np.stack([np.where(from_a, 0.0, -50.0), np.where(from_a, -50.0, 0.0)])
    assert fit_weights_em(lp, iterations=50).weights[0, 0] == pytest.approx(0.8, abs=0.02)


@pytest.mark.parametrize("weights, message", [([0.5, 0.6], "sum to 1"), ([1.2, -0.2], "non-negative"),
                                              ([1.0], "weights for 2")])
def test_bad_weights(two_models, weights, message):
    with pytest.raises(NnlmError, match=message):
        Mixture(list(two_models), weights)


def test_vocabulary_mismatch(two_models):
    from nnlm.data import Vocabulary

    with pytest.raises(NnlmError, match="share one vocabulary"):
        Mixture([two_models[0], UniformModel(Vocabulary(("<unk>", "z")))], [0.5, 0.5])


def test_mix_on_corpus_modes_agree_with_the_mixture_model(random_corpus, two_models):
    from nnlm.mixture import mix_on_corpus

    for mode, fixed in (("fixed", [0.5, 0.5]), ("em", None), ("em-buckets", None)):
        fitted = mix_on_corpus(list(two_models), random_corpus, mode, fixed)
        # the reused component log-probs give exactly what the mixture model computes itself
        assert np.allclose(fitted.split_log_probs["test"], split_log_probs(fitted.model, random_corpus, "test"))
        if fitted.em:
            ll = fitted.em.log_likelihood
            assert all(b >= a - 1e-12 for a, b in zip(ll, ll[1:], strict=False))
    assert fitted.model.weights.shape[0] > 1  # em-buckets: one row of weights per bucket


def test_cli_mix(random_corpus, tmp_path, capsys):
    """`nnlm mix` in a real process as a user runs it; its refusals through nnlm.cli.main in this process
    (helpers.nnlm_cli: the same command lines without an interpreter start each)."""
    import json
    import subprocess

    from helpers import assert_one_line_error, nnlm_cli
    from test_cli import run

    def in_process(*args: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(args, *nnlm_cli(capsys, *args))

    root = str(tmp_path / "rand")
    proc = run("mix", "addone:2", "uniform", "--corpus", root, "--weights", "em", "--json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["mode"] == "em" and set(out["perplexity"]) == {"valid", "test"}
    assert_one_line_error(in_process("mix", "addone:2", "uniform", "--corpus", root, "--weights", "0.7,0.7"),
                          "sum to 1")
    assert_one_line_error(in_process("mix", "magic:3", "--corpus", root), "neither a saved model")


def test_parameter_counts_add_up(random_corpus, two_models):
    a, u = two_models
    assert u.parameter_count() == 0 and a.parameter_count() > 0
    assert Mixture([a, u], [0.5, 0.5]).parameter_count() == a.parameter_count() + 2
