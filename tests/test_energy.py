"""The energy-minimization network (paper section 5.1, nnlm.neural.net.energy): its formula against the
[N, |V|, h] definition written out, its parameter count, distributions that sum to 1, gradients against
finite differences (the chunked kernel, the full loss, the sampled and NCE losses), training through
`nnlm train` with a save/load round trip, every command's path through the LanguageModel interface, and
the one-line refusals."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import api_call, check_full_softmax_gradients, context_batch
from test_sampled import check_sampled_loss, skewed

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural.lm.scoring import BF16, UNNORMALIZED
from nnlm.neural.net import energy
from nnlm.neural.net.energy import EnergyLM, EnergyNPLM, EnergySampledLoss, hidden_sums
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.nets import build_net, language_model
from nnlm.neural.net.presets import preset, run_name

SHAPES = [  # (n, h, m, direct, shared v)
    (3, 4, 3, False, False),
    (4, 5, 2, True, False),
    (3, 3, 4, False, True),
    (2, 6, 3, True, True),
]


def energy_net(v: int, n: int, h: int, m: int, direct: bool, shared: bool, seed: int = 0) -> EnergyNPLM:
    """A float64 energy net with its biases moved off zero (so a gradient through them is not a special case)."""
    torch.manual_seed(seed)
    net = build_net(ModelConfig(v, n, h, m, direct, energy=True, energy_shared_v=shared)).double()
    with torch.no_grad():
        net.b.add_(0.5 * torch.randn_like(net.b))
        net.d.add_(0.3 * torch.randn_like(net.d))
    return net


def written_out(net: EnergyNPLM, ctx: torch.Tensor) -> torch.Tensor:
    """E [N, |V|] from the paper's formula with the whole [N, |V|, h] tensor: x = (C(w), context features)."""
    v_size, m = net.C.shape
    ctx_x = F.embedding(ctx, net.C).flatten(1)                                      # [N, (n-1) m]
    x = torch.cat([net.C[None].expand(len(ctx), -1, -1), ctx_x[:, None].expand(-1, v_size, -1)], 2)
    H = torch.cat([net.H0, net.H], 1)                                               # [h, n m]
    hidden = torch.tanh(net.d + x @ H.t())                                          # [N, |V|, h]
    e = (hidden * net.v).sum(2) + net.b
    if net.W is not None:
        e = e + ctx_x @ net.W.t()
    return e


def vocab_of(size: int) -> Vocabulary:
    return Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(size - 2)))


@pytest.mark.parametrize("shape", SHAPES)
def test_logits_are_minus_the_energy_and_the_count_is_the_parameters(shape):
    net = energy_net(11, *shape)
    ctx = torch.randint(0, 11, (7, shape[0] - 1))
    torch.testing.assert_close(net(ctx), -written_out(net, ctx))
    assert net.config.parameter_count() == sum(p.numel() for p in net.parameters())
    targets = torch.randint(0, 11, (7,))
    net.eval()
    picked = net(ctx).gather(1, targets[:, None])[:, 0]
    torch.testing.assert_close(net.target_logits(net.features(ctx), targets), picked)


def test_the_parameter_count_matches_the_first_model():
    """v indexed by the output word: the paper's count |V|(1+m+h) + h(1+(n-1)m) of the net without direct
    connections, plus H_0's h m; a shared v leaves out (|V|-1) h."""
    v, n, h, m = 17907, 5, 50, 60
    first = ModelConfig(v, n, h, m, direct=False).parameter_count()
    assert first == v * (1 + m + h) + h * (1 + (n - 1) * m)
    assert preset("energy", v).parameter_count() == first + h * m
    shared = ModelConfig(v, n, h, m, False, energy=True, energy_shared_v=True)
    assert shared.parameter_count() == first + h * m - (v - 1) * h


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_the_chunked_kernel_is_the_sum_it_names_and_its_gradient(monkeypatch, rows):
    monkeypatch.setattr(energy, "BLOCK_BYTES", rows * 8 * 9)  # blocks of `rows` rows of 9 words (float64)
    gen = torch.Generator().manual_seed(0)
    a, gt, vt = (torch.randn(s, dtype=torch.float64, generator=gen, requires_grad=True)
                 for s in ((5, 4), (4, 9), (4, 9)))
    keep = (torch.rand(5, 4, dtype=torch.float64, generator=gen) > 0.3).double() / 0.7
    want = (keep[:, :, None] * vt[None] * torch.tanh(a[:, :, None] + gt[None])).sum(1)
    torch.testing.assert_close(hidden_sums(a.detach(), gt.detach(), vt.detach(), keep), want.detach())
    for mask in (None, keep):
        assert torch.autograd.gradcheck(lambda a, gt, vt, mask=mask: energy._HiddenSums.apply(a, gt, vt, mask),
                                        (a, gt, vt))


@pytest.mark.parametrize("shape", SHAPES)
def test_full_softmax_gradients_match_finite_differences(shape):
    check_full_softmax_gradients(energy_net(9, *shape), 9, shape[0])


@pytest.mark.parametrize("kind", ["sampled", "nce"])
@pytest.mark.parametrize("shape", SHAPES)
def test_sampled_losses_match_their_definition_and_finite_differences(kind, shape):
    net = energy_net(13, *shape)  # (its definition: from the full logits y = -E)
    check_sampled_loss(kind, net, EnergySampledLoss(kind, skewed(13), 5, alpha=0.3),
                       *context_batch(13, shape[0], seed=2), entries=2)


def test_sampling_every_word_is_the_full_softmax():
    net = energy_net(10, 3, 4, 3, True, False)
    ctx, tgt = torch.randint(0, 10, (8, 2)), torch.randint(0, 10, (8,))
    loss = EnergySampledLoss("sampled", skewed(10), 10, alpha=0.0)
    torch.testing.assert_close(loss(net, ctx, tgt), F.cross_entropy(net(ctx), tgt))


@pytest.mark.parametrize("shape", SHAPES)
def test_distributions_sum_to_one_and_agree_with_log_prob(shape):
    net = energy_net(12, *shape).float()
    lm = language_model(net, vocab_of(12), "<p>")
    assert isinstance(lm, EnergyLM)
    rng = np.random.default_rng(0)
    ctx, tgt = rng.integers(0, 12, (300, shape[0] - 1)), rng.integers(0, 12, 300)
    dist = lm.distribution(ctx)
    np.testing.assert_allclose(dist.sum(1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lm.log_prob(ctx, tgt), np.log(dist[np.arange(300), tgt]), rtol=1e-5, atol=1e-5)
    energies = written_out(copy.deepcopy(net).double(), torch.as_tensor(ctx)).detach()
    np.testing.assert_allclose(lm.log_partition(ctx), torch.logsumexp(-energies, 1).numpy(), rtol=1e-5)


def test_unnormalized_scores_are_minus_the_target_energy():
    net = energy_net(12, 3, 4, 3, True, False).float()
    lm = language_model(net, vocab_of(12), "<p>", scoring=UNNORMALIZED)
    rng = np.random.default_rng(1)
    ctx, tgt = rng.integers(0, 12, (50, 2)), rng.integers(0, 12, 50)
    e = written_out(net.double(), torch.as_tensor(ctx)).detach().numpy()[np.arange(50), tgt]
    np.testing.assert_allclose(lm.log_prob(ctx, tgt), -e, rtol=1e-5, atol=1e-5)


def test_states_and_unknown_words_go_through_the_language_model_interface():
    net = energy_net(12, 4, 4, 3, True, False).float()
    lm = language_model(net, vocab_of(12), "<p>")
    words = np.array([3, 5, 7, 2, 9, 11])
    state, got = lm.begin_state(), []
    for w in words:
        lp, state = lm.advance(state, [w])
        got.append(lp[0])
    from nnlm.lm import stream_log_probs

    np.testing.assert_allclose(got, stream_log_probs(lm, words), rtol=1e-6)
    scores = lm.log_prob_text(["w1", "never-seen", "w3", "never-seen", "w4"])
    assert scores.shape == (5,) and np.isfinite(scores).all()
    with pytest.raises(NnlmError, match="fp32"):
        lm.with_scoring(BF16)


@pytest.mark.parametrize("fields", [dict(hidden=0), dict(layers=2), dict(layer_norm=True), dict(local=1)])
def test_impossible_energy_nets_are_refused(fields):
    base = dict(vocab_size=20, order=5, hidden=4, features=3, direct=False, energy=True)
    with pytest.raises(NnlmError, match="--energy needs one plain hidden layer"):
        ModelConfig(**base | fields)
    with pytest.raises(NnlmError, match="--energy-shared-v applies"):
        ModelConfig(20, 5, 4, 3, energy_shared_v=True)


def test_configs_without_the_energy_fields_load_as_before():
    config = preset("mlp1", 100)
    assert "energy" not in config.to_dict() and "energy_shared_v" not in config.to_dict()
    stored = preset("energy", 100).to_dict()
    assert stored["energy"] is True and ModelConfig.from_dict(stored) == preset("energy", 100)
    assert run_name("energy", preset("energy", 100)) == "energy"
    assert run_name("mlp1", ModelConfig(100, 5, 50, 60, energy=True, energy_shared_v=True)) \
        == "n5-h50-m60-direct-energy-shared-v"


@pytest.mark.parametrize("loss", ["full", "sampled", "nce"])
def test_the_energy_net_trains_saves_and_loads_through_nnlm_train(loss, random_corpus, tmp_path, capsys):
    from nnlm.cli import main
    from nnlm.neural.run.checkpoint import load_neural, read_run
    from nnlm.neural.run.run_config import Run, open_corpus

    out = tmp_path / "run"
    args = ["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--preset", "energy", "--hidden", "6",
            "--features", "4", "--order", "4", "--epochs", "2", "--batch-size", "32", "--threads", "1",
            "--loss", loss, "--json"] + (["--samples", "16"] if loss != "full" else [])
    assert main(args) == 0
    run, _, config = read_run(out)
    assert config == ModelConfig(config.vocab_size, 4, 6, 4, False, energy=True) and run["bf16"] is False
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["best"]["valid_ppl"]
    lm = load_neural(out)
    assert isinstance(lm, EnergyLM)
    assert perplexity(lm, open_corpus(Run.from_json(run)), "valid") == pytest.approx(best, rel=1e-5)
    assert main(["train", "--out", str(out), "--resume", "--epochs", "3", "--threads", "1", "--no-progress"]) == 0


def test_every_command_takes_an_energy_run(random_corpus, tmp_path, capsys):
    from nnlm.cli import main

    out, text = tmp_path / "run", tmp_path / "text.txt"
    assert main(["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--energy", "--energy-shared-v",
                 "--order", "3", "--hidden", "5", "--features", "3", "--epochs", "1", "--batch-size", "64",
                 "--threads", "1", "--no-progress"]) == 0
    text.write_text("w1 w2 w3 w4\nw5 w0 w9\n")
    capsys.readouterr()
    assert main(["eval", str(out), "--split", "valid,test"]) == 0
    assert main(["score", str(out), str(text)]) == 0
    assert main(["score", str(out), str(text), "--oov-vector"]) == 0
    assert main(["mix", str(out), "kn:3", "--corpus", str(tmp_path / "rand")]) == 0
    assert main(["generate", str(out), "--tokens", "5", "--seed", "1"]) == 0
    assert main(["eval", str(out), "--precision", "bf16"]) == 2
    assert "the energy network scores in fp32" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--energy", "--parallel", "hogwild"], "trains in one process, not with --parallel hogwild"),
    (["--preset", "energy", "--parallel", "ddp"], "trains in one process, not with --parallel ddp"),
    (["--energy", "--bf16"], "the energy network (--energy) trains in fp32"),
    (["--energy", "--layers", "2"], "--energy needs one plain hidden layer"),
    (["--energy-shared-v"], "--energy-shared-v applies to the energy network"),
])
def test_what_the_energy_net_cannot_do_is_one_line(args, message, random_corpus, tmp_path, capsys):
    from nnlm.cli import main

    out = tmp_path / "run"
    assert main(["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--epochs", "1",
                 "--threads", "1", "--no-progress", *args]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not Path(out / "model.safetensors").exists()


def test_nnlm_serve_answers_from_an_energy_run(random_corpus, tmp_path):
    from nnlm.cli import main
    from nnlm.lm import LOG10_E
    from nnlm.loading import load
    from nnlm.serve.api import served_models
    from nnlm.serve.server import ModelServer
    from nnlm.use import next_words, score_words

    out = tmp_path / "run"
    assert main(["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--preset", "energy", "--order",
                 "3", "--hidden", "4", "--features", "3", "--epochs", "1", "--threads", "1", "--no-progress"]) == 0
    srv = ModelServer(served_models([str(out)], timeout=20)).start()
    try:
        def call(path: str, body: dict) -> dict:
            status, answer = api_call(srv, path, body)
            assert status == 200, answer
            return answer

        model, text = load(out), "w1 w2 w3 never-seen\nw4 w5"
        words = call("/api/score", {"model": "run", "text": text, "top": 3})["words"]
        np.testing.assert_allclose([w["log10"] for w in words], score_words(model, text) * LOG10_E, rtol=1e-6)
        expected = next_words(model, "w1 w2", 4)
        assert [n["word"] for n in call("/api/next", {"model": "run", "history": "w1 w2", "k": 4})["next"]] \
            == [w for w, _ in expected]
        assert len(call("/api/generate", {"model": "run", "prompt": "w1", "tokens": 6, "seed": 5})["tokens"]) == 6
    finally:
        srv.stop()
