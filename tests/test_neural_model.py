"""The NPLM: shapes and parameter count, autograd vs the paper's hand-derived backward pass,
distributions that sum to 1, Table 1 presets, and features for words outside V."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import tiny_nplm
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import BF16
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.presets import PRESETS, preset


def tiny(v=11, n=4, h=5, m=3, direct=True, seed=0) -> NPLM:
    return tiny_nplm(h, direct, v, n, m, seed=seed)


def vocab_of(size: int) -> Vocabulary:
    return Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(size - 2)))


@pytest.mark.parametrize("n,h,m", [(5, 50, 60), (2, 0, 1), (3, 7, 4), (6, 1, 9)])
def test_parameter_count_matches_the_paper(n, h, m):
    v = 97
    net = NPLM(ModelConfig(vocab_size=v, order=n, hidden=h, features=m, direct=True))
    assert sum(p.numel() for p in net.parameters()) == v * (1 + n * m + h) + h * (1 + (n - 1) * m)
    shapes = {name: tuple(p.shape) for name, p in net.named_parameters()}
    expected = {"C": (v, m), "b": (v,), "W": (v, (n - 1) * m)}
    if h:
        expected |= {"H": (h, (n - 1) * m), "d": (h,), "U": (v, h)}
    assert shapes == expected


def test_without_direct_connections_there_is_no_W():
    net = NPLM(ModelConfig(vocab_size=20, order=3, hidden=4, features=2, direct=False))
    assert net.W is None
    assert sum(p.numel() for p in net.parameters()) == net.config.parameter_count() == 20 * (1 + 2 + 4) + 4 * (1 + 4)


@pytest.mark.parametrize("n,h,m", [(1, 5, 3), (0, 5, 3), (3, 5, 0), (3, -1, 3)])
def test_impossible_shapes_are_refused(n, h, m):
    with pytest.raises(NnlmError):
        ModelConfig(vocab_size=10, order=n, hidden=h, features=m)


def hand_backward(net: NPLM, ctx: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Seed 004, section 2.4, for L = sum over examples of log P(w_t | context): plain torch ops,
    example by example, no autograd."""
    C, b = net.C.detach(), net.b.detach()
    W = net.W.detach() if net.W is not None else None
    H, d, U = (net.H.detach(), net.d.detach(), net.U.detach()) if net.H is not None else (None, None, None)
    grads = {name: torch.zeros_like(p) for name, p in net.named_parameters()}
    m = C.shape[1]
    for row, wt in zip(ctx.tolist(), target.tolist(), strict=True):
        x = torch.cat([C[w] for w in row])
        y = b.clone()
        if W is not None:
            y = y + W @ x
        if H is not None:
            o = d + H @ x
            a = torch.tanh(o)
            y = y + U @ a
        p = torch.exp(y - y.max())
        p = p / p.sum()
        dy = -p
        dy[wt] += 1.0                          # dL/dy_j = 1(j == w_t) - p_j
        grads["b"] += dy                        # dL/db = dL/dy
        dx = torch.zeros_like(x)
        if W is not None:
            grads["W"] += torch.outer(dy, x)   # dL/dW = dL/dy x^T
            dx += W.t() @ dy
        if H is not None:
            grads["U"] += torch.outer(dy, a)   # dL/dU = dL/dy a^T
            da = U.t() @ dy                     # dL/da = (dL/dy) U
            do = da * (1 - a * a)               # dL/do = dL/da (1 - a^2)
            grads["d"] += do                    # dL/dd = dL/do
            grads["H"] += torch.outer(do, x)   # dL/dH = dL/do x^T
            dx += H.t() @ do                    # dL/dx = H^T dL/do
        for k, w in enumerate(row):             # dL/dC(w_{t-k}) = the k-th block of dL/dx
            grads["C"][w] += dx[k * m:(k + 1) * m]
    return grads


@pytest.mark.parametrize("h,direct", [(5, True), (5, False), (0, True)])
def test_autograd_equals_the_hand_derived_backward_pass(h, direct):
    net = tiny(h=h, direct=direct)
    gen = torch.Generator().manual_seed(1)
    ctx = torch.randint(0, 11, (7, 3), generator=gen)
    ctx[0] = torch.tensor([4, 4, 4])  # a word repeated in one context: C's gradient accumulates
    target = torch.randint(0, 11, (7,), generator=gen)
    loglik = torch.log_softmax(net(ctx), dim=1).gather(1, target[:, None]).sum()
    net.zero_grad()
    loglik.backward()
    expected = hand_backward(net, ctx, target)
    assert set(expected) == {name for name, _ in net.named_parameters()}
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-10, atol=1e-12, msg=name)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 5), st.integers(0, 4), st.integers(1, 4), st.booleans(), st.integers(0, 2**31 - 1))
def test_distribution_rows_sum_to_one(n, h, m, direct, seed):
    torch.manual_seed(seed)
    v = 13
    lm = NeuralLM(NPLM(ModelConfig(v, n, h, m, direct)), vocab_of(v), "<p>")
    with torch.no_grad():  # large weights: the softmax must still be stable
        lm.net.b.mul_(50.0)
    ctx = np.random.default_rng(seed).integers(0, v, size=(9, n - 1))
    dist = lm.distribution(ctx)
    assert dist.shape == (9, v) and dist.dtype == np.float64
    assert np.all(dist >= 0)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    targets = np.arange(9) % v
    np.testing.assert_allclose(lm.log_prob(ctx, targets), np.log(dist[np.arange(9), targets]), atol=1e-5)


def test_scoring_in_chunks_equals_one_pass(monkeypatch):
    import nnlm.neural.lm.neural_lm as neural_lm
    import nnlm.neural.lm.scoring as scoring

    lm = NeuralLM(tiny().float(), vocab_of(11), "<p>")
    ctx = np.random.default_rng(0).integers(0, 11, size=(50, 3))
    targets = np.random.default_rng(1).integers(0, 11, size=50)
    whole = lm.log_prob(ctx, targets)
    monkeypatch.setattr(neural_lm, "EVAL_ROWS", 7)  # the adapter's blocks (its own binding of the name)
    monkeypatch.setattr(scoring, "SCORE_BYTES", 1)  # exact fp32 blocks of 16 rows
    np.testing.assert_allclose(lm.log_prob(ctx, targets), whole, rtol=1e-6)  # float32 matmul blocking


def plain_log_softmax(net: NPLM, ctx: np.ndarray) -> np.ndarray:
    """log softmax(b + W x + U tanh(d + H x)) written out in float64, each term on its own."""
    p = {k: v.detach().double() for k, v in net.named_parameters()}
    x = p["C"][torch.as_tensor(ctx)].flatten(1)
    y = p["b"] + (x @ p["W"].t() if "W" in p else 0.0)
    if "H" in p:
        y = y + torch.tanh(p["d"] + x @ p["H"].t()) @ p["U"].t()
    return torch.log_softmax(y, dim=1).numpy()


@pytest.mark.parametrize("h,direct", [(6, True), (6, False), (0, True)])
def test_fast_exact_scoring_is_the_plain_formula(monkeypatch, h, direct):
    import nnlm.neural.lm.scoring as scoring

    torch.manual_seed(3)
    net = NPLM(ModelConfig(vocab_size=97, order=4, hidden=h, features=5, direct=direct))
    with torch.no_grad():
        for w in net.parameters():
            w.normal_(0, 1.0)  # logits of several units either way: rounding would show
    lm = NeuralLM(net, vocab_of(97), "<p>")
    rng = np.random.default_rng(0)
    ctx, targets = rng.integers(0, 97, size=(203, 3)), rng.integers(0, 97, size=203)
    expected = plain_log_softmax(net, ctx)[np.arange(203), targets]
    monkeypatch.setattr(scoring, "SCORE_BYTES", 1)  # 16-row blocks, the last one partial
    for got in (lm.log_prob(ctx, targets), NeuralLM(net, vocab_of(97), "<p>").log_prob(ctx[:5], targets[:5])):
        np.testing.assert_allclose(got, expected[:len(got)], rtol=1e-5, atol=1e-5)  # fp32 rounding only
    p = {k: v.detach().double() for k, v in net.named_parameters()}
    x = p["C"][torch.as_tensor(ctx)].flatten(1)
    y = p["b"] + (x @ p["W"].t() if direct else 0.0) + (torch.tanh(p["d"] + x @ p["H"].t()) @ p["U"].t() if h else 0.0)
    np.testing.assert_allclose(lm.log_partition(ctx), torch.logsumexp(y, 1).numpy(), rtol=1e-5, atol=1e-5)


def test_fast_exact_scoring_sums_to_one_over_the_vocabulary():
    torch.manual_seed(4)
    net = NPLM(ModelConfig(vocab_size=61, order=3, hidden=4, features=3, direct=True))
    with torch.no_grad():
        net.b.normal_(0, 5.0)  # peaked
    lm = NeuralLM(net, vocab_of(61), "<p>")
    ctx = np.repeat(np.random.default_rng(1).integers(0, 61, size=(7, 2)), 61, axis=0)
    log_probs = lm.log_prob(ctx, np.tile(np.arange(61), 7)).reshape(7, 61)
    np.testing.assert_allclose(np.exp(log_probs).sum(axis=1), 1.0, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.exp(log_probs), lm.distribution(ctx[::61]), rtol=0, atol=1e-6)


def test_bf16_scoring_is_close_to_fp32_and_leaves_the_weights_alone():
    torch.manual_seed(0)
    net = NPLM(ModelConfig(300, 4, 8, 16, direct=True)).float()
    with torch.no_grad():
        net.b.normal_(0, 2.0)  # a peaked distribution, like a trained model's
    before = {k: v.clone() for k, v in net.state_dict().items()}
    ctx = np.random.default_rng(0).integers(0, 300, size=(400, 3))
    targets = np.random.default_rng(1).integers(0, 300, size=400)
    exact = NeuralLM(net, vocab_of(300), "<p>").log_prob(ctx, targets)
    fast = NeuralLM(net, vocab_of(300), "<p>", scoring=BF16).log_prob(ctx, targets)
    assert fast.dtype == np.float64 and not np.array_equal(fast, exact)  # bf16 products really were used
    np.testing.assert_allclose(fast, exact, atol=0.05)  # per token: bf16 rounding of logits
    assert abs(np.exp(-fast.mean()) / np.exp(-exact.mean()) - 1) < 5e-3  # (2e-5 for MLP1 on Brown)
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())


def test_perplexity_through_the_shared_function(random_corpus):
    torch.manual_seed(0)
    cfg = ModelConfig(len(random_corpus.vocab), 3, 4, 5)
    lm = NeuralLM(NPLM(cfg), random_corpus.vocab, random_corpus.pad_token)
    ppl = perplexity(lm, random_corpus, "valid")
    assert 0.5 * len(random_corpus.vocab) < ppl < 2 * len(random_corpus.vocab)  # untrained: near uniform


def test_presets_follow_table_1():
    assert list(PRESETS) == [f"mlp{k}" for k in range(1, 11)] + ["apnews"]
    assert PRESETS["apnews"] == (6, 60, 100, True)  # Table 2's AP News net
    assert PRESETS["mlp1"] == (5, 50, 60, True) and PRESETS["mlp3"] == (5, 0, 60, True)
    assert PRESETS["mlp5"] == (5, 50, 30, True) and PRESETS["mlp7"] == (3, 50, 30, True)
    assert PRESETS["mlp9"] == (5, 100, 30, False)
    for k in (1, 3, 5, 7, 9):
        assert PRESETS[f"mlp{k + 1}"] == PRESETS[f"mlp{k}"]  # mixed nets: same architecture
    cfg = preset("MLP1", 17907)
    assert (cfg.order, cfg.hidden, cfg.features, cfg.direct) == (5, 50, 60, True)
    with pytest.raises(NnlmError, match="unknown preset"):
        preset("mlp11", 10)


def test_oov_words_get_the_expected_feature_vector():
    torch.manual_seed(0)
    vocab = vocab_of(12)
    lm = NeuralLM(NPLM(ModelConfig(12, 3, 4, 5)).double(), vocab, "<p>")
    text = ["w1", "w2", "zebra", "w3", "zebra", "w4", "w5"]
    got = lm.log_prob_text(text)

    # By hand: zebra's feature is sum_i C(i) P(i | w1 w2); it is then used in later contexts.
    net, C = lm.net, lm.net.C.detach()
    with torch.no_grad():
        ctx = torch.tensor([[vocab.id("w1"), vocab.id("w2")]])
        p = torch.softmax(net(ctx)[0], 0)
        zebra = (p[:, None] * C).sum(0)
        assert torch.allclose(net.expected_features(ctx)[0], zebra)
        feats = {t: C[vocab.id(t)] for t in text if t != "zebra"} | {"zebra": zebra, "<p>": C[vocab.id("<p>")]}
        padded = ["<p>", "<p>"] + text
        expected = []
        for t, word in enumerate(text):
            x = torch.cat([feats[padded[t]], feats[padded[t + 1]]])[None]
            y = torch.log_softmax(net.logits_from_features(x)[0], 0)
            expected.append(float(y[vocab.unk_id if word == "zebra" else vocab.id(word)]))
    np.testing.assert_allclose(got, expected, rtol=1e-12)

    # A text without unknown words scores exactly like log_prob on its contexts.
    plain = ["w1", "w2", "w3", "w4"]
    ids = np.array([vocab.id(w) for w in plain])
    padded = np.concatenate([[1, 1], ids])
    ctx = np.stack([padded[i:i + 2] for i in range(len(plain))])
    np.testing.assert_allclose(lm.log_prob_text(plain), lm.log_prob(ctx, ids), rtol=1e-12)


def test_bad_contexts_are_refused():
    lm = NeuralLM(tiny().float(), vocab_of(11), "<p>")
    with pytest.raises(NnlmError, match="shape"):
        lm.distribution(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(NnlmError, match="outside"):
        lm.log_prob(np.full((1, 3), 11), np.zeros(1, dtype=np.int64))
