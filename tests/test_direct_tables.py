"""Exact scoring from the direct connections' per-position tables (nnlm.neural.lm.direct_tables): the
same log-probabilities as the plain formula, built only for long passes within the memory budget,
dropped when the weights change, freed after the pass."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nnlm.data.vocab import Vocabulary
from nnlm.lm import perplexity, split_log_probs
from nnlm.mixture import Mixture
from nnlm.neural.lm import direct_tables
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import BF16, UNNORMALIZED
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.ngram.simple import UniformModel


def vocab_of(size: int) -> Vocabulary:
    return Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(size - 2)))


def plain_log_softmax(net: NPLM, ctx: np.ndarray) -> np.ndarray:
    """log softmax(b + W x + U tanh(d + H x)) in float64, each term on its own."""
    p = {k: v.detach().double() for k, v in net.named_parameters()}
    x = p["C"][torch.as_tensor(ctx)].flatten(1)
    y = p["b"] + x @ p["W"].t()
    if "H" in p:
        y = y + torch.tanh(p["d"] + x @ p["H"].t()) @ p["U"].t()
    return torch.log_softmax(y, dim=1).numpy()


@pytest.fixture
def always(monkeypatch):
    """Tables for any pass length (the real rule wants 16 |V| tokens)."""
    monkeypatch.setattr(direct_tables, "TOKENS_PER_TABLE_ROW", 0)
    monkeypatch.setattr(direct_tables, "ROWS", 16)  # several bags, the last one partial


def noisy_net(v: int, n: int, h: int, m: int, seed: int = 3) -> NPLM:
    torch.manual_seed(seed)
    net = NPLM(ModelConfig(vocab_size=v, order=n, hidden=h, features=m, direct=True))
    with torch.no_grad():
        for w in net.parameters():
            w.normal_(0, 1.0)  # logits of several units: rounding would show
    return net


@pytest.mark.parametrize("n, h", [(4, 6), (4, 0), (2, 3), (6, 1)])
def test_tables_give_the_plain_formula(always, n, h):
    net = noisy_net(97, n, h, 5)
    lm = NeuralLM(net, vocab_of(97), "<p>")
    rng = np.random.default_rng(0)
    ctx, targets = rng.integers(0, 97, size=(203, n - 1)), rng.integers(0, 97, size=203)
    expected = plain_log_softmax(net, ctx)[np.arange(203), targets]
    plain = lm.log_prob(ctx, targets)
    with lm.long_pass(203):
        assert lm._tables is not None
        tabled = lm.log_prob(ctx, targets)
        log_z = lm.log_partition(ctx)
    assert lm._tables is None  # freed after the pass
    np.testing.assert_allclose(tabled, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tabled, plain, rtol=1e-5, atol=1e-5)
    assert not np.array_equal(tabled, plain)  # the tables really were used (other rounding)
    np.testing.assert_allclose(log_z, lm.log_partition(ctx), rtol=1e-5, atol=1e-5)


def test_tabled_rows_sum_to_one(always):
    net = noisy_net(61, 3, 4, 3, seed=4)
    lm = NeuralLM(net, vocab_of(61), "<p>")
    ctx = np.repeat(np.random.default_rng(1).integers(0, 61, size=(7, 2)), 61, axis=0)
    with lm.long_pass(len(ctx)):
        log_probs = lm.log_prob(ctx, np.tile(np.arange(61), 7)).reshape(7, 61)
    np.testing.assert_allclose(np.exp(log_probs).sum(axis=1), 1.0, rtol=0, atol=1e-5)


def test_weights_changed_during_the_pass_are_not_scored_from_stale_tables(always):
    net = noisy_net(50, 4, 3, 4)
    lm = NeuralLM(net, vocab_of(50), "<p>")
    rng = np.random.default_rng(2)
    ctx, targets = rng.integers(0, 50, size=(40, 3)), rng.integers(0, 50, size=40)
    with lm.long_pass(40):
        lm.log_prob(ctx, targets)
        with torch.no_grad():
            net.W.mul_(0.5)  # an optimizer step, in place
        got = lm.log_prob(ctx, targets)
        assert lm._tables is None
    np.testing.assert_allclose(got, plain_log_softmax(net, ctx)[np.arange(40), targets], rtol=1e-5, atol=1e-5)


def test_log_z_comes_with_the_tabled_pass(always):
    net = noisy_net(40, 3, 2, 3)
    lm = NeuralLM(net, vocab_of(40), "<p>")
    ctx, targets = np.random.default_rng(3).integers(0, 40, size=(50, 2)), np.zeros(50, dtype=np.int64)
    with lm.long_pass(50):
        log_p, log_z = lm.log_prob_and_log_z(ctx, targets)
        np.testing.assert_array_equal(log_p, lm.log_prob(ctx, targets))
    np.testing.assert_allclose(log_z, lm.log_partition(ctx), rtol=1e-5, atol=1e-5)


def test_no_tables_without_direct_connections_short_passes_or_memory(monkeypatch):
    net = NPLM(ModelConfig(vocab_size=30, order=3, hidden=4, features=2, direct=False))
    lm = NeuralLM(net, vocab_of(30), "<p>")
    with lm.long_pass(10**9):
        assert lm._tables is None
    direct = NeuralLM(noisy_net(30, 3, 4, 2), vocab_of(30), "<p>")
    with direct.long_pass(16 * 30 - 1):  # shorter than the rule's 16 |V| tokens
        assert direct._tables is None
    with direct.long_pass(16 * 30):
        assert direct._tables is not None
    monkeypatch.setattr(direct_tables, "available_bytes", lambda: 3 * direct_tables.table_bytes(2, 30, 30) - 1)
    with direct.long_pass(10**9):  # more than a third of the free memory
        assert direct._tables is None
    monkeypatch.setattr(direct_tables, "available_bytes", lambda: None)
    with direct.long_pass(10**9):
        assert direct._tables is None


def test_split_scoring_and_mixtures_use_the_tables(always, random_corpus, monkeypatch):
    torch.manual_seed(0)
    net = NPLM(ModelConfig(len(random_corpus.vocab), 4, 5, 6, direct=True))
    lm = NeuralLM(net, random_corpus.vocab, random_corpus.pad_token)
    built, original = [], direct_tables.position_tables
    monkeypatch.setattr(direct_tables, "position_tables", lambda *a: built.append(1) or original(*a))
    tabled = split_log_probs(lm, random_corpus, "valid")
    mixed = perplexity(Mixture([lm, UniformModel(random_corpus.vocab)], [0.5, 0.5]), random_corpus, "test")
    assert len(built) == 2 and lm._tables is None
    lm_plain = NeuralLM(net, random_corpus.vocab, random_corpus.pad_token)
    np.testing.assert_allclose(tabled, [*lm_plain.log_prob(*_split(random_corpus, "valid", 3))], rtol=1e-5, atol=1e-5)
    plain_mix = Mixture([lm_plain, UniformModel(random_corpus.vocab)], [0.5, 0.5])
    np.testing.assert_allclose(mixed, np.exp(-plain_mix.log_prob(*_split(random_corpus, "test", 3)).mean()), rtol=1e-6)


def _split(corpus, split: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    from nnlm.lm import contexts

    positions = np.arange(len(corpus.split(split))) + corpus.split_offset(split)
    stream = corpus.stream()
    return contexts(stream, positions, k, corpus.pad_id), stream[positions].astype(np.int64)


def test_extreme_logits_are_redone_with_the_max_subtracted(always):
    net = noisy_net(40, 3, 2, 3)
    with torch.no_grad():
        net.b[:5] += 200.0   # rows whose exp overflows fp32
        net.b[5:] -= 300.0
    lm = NeuralLM(net, vocab_of(40), "<p>")
    ctx, targets = np.random.default_rng(5).integers(0, 40, size=(30, 2)), np.arange(30) % 40
    with lm.long_pass(30):
        got = lm.log_prob(ctx, targets)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, plain_log_softmax(net, ctx)[np.arange(30), targets], rtol=1e-5, atol=1e-3)
    with torch.no_grad():
        net.b -= 500.0       # every logit far below: sums that underflow
    with lm.long_pass(30):
        low = lm.log_prob(ctx, targets)
    np.testing.assert_allclose(low, plain_log_softmax(net, ctx)[np.arange(30), targets], rtol=1e-5, atol=1e-3)


def test_a_bf16_long_pass_is_scored_exactly_from_the_tables(always):
    """bf16 asks for speed: where the tables are built, they are faster than its product and exact."""
    net = noisy_net(89, 4, 5, 4, seed=5)
    rng = np.random.default_rng(6)
    ctx, targets = rng.integers(0, 89, size=(150, 3)), rng.integers(0, 89, size=150)
    exact = NeuralLM(net, vocab_of(89), "<p>")
    fast = NeuralLM(net, vocab_of(89), "<p>", scoring=BF16)
    with exact.long_pass(150):
        expected = exact.log_prob(ctx, targets)
    with fast.long_pass(150):
        assert fast._tables is not None
        np.testing.assert_array_equal(fast.log_prob(ctx, targets), expected)
    rounded = fast.log_prob(ctx, targets)  # outside a long pass: the bf16 product, other rounding
    assert not np.allclose(rounded, expected, rtol=0, atol=1e-6)
    unnormalized = NeuralLM(net, vocab_of(89), "<p>", scoring=UNNORMALIZED)
    with unnormalized.long_pass(150):
        assert unnormalized._tables is None  # y[target] alone needs no table
