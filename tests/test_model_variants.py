"""The variants past the paper (more hidden layers, layer norm, residual layers, the wide-context branch):
their parameter count, distributions that sum to 1, gradients against finite differences with the full,
sampled and NCE losses, a save/load round trip through `nnlm train`, and old configs that load unchanged."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import check_full_softmax_gradients, context_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampled import check_sampled_loss, skewed

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.presets import BEYOND, preset, run_name
from nnlm.neural.net.sampled import SampledLoss

VARIANTS = [  # (n, h, direct, layers, layer_norm, residual, local[, summaries[, sum_weights]])
    (4, 5, True, 2, False, False, 0),
    (4, 5, False, 3, True, True, 0),
    (4, 5, True, 1, True, False, 0),
    (7, 5, True, 2, True, True, 2),
    (6, 0, True, 1, False, False, 1),
    (6, 4, False, 1, False, False, 3),
    (9, 5, True, 2, True, True, 2, 3),
    (8, 4, False, 1, False, False, 1, 2),
    (9, 5, True, 2, True, True, 2, 1, "feature"),
    (7, 4, False, 1, False, False, 1, 1, "feature"),
]


def variant(v: int, n: int, h: int, direct: bool, layers: int, layer_norm: bool, residual: bool, local: int,
            summaries: int = 1, sum_weights: str = "position", m: int = 3, seed: int = 0) -> NPLM:
    """A float64 net of the variant, with its gains and A moved off their initial values (so that a
    gradient through them is not a special case)."""
    torch.manual_seed(seed)
    config = ModelConfig(v, n, h, m, direct, layers=layers, layer_norm=layer_norm, residual=residual, local=local,
                         summaries=summaries, sum_weights=sum_weights)
    net = NPLM(config).double()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.startswith("g") or name in ("A", "b") or name.startswith("d"):
                p.add_(0.3 * torch.randn_like(p))
    return net


@pytest.fixture
def rand_dir(random_corpus, tmp_path) -> Path:
    return tmp_path / "rand"


def vocab_of(size: int) -> Vocabulary:
    return Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(size - 2)))


@pytest.mark.parametrize("spec", VARIANTS)
def test_parameter_count_is_the_parameters(spec):
    net = variant(29, *spec)
    assert sum(p.numel() for p in net.parameters()) == net.config.parameter_count()
    assert {id(p) for p in net.decayed_parameters()} | {id(p) for p in net.bias_parameters()} \
        == {id(p) for p in net.parameters()}


def test_a_paper_config_is_written_and_read_as_before():
    old = {"vocab_size": 100, "order": 5, "hidden": 50, "features": 60, "direct": True}  # a run.json from before
    config = ModelConfig.from_dict(old)
    assert config.to_dict() == old and config == preset("mlp1", 100)
    assert [name for name, _ in NPLM(config).named_parameters()] == ["C", "b", "W", "H", "d", "U"]
    deep = ModelConfig(100, 8, 50, 60, layers=2, layer_norm=True, residual=True, local=3)
    assert ModelConfig.from_dict(json.loads(json.dumps(deep.to_dict()))) == deep


@pytest.mark.parametrize("fields", [dict(layers=0), dict(residual=True), dict(layers=2, hidden=0),
                                    dict(layer_norm=True, hidden=0), dict(local=3), dict(local=-1),
                                    dict(layers=True), dict(layer_norm=1), dict(summaries=2),
                                    dict(local=1, summaries=4), dict(local=1, summaries=0),
                                    dict(sum_weights="feature"), dict(local=1, summaries=2, sum_weights="feature"),
                                    dict(local=1, sum_weights="word")])
def test_impossible_variants_are_refused(fields):
    with pytest.raises(NnlmError):
        ModelConfig(**(dict(vocab_size=10, order=5, hidden=4, features=2) | fields))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(VARIANTS), st.integers(0, 2**31 - 1))
def test_distribution_rows_sum_to_one(spec, seed):
    v = 13
    lm = NeuralLM(variant(v, *spec, seed=seed % 1000).float(), vocab_of(v), "<p>")
    with torch.no_grad():
        lm.net.b.mul_(50.0)
    ctx = np.random.default_rng(seed).integers(0, v, size=(9, spec[0] - 1))
    dist = lm.distribution(ctx)
    assert np.all(dist >= 0)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    targets = np.arange(9) % v
    np.testing.assert_allclose(lm.log_prob(ctx, targets), np.log(dist[np.arange(9), targets]), atol=1e-5)


def test_the_wide_context_branch_is_the_weighted_sum_of_the_older_words():
    net = variant(13, 7, 5, True, 1, False, False, 2)
    ctx = torch.tensor([[1, 2, 3, 4, 5, 6]])
    C, A = net.C.detach(), net.A.detach()
    older = A[0] * C[1] + A[1] * C[2] + A[2] * C[3] + A[3] * C[4]
    torch.testing.assert_close(net.features(ctx)[0], torch.cat([older, C[5], C[6]]))


def test_several_sums_are_their_weighted_sums_and_start_at_nested_averages():
    net = variant(13, 9, 5, True, 1, False, False, 2, summaries=3)  # 6 older words, 3 sums of them
    ctx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    C, A = net.C.detach(), net.A.detach()
    assert A.shape == (3, 6) and net.config.input_size == (2 + 3) * 3
    sums = [sum(A[k, j] * C[1 + j] for j in range(6)) for k in range(3)]
    torch.testing.assert_close(net.features(ctx)[0], torch.cat([*sums, C[7], C[8]]))
    fresh = NPLM(net.config).A.detach()
    torch.testing.assert_close(fresh, torch.tensor([[1 / 6] * 6, [0, 0, 0, 1 / 3, 1 / 3, 1 / 3],
                                                    [0, 0, 0, 0, 0, 1.0]]))
    assert run_name("mlp1", net.config).endswith("-local2-sums3")


def test_a_sum_weighted_per_feature_is_its_weighted_sum_and_starts_at_the_average():
    net = variant(13, 8, 5, True, 1, False, False, 2, sum_weights="feature")  # 5 older words, m = 3
    ctx = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    C, A = net.C.detach(), net.A.detach()
    assert A.shape == (5, 3) and net.config.input_size == (2 + 1) * 3
    older = torch.stack([sum(A[j, f] * C[1 + j, f] for j in range(5)) for f in range(3)])
    torch.testing.assert_close(net.features(ctx)[0], torch.cat([older, C[6], C[7]]))
    torch.testing.assert_close(NPLM(net.config).A.detach(), torch.full((5, 3), 0.2))
    assert run_name("mlp1", net.config).endswith("-local2-featsum")


@pytest.mark.parametrize("spec", VARIANTS)
def test_full_softmax_gradients_match_finite_differences(spec):
    check_full_softmax_gradients(variant(13, *spec), 13, spec[0])


@pytest.mark.parametrize("kind", ["sampled", "nce"])
@pytest.mark.parametrize("spec", VARIANTS)
def test_sampled_losses_match_their_definition_and_finite_differences(kind, spec):
    net = variant(13, *spec)
    check_sampled_loss(kind, net, SampledLoss(kind, skewed(13), 5, alpha=0.3), *context_batch(13, spec[0], seed=2),
                       entries=2)


def test_presets_past_the_paper_are_valid_and_named():
    for name, fields in BEYOND.items():
        config = preset(name, 1000)
        assert config.to_dict() == {"vocab_size": 1000} | {k: v for k, v in fields.items()
                                                          if k in config.to_dict()}
        assert run_name(name, config) == name
    assert run_name("mlp1", ModelConfig(50, 8, 50, 60, layers=2, layer_norm=True, local=3)) \
        == "n8-h50-m60-direct-l2-ln-local3"
    from dataclasses import fields

    from nnlm.neural.run.config import RunOptions
    from nnlm.neural.run.run_config import model_config

    shown = next(f for f in fields(RunOptions) if f.name == "preset").metadata["help"]
    assert all(name in shown for name in BEYOND)  # `nnlm train --help` names every preset
    deeper = model_config({"preset": "wide-context", "layers": 2, "layer_norm": True, "residual": True}, 1000)
    assert deeper == preset("deep-context", 1000)  # the variant options override a preset's fields


@pytest.mark.parametrize("loss", ["full", "sampled", "nce"])
def test_a_variant_trains_saves_and_loads_through_nnlm_train(loss, rand_dir, tmp_path, capsys):
    from nnlm.cli import main
    from nnlm.neural.run.checkpoint import load_neural, read_run
    from nnlm.neural.run.run_config import Run, open_corpus

    out = tmp_path / "run"
    args = ["train", "--corpus", str(rand_dir), "--out", str(out), "--order", "6", "--hidden", "6",
            "--features", "4", "--layers", "2", "--layer-norm", "--residual", "--local", "2", "--epochs", "2",
            "--batch-size", "32", "--threads", "1", "--loss", loss, "--json"]
    assert main(args) == 0
    run, _, config = read_run(out)
    assert config == ModelConfig(config.vocab_size, 6, 6, 4, layers=2, layer_norm=True, residual=True, local=2)
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["best"]["valid_ppl"]
    lm = load_neural(out)  # model.safetensors + run.json: the best epoch's weights, exact fp32 scoring
    assert lm.net.config == config and lm.net.A is not None and lm.net.g2 is not None
    assert perplexity(lm, open_corpus(Run.from_json(run)), "valid") == pytest.approx(best, rel=1e-3)
