"""The feed-forward net with tied output weights (`ModelConfig.tied`, U = C; a projection Q of the last hidden
layer onto the m features when h != m): its parameters, distributions that sum to 1, the sampled loss's value and
gradient against its definition (C's gradient from both sides), a run through `nnlm train`, and the refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import context_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_model_variants import vocab_of
from test_sampled import check_sampled_loss, skewed

from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.sampled import SampledLoss

SHAPES = [  # (n, h, m, direct, layers, layer_norm, residual, local[, sum_weights])
    (4, 5, 3, True, 1, False, False, 0),   # h != m: Q projects a onto the features
    (4, 3, 3, False, 1, False, False, 0),  # h = m: no projection
    (7, 5, 3, True, 2, True, True, 2),     # long-context's shape
    (9, 5, 3, True, 2, True, True, 2, "feature"),  # ... with the older words' sum weighted per feature
]


def tied_net(v: int, n: int, h: int, m: int, direct: bool, layers: int, layer_norm: bool, residual: bool,
             local: int, sum_weights: str = "position", seed: int = 0) -> NPLM:
    torch.manual_seed(seed)
    config = ModelConfig(v, n, h, m, direct, layers=layers, layer_norm=layer_norm, residual=residual, local=local,
                         sum_weights=sum_weights, tied=True)
    net = NPLM(config).double()
    with torch.no_grad():
        net.b.add_(0.3 * torch.randn_like(net.b))
    return net


@pytest.mark.parametrize("spec", SHAPES)
def test_u_is_c_and_the_count_is_the_parameters(spec):
    net = tied_net(29, *spec)
    assert net.U is net.C and "U" not in dict(net.named_parameters())
    assert (net.Q is not None) == (spec[1] != spec[2])
    assert sum(p.numel() for p in net.parameters()) == net.config.parameter_count()
    untied = ModelConfig(29, spec[0], spec[1], spec[2], spec[3], layers=spec[4], layer_norm=spec[5],
                         residual=spec[6], local=spec[7], sum_weights=(*spec, "position")[8])
    assert untied.parameter_count() - net.config.parameter_count() == 29 * spec[1] - (spec[1] * spec[2]
                                                                                    if spec[1] != spec[2] else 0)
    decayed, biases = net.decayed_parameters(), net.bias_parameters()
    assert len({id(p) for p in decayed}) == len(decayed)  # C once, not again as U
    assert {id(p) for p in decayed} | {id(p) for p in biases} == {id(p) for p in net.parameters()}
    assert ModelConfig.from_dict(json.loads(json.dumps(net.config.to_dict()))) == net.config


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(SHAPES), st.integers(0, 2**31 - 1))
def test_distribution_rows_sum_to_one(spec, seed):
    v = 13
    lm = NeuralLM(tied_net(v, *spec, seed=seed % 1000).float(), vocab_of(v), "<p>")
    ctx = np.random.default_rng(seed).integers(0, v, size=(9, spec[0] - 1))
    dist = lm.distribution(ctx)
    assert np.all(dist >= 0)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    targets = np.arange(9) % v
    np.testing.assert_allclose(lm.log_prob(ctx, targets), np.log(dist[np.arange(9), targets]), atol=1e-5)


def test_the_output_is_c_times_the_projected_hidden_layer():
    net = tied_net(11, *SHAPES[0])
    ctx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    x = net.features(ctx)
    a = torch.tanh(net.d + x @ net.H.t())
    want = net.b + x @ net.W.t() + (a @ net.Q.t()) @ net.C.t()
    torch.testing.assert_close(net(ctx), want)


@pytest.mark.parametrize("kind", ["sampled", "nce"])
@pytest.mark.parametrize("spec", SHAPES)
def test_sampled_losses_match_their_definition_and_finite_differences(kind, spec):
    net = tied_net(13, *spec)
    loss = SampledLoss(kind, skewed(13), 5, alpha=0.3)
    check_sampled_loss(kind, net, loss, *context_batch(13, spec[0], seed=2), entries=2)
    assert sorted(name for name, _, _ in loss.touched).count("C") == 1  # one leaf: each row updated once a step


def test_with_k_covering_v_and_uniform_q_the_sampled_loss_is_the_full_softmax():
    net = tied_net(13, *SHAPES[2])
    ctx, tgt = torch.randint(0, 13, (9, 6)), torch.randint(0, 13, (9,))
    uniform = torch.full((13,), 1 / 13, dtype=torch.float64)
    plain = SampledLoss("sampled", uniform, 13, alpha=0.0)
    torch.testing.assert_close(plain(net, ctx, tgt), F.cross_entropy(net(ctx), tgt), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fields", [dict(hidden=0), dict(energy=True), dict(output_classes=3),
                                    dict(output_tree=2), dict(recurrent="lstm")])
def test_what_cannot_be_tied_is_refused(fields):
    with pytest.raises(NnlmError, match="--tied"):
        ModelConfig(**(dict(vocab_size=10, order=5, hidden=4, features=2, direct=False, tied=True) | fields))


@pytest.mark.parametrize("loss", ["full", "sampled"])
def test_a_tied_net_trains_saves_and_loads_through_nnlm_train(loss, random_corpus, tmp_path, capsys):
    from nnlm.cli import main
    from nnlm.neural.run.checkpoint import load_neural, read_run
    from nnlm.neural.run.run_config import Run, open_corpus

    out = tmp_path / "run"
    args = ["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--order", "6", "--hidden", "6",
            "--features", "4", "--layers", "2", "--layer-norm", "--residual", "--local", "2", "--tied",
            "--epochs", "2", "--batch-size", "32", "--threads", "1", "--loss", loss, "--json"]
    assert main(args) == 0
    run, _, config = read_run(out)
    assert config.tied and config.to_dict()["tied"] is True
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["best"]["valid_ppl"]
    lm = load_neural(out)
    assert lm.net.U is lm.net.C and lm.net.Q is not None
    assert perplexity(lm, open_corpus(Run.from_json(run)), "valid") == pytest.approx(best, rel=1e-3)


def test_a_bad_tied_run_is_one_line_and_writes_nothing(random_corpus, tmp_path, capsys):
    from nnlm.cli import main

    out = tmp_path / "run"
    code = main(["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--hidden", "0", "--tied"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--tied" in err and not out.exists()
