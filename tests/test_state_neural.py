"""The stateful API of the NPLM (partial sums and the direct rows' cache, nnlm.neural.lm.stepper) and of
mixtures (the components' states nested): word by word through states gives the batch scores to 1e-6,
beams reorder with take(), the fallback paths agree, and bad input is one NnlmError."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LMState, stream_log_probs
from nnlm.mixture import Mixture
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import BF16, UNNORMALIZED
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny products: torch's thread pool only adds waits on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def vocab_of(size: int) -> Vocabulary:
    return Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(size - 2)))


def neural_lm(v: int = 41, n: int = 4, h: int = 6, m: int = 5, direct: bool = True, seed: int = 1,
              dtype=torch.float64, **variants) -> NeuralLM:
    """A net with weights large enough that rounding or a wrong term would show."""
    torch.manual_seed(seed)
    net = NPLM(ModelConfig(vocab_size=v, order=n, hidden=h, features=m, direct=direct, **variants)).to(dtype)
    with torch.no_grad():
        for w in net.parameters():
            w.normal_(0, 0.7)
    return NeuralLM(net, vocab_of(v), "<p>")


def text(v: int, length: int = 60, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, v, size=length).astype(np.int64)


def step_scores(model, ids: np.ndarray, beam: int = 3, history=None) -> np.ndarray:
    """The text word by word, in `beam` rows at once; every row must give the same numbers."""
    state = model.begin_state(beam, history)
    out = []
    for w in ids:
        lp, state = model.advance(state, np.full(beam, w))
        np.testing.assert_allclose(lp, lp[0], rtol=0, atol=1e-6)
        out.append(lp[0])
    return np.array(out)


SHAPES = [
    dict(),                                   # the paper's net: W and one hidden layer
    dict(h=0),                                # direct connections only
    dict(direct=False),                       # hidden layer only
    dict(n=2, h=3),                           # one context word
    dict(n=6, h=4, m=3),
    dict(layers=2, h=5),
    dict(layers=3, h=5, residual=True),
    dict(layer_norm=True),
    dict(layers=2, layer_norm=True),
    dict(n=6, local=2),                       # the wide-context branch (A)
    dict(n=7, local=1, direct=False),
    dict(n=9, local=2, summaries=3),          # three learned sums of the older words
    dict(n=9, local=2, sum_weights="feature"),  # one sum weighted per position and feature
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "paper")
def test_word_by_word_equals_batch(shape):
    model = neural_lm(**shape)
    assert model.steps_incrementally
    ids = text(41)
    np.testing.assert_allclose(step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-6)


def test_history_and_a_small_cache():
    """A history fills the partial sums as the steps would have; a cache of 64 words for 300 (evictions
    every step, a step with more new words than the cache holds) gives the same numbers."""
    model = neural_lm(v=300, n=5)
    model.step_cache_bytes = 0  # the minimum: 256 words
    ids = text(300, 120)
    np.testing.assert_allclose(step_scores(model, ids[40:], history=ids[:40]),
                               stream_log_probs(model, ids[40:], history=ids[:40]), rtol=0, atol=1e-6)
    state = model.begin_state(80, history=ids[:4])
    _, state = model.advance(state, np.arange(80))  # contexts of 80 different words ...
    _, state = model.advance(state, np.arange(80, 160))
    _, state = model.advance(state, np.arange(160, 240))
    lp, _ = model.advance(state, np.arange(240, 320) % 300)  # ... 320 at once: more than the cache holds
    np.testing.assert_allclose(lp, model.log_prob(state.context, np.arange(240, 320) % 300), rtol=0, atol=1e-6)
    assert len(model._stepper[1].direct.slab) == 256


def test_the_tables_of_a_long_pass(monkeypatch):
    """Inside a long pass that built the direct connections' per-position tables, the steps read them
    (b comes with block 0) and give the same numbers, also for a state begun before the pass."""
    from nnlm.neural.lm import direct_tables

    monkeypatch.setattr(direct_tables, "TOKENS_PER_TABLE_ROW", 0)
    model = neural_lm(v=60, n=5, h=4)
    ids = text(60, 50)
    expected = stream_log_probs(model, ids)
    state = model.begin_state(2)
    lp, state = model.advance(state, [ids[0]] * 2)
    got = [lp[0]]
    with model.long_pass(10**6):
        assert model._tables is not None
        np.testing.assert_allclose(step_scores(model, ids), expected, rtol=0, atol=1e-6)
        for w in ids[1:]:
            lp, state = model.advance(state, [w, w])
            got.append(lp[1])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert model._stepper[1].direct.computed < 60  # the cache was not needed inside the pass


def test_a_beam_reordered_with_take():
    """Rows that walk different texts, dropped, copied and reordered between steps, keep their own scores."""
    model = neural_lm(v=50, n=5)
    texts = np.stack([text(50, 30, seed) for seed in range(4)])
    state = model.begin_state(4)
    got = np.zeros_like(texts, dtype=np.float64)
    rows = np.arange(4)  # which text each state row walks
    rng = np.random.default_rng(0)
    for t in range(texts.shape[1]):
        lp, state = model.advance(state, texts[rows, t])
        got[rows, t] = lp
        if t % 5 == 4:
            order = rng.permutation(len(rows))
            state, rows = state.take(order), rows[order]
    for r in range(4):
        np.testing.assert_allclose(got[r], stream_log_probs(model, texts[r]), rtol=0, atol=1e-6)
    double = LMState.concat([state.take([0]), state.take([0, 1])])
    lp, _ = model.advance(double, [3, 3, 3])
    assert lp[0] == pytest.approx(lp[1], abs=1e-12)


def test_a_context_is_normalized_once():
    """A decoder asks one hypothesis for many words: in one call the rows sharing a context cost one log Z,
    and a later call from a known context computes none; the numbers are log_prob's either way."""
    model = neural_lm(v=80, n=4)
    state = model.begin_state(3, history=text(80, 3))
    _, state = model.advance(state, [7, 8, 9])  # three hypotheses, three contexts
    norms = model._stepper[1].norms
    before = len(norms.norms)
    expand = state.take(np.repeat(np.arange(3), 20))  # each hypothesis asked for 20 words at once
    words = np.arange(60) % 80
    lp, _ = model.advance(expand, words)
    np.testing.assert_allclose(lp, model.log_prob(expand.context, words), rtol=0, atol=1e-6)
    assert len(norms.norms) == before + 3
    computed = model._stepper[1].direct.computed
    again, _ = model.advance(expand, words[::-1])  # the next frame: the same hypotheses, no new log Z
    np.testing.assert_allclose(again, model.log_prob(expand.context, words[::-1]), rtol=0, atol=1e-6)
    assert len(norms.norms) == before + 3 and model._stepper[1].direct.computed == computed


def test_the_norms_stay_bounded_and_keyed_by_the_whole_context():
    """The map drops its older half when full; contexts whose packed ids would overflow 63 bits are keyed by
    their bytes, so two contexts never share a log Z."""
    from nnlm.neural.lm.stepper import ContextNorms

    norms = ContextNorms(50, 3, kept=10)
    for start in range(0, 40, 4):
        contexts = np.arange(start, start + 12).reshape(4, 3) % 50
        norms.put(norms.keys(contexts), np.arange(4, dtype=np.float64))
        assert len(norms.norms) <= 10
    wide = ContextNorms(10**6, 4)
    assert wide.powers is None
    a, b = np.array([[1, 2, 3, 4]]), np.array([[1, 2, 4, 3]])
    wide.put(wide.keys(a), np.array([1.5]))
    assert wide.get(wide.keys(a))[0] == 1.5 and np.isnan(wide.get(wide.keys(b))[0])
    model = neural_lm(v=41, n=13, h=3, m=2)  # 41^12 > 2^63: byte keys in a real net
    assert model.steps_incrementally
    ids = text(41, 30)
    np.testing.assert_allclose(step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-6)
    assert model._stepper[1].norms.powers is None


def test_large_logits_are_shifted():
    """Logits past exp's fp32 range take the max-shifted log-sum-exp (rows computed again)."""
    model = neural_lm(v=60, n=4, h=3, dtype=torch.float32)
    with torch.no_grad():
        model.net.b[7] = 120.0  # exp(120) overflows fp32
        model.net.b[8] = -200.0
    ids = text(60, 30)
    ids[::3] = 7
    got = step_scores(model, ids, beam=2)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, stream_log_probs(model, ids), rtol=0, atol=2e-5)


def test_fp32_net_and_log10():
    model = neural_lm(v=200, n=5, h=8, m=6, dtype=torch.float32)
    ids = text(200, 80)
    np.testing.assert_allclose(step_scores(model, ids, beam=2), stream_log_probs(model, ids), rtol=0, atol=2e-5)
    state = model.begin_state(2)
    ln, _ = model.advance(state, [5, 6])
    l10, _ = model.advance(state, [5, 6], log10=True)
    np.testing.assert_allclose(l10, ln / np.log(10), rtol=1e-12)


@pytest.mark.parametrize("mode", ["unnormalized", "bf16", "bias-only"])
def test_fallback_paths_agree_with_log_prob(mode):
    """Models the partial sums do not serve step through log_prob (the default), with its numbers."""
    model = neural_lm(h=0, direct=False) if mode == "bias-only" else neural_lm(dtype=torch.float32)
    if mode != "bias-only":
        model = model.with_scoring({"unnormalized": UNNORMALIZED, "bf16": BF16}[mode])
    assert not model.steps_incrementally
    ids = text(41, 30)
    state = model.begin_state(2)
    assert state.extra == {}
    np.testing.assert_allclose(step_scores(model, ids, beam=2), stream_log_probs(model, ids), rtol=0, atol=1e-6)


def test_states_go_stale_when_the_net_is_trained():
    model = neural_lm()
    state = model.begin_state(2)
    with torch.no_grad():
        model.net.W.add_(0.1)
    with pytest.raises(NnlmError, match="not made by this model"):
        model.advance(state, [1, 2])
    ids = text(41, 20)
    np.testing.assert_allclose(step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-6)


def test_bad_input_is_one_error():
    a, b = neural_lm(), neural_lm()
    state = a.begin_state(2)
    with pytest.raises(NnlmError, match="not made by this model"):
        b.advance(state, [1, 2])
    with pytest.raises(NnlmError, match="outside the vocabulary"):
        a.advance(state, [1, 41])
    with pytest.raises(NnlmError, match="outside the vocabulary"):
        a.begin_state(1, history=[3, -2])
    with pytest.raises(NnlmError, match="at least one"):
        a.advance(state.take([]), [])
    with pytest.raises(NnlmError, match="one word per state"):
        a.advance(state, [1, 2, 3])
    with pytest.raises(NnlmError, match="integer"):
        a.advance(state, np.array([1.0, 2.0]))
    with pytest.raises(NnlmError, match="at least one row"):
        a.begin_state(0)
    with pytest.raises(NnlmError, match="indices below"):
        state.take([2])
    with pytest.raises(NnlmError, match="different models"):
        LMState.concat([state, b.begin_state(1)])


# --- mixtures ---

def mixture_of(corpus, buckets: bool) -> Mixture:
    from nnlm.mixture import mix_on_corpus
    from nnlm.ngram.build import build_ngram

    v = len(corpus.vocab)
    net = neural_lm(v=v, n=4, h=5, m=4)
    net.vocab = corpus.vocab
    parts = [build_ngram("kn", corpus, 3), build_ngram("interpolated", corpus, 3), net]
    if buckets:
        return mix_on_corpus(parts, corpus, "em-buckets", splits=("valid",), iterations=3).model
    return Mixture(parts, [0.5, 0.2, 0.3])


@pytest.mark.parametrize("buckets", [False, True], ids=["global", "em-buckets"])
def test_mixture_word_by_word_equals_batch(random_corpus, buckets):
    model = mixture_of(random_corpus, buckets)
    if buckets:
        assert len(model.weights) > 1
    ids = random_corpus.split("test")[:150].astype(np.int64)
    np.testing.assert_allclose(step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-6)
    history = random_corpus.split("test")[150:160]
    np.testing.assert_allclose(step_scores(model, ids[:20], history=history),
                               stream_log_probs(model, ids[:20], history=history), rtol=0, atol=1e-6)


def test_mixture_state_nests_and_reorders(random_corpus):
    model = mixture_of(random_corpus, buckets=False)
    ids = random_corpus.split("test")[:40].astype(np.int64)
    state = model.begin_state(2)
    for w in ids[:10]:
        _, state = model.advance(state, [w, ids[0]])
    swapped = LMState.concat([state.take([1, 0]), state.take([0])])
    for name, inner in swapped.extra.items():
        assert isinstance(inner, LMState) and len(inner) == 3, name
        np.testing.assert_array_equal(inner.context[1], state.extra[name].context[0])
    a, _ = model.advance(swapped, [5, 5, 5])
    b, _ = model.advance(state, [5, 5])
    np.testing.assert_allclose(a, [b[1], b[0], b[0]], rtol=0, atol=1e-12)
    with pytest.raises(NnlmError, match="not made by this model"):
        model.advance(model.components[0].begin_state(1), [1])
    with pytest.raises(NnlmError, match="outside the vocabulary"):
        model.advance(state, [1, len(model.vocab)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_on_cuda():
    model = neural_lm(v=200, n=5, dtype=torch.float32)
    model.net.to("cuda")
    model.device = torch.device("cuda")
    ids = text(200, 40)
    np.testing.assert_allclose(step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=2e-5)


def test_a_net_whose_step_tables_would_not_fit_steps_through_log_prob(monkeypatch):
    """Past STEP_MEMORY_BYTES (the direct connections' per-position terms: 6.5 GB for n = 256 on Brown) a net keeps
    no partial sums; its states still advance, with the numbers of log_prob."""
    from nnlm.neural.lm import stepper as module

    model = neural_lm(n=9, local=2, sum_weights="feature")
    assert model.steps_incrementally
    monkeypatch.setattr(module, "STEP_MEMORY_BYTES", 1000)
    assert not model.steps_incrementally
    ids = text(41)
    np.testing.assert_allclose(step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-9)
