"""The scoring of a neural LM, chosen once (nnlm.neural.lm.scoring): each Scoring gives its formula, log Z comes
with the pass that computed it, `with_scoring` makes a new adapter over the same net, and a model is never
changed by choosing another way to score it."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.neural.lm import direct_tables
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import BF16, EXACT, UNNORMALIZED, V_SLICE, Scoring
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.nets import build_net, language_model
from nnlm.ngram.simple import UniformModel
from nnlm.use import use_unnormalized

V = V_SLICE + 89  # more words than one slice of the exact path


def vocab_of(size: int) -> Vocabulary:
    return Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(size - 2)))


def noisy(v: int = V, **fields) -> torch.nn.Module:
    torch.manual_seed(0)
    net = build_net(ModelConfig(**dict(vocab_size=v, order=4, hidden=6, features=5, direct=True) | fields))
    if fields.get("output_classes"):
        net.set_classes(np.random.default_rng(0).permutation(np.arange(v) % fields["output_classes"]))
    with torch.no_grad():
        for w in net.parameters():
            w.normal_(0, 0.7)  # logits of several units: rounding would show
    return net


def logits64(net, ctx: np.ndarray) -> torch.Tensor:
    """y = b + W x + U tanh(d + H x) [N, |V|] written out in float64."""
    p = {k: w.detach().double() for k, w in net.named_parameters()}
    x = p["C"][torch.as_tensor(ctx)].flatten(1)
    return p["b"] + x @ p["W"].t() + torch.tanh(p["d"] + x @ p["H"].t()) @ p["U"].t()


@pytest.fixture
def data():
    rng = np.random.default_rng(1)
    return rng.integers(0, V, size=(300, 3)), rng.integers(0, V, size=300)


@pytest.mark.parametrize("tables", [False, True])
def test_each_scoring_gives_its_formula_and_log_z_only_where_the_pass_computed_it(data, tables, monkeypatch):
    monkeypatch.setattr(direct_tables, "TOKENS_PER_TABLE_ROW", 0)  # a long pass builds the tables at any length
    ctx, targets = data
    net = noisy()
    y = logits64(net, ctx)
    log_z = torch.logsumexp(y, 1).numpy()
    exact = (y[np.arange(len(ctx)), targets] - torch.logsumexp(y, 1)).numpy()
    scores = {}
    for scoring in (EXACT, BF16, UNNORMALIZED):
        lm = NeuralLM(net, vocab_of(V), "<p>", scoring=scoring)
        with lm.long_pass(len(ctx)) if tables else contextlib.nullcontext():
            assert (lm._tables is not None) == (tables and scoring.normalized)  # y[target] alone needs none
            log_p, z = lm.log_prob_and_log_z(ctx, targets)
            np.testing.assert_array_equal(log_p, lm.log_prob(ctx, targets))  # one path, with or without log Z
            scores[scoring] = log_p, z, lm.log_partition(ctx)
    log_p, z, partition = scores[EXACT]
    np.testing.assert_allclose(log_p, exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, log_z, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(z, partition)  # the same sums: log Z of the pass is log_partition's
    log_p, z, _ = scores[BF16]
    if tables:  # bf16 asks for speed: the tables are faster than its product, and exact
        np.testing.assert_array_equal(log_p, scores[EXACT][0])
        np.testing.assert_array_equal(z, scores[EXACT][1])
    else:
        assert z is None and not np.array_equal(log_p, scores[EXACT][0])  # the bf16 product really was used
        np.testing.assert_allclose(log_p, exact, atol=0.05)
    log_p, z, partition = scores[UNNORMALIZED]
    assert z is None
    np.testing.assert_allclose(log_p, y[np.arange(len(ctx)), targets].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(partition, log_z, rtol=1e-5, atol=1e-5)  # log_partition is exact whatever the scoring


def test_with_scoring_shares_the_net_and_leaves_the_model_alone(data):
    ctx, targets = data
    lm = NeuralLM(noisy(), vocab_of(V), "<p>")
    lm.step_cache_bytes = 1 << 20
    before = lm.log_prob(ctx, targets)
    raw = lm.with_scoring(UNNORMALIZED)
    assert type(raw) is NeuralLM and raw is not lm and raw.net is lm.net  # the weights shared, not copied
    assert raw.scoring == UNNORMALIZED and lm.scoring == EXACT and raw.step_cache_bytes == 1 << 20
    unnormalized = raw.log_prob(ctx, targets)
    assert not np.allclose(unnormalized, before)
    np.testing.assert_array_equal(lm.log_prob(ctx, targets), before)  # the model asked is unchanged
    np.testing.assert_array_equal(raw.with_scoring(EXACT).log_prob(ctx, targets), before)
    with torch.no_grad():
        lm.net.b.add_(1.0)  # one net: a change of its weights is seen by both
    np.testing.assert_allclose(raw.log_prob(ctx, targets), unnormalized + 1.0, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(lm.log_prob(ctx, targets), before, rtol=1e-5, atol=1e-5)  # softmax: shift-invariant


def test_a_scoring_is_immutable_checked_and_not_an_attribute_to_assign():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EXACT.normalized = False
    with pytest.raises(NnlmError, match="precision must be one of fp32, bf16"):
        Scoring(precision="fp16")
    assert Scoring() == EXACT and Scoring("bf16") == BF16 and EXACT.exact and not BF16.exact
    lm = NeuralLM(noisy(), vocab_of(V), "<p>")
    with pytest.raises(AttributeError):
        lm.scoring = UNNORMALIZED
    with pytest.raises(NnlmError, match="Scoring"):
        NeuralLM(lm.net, lm.vocab, "<p>", scoring="bf16")


def test_the_energy_and_class_adapters_have_the_same_interface(data):
    ctx, targets = data
    energy = language_model(noisy(energy=True), vocab_of(V), "<p>")
    log_p, z = energy.log_prob_and_log_z(ctx, targets)
    np.testing.assert_array_equal(log_p, energy.log_prob(ctx, targets))
    np.testing.assert_array_equal(z, energy.log_partition(ctx))
    raw = energy.with_scoring(UNNORMALIZED)
    assert type(raw) is type(energy) and raw.net is energy.net and raw.log_prob_and_log_z(ctx, targets)[1] is None
    np.testing.assert_allclose(raw.log_prob(ctx, targets) - log_p, z, rtol=1e-5, atol=1e-5)  # y = log P + log Z
    with pytest.raises(NnlmError, match="fp32"):
        energy.with_scoring(BF16)

    factored = language_model(noisy(output_classes=8), vocab_of(V), "<p>")
    log_p, z = factored.log_prob_and_log_z(ctx, targets)
    assert z is None  # the factored scores never form log Z
    low = factored.with_scoring(BF16)  # no |V|-wide product to speed up: scored exactly
    assert type(low) is type(factored) and low.net is factored.net
    np.testing.assert_array_equal(low.log_prob(ctx, targets), log_p)
    with pytest.raises(NnlmError, match="--unnormalized: this model's class-factored"):
        factored.with_scoring(UNNORMALIZED)


def test_use_unnormalized_returns_a_new_model(data):
    ctx, targets = data
    lm = NeuralLM(noisy(), vocab_of(V), "<p>")
    raw = use_unnormalized(lm)
    assert raw.scoring == UNNORMALIZED and lm.scoring == EXACT and raw.net is lm.net
    with pytest.raises(NnlmError, match="neural models only"):
        use_unnormalized(UniformModel(vocab_of(V)))
