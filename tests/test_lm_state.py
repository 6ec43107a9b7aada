"""The stateful API (LanguageModel.begin_state / advance): a text scored word by word through
states gives the batch scores, for every model kind; bad input is one NnlmError."""
from __future__ import annotations

import numpy as np
import pytest

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LMState
from nnlm.ngram.build import build_ngram


def _step_scores(model, ids: np.ndarray, beam: int = 3) -> np.ndarray:
    """Score ids word by word, the same text in `beam` rows at once."""
    state = model.begin_state(beam)
    out = []
    for w in ids:
        lp, state = model.advance(state, np.full(beam, w))
        assert np.allclose(lp, lp[0])
        out.append(lp[0])
    return np.array(out)


@pytest.fixture
def corpus(random_corpus) -> Corpus:
    return random_corpus


@pytest.mark.parametrize("kind,order", [("kn", 3), ("kn", 5), ("interpolated", 3), ("addone", 2), ("class", 3)])
def test_word_by_word_equals_batch(corpus, kind, order):
    from nnlm.lm import stream_log_probs

    model = build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
    ids = corpus.split("test")[:200].astype(np.int64)
    np.testing.assert_allclose(_step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-6)


def test_log10_and_take(corpus):
    model = build_ngram("kn", corpus, 3)
    state = model.begin_state(2, history=corpus.split("test")[:5])
    words = corpus.split("test")[5:7].astype(np.int64)
    ln, after = model.advance(state, words)
    l10, _ = model.advance(state, words, log10=True)
    np.testing.assert_allclose(l10, ln / np.log(10))
    swapped = after.take([1, 0, 0])
    assert len(swapped) == 3 and (swapped.context[0] == after.context[1]).all()
    joined = LMState.concat([after, swapped])
    assert len(joined) == 5


def test_bad_input_is_one_error(corpus):
    a = build_ngram("kn", corpus, 3)
    b = build_ngram("kn", corpus, 3)
    state = a.begin_state(2)
    with pytest.raises(NnlmError, match="not made by this model"):
        b.advance(state, [1, 2])
    with pytest.raises(NnlmError, match="outside the vocabulary"):
        a.advance(state, [1, len(a.vocab)])
    with pytest.raises(NnlmError, match="outside the vocabulary"):
        a.advance(state, [-1, 0])
    with pytest.raises(NnlmError, match="at least one"):
        a.advance(a.begin_state(1).take([]), [])
    with pytest.raises(NnlmError, match="one word per state"):
        a.advance(state, [1])
    with pytest.raises(NnlmError, match="integer"):
        a.advance(state, [0.5, 1.5])
    with pytest.raises(NnlmError, match="at least one row"):
        a.begin_state(0)
    with pytest.raises(NnlmError, match="indices below"):
        state.take([5])


# --- the count-based models' compiled steps (nnlm.ngram.query_engine): the same numbers, kept state right ---

def _arpa_model(corpus, tmp_path, order):
    from nnlm.ngram.arpa import read_arpa, write_arpa

    write_arpa(build_ngram("kn", corpus, order), tmp_path / "m.arpa")
    return read_arpa(tmp_path / "m.arpa", corpus.vocab)


@pytest.mark.parametrize("order", [2, 5])
def test_arpa_model_word_by_word_equals_batch(corpus, tmp_path, order):
    from nnlm.lm import stream_log_probs

    model = _arpa_model(corpus, tmp_path, order)
    assert model.tables.query_engine() is not None
    ids = corpus.split("test")[:200].astype(np.int64)
    np.testing.assert_allclose(_step_scores(model, ids), stream_log_probs(model, ids), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind,order", [("kn", 5), ("class", 4), ("interpolated", 3)])
def test_beam_rows_taken_and_joined_keep_their_state(corpus, kind, order):
    """Two texts in a beam, rows swapped, copied and joined midway (take / concat carry `extra`), and a
    state begun after a history: each row still scores as its own text does in one batch."""
    from nnlm.lm import stream_log_probs

    model = build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
    a = corpus.split("test")[:60].astype(np.int64)
    b = corpus.split("valid")[:60].astype(np.int64)
    expect_a, expect_b = stream_log_probs(model, a), stream_log_probs(model, b)
    state = model.begin_state(2)
    got = []
    for t in range(60):
        if t == 30:
            state = LMState.concat([state.take([1, 0]), state.take([0])])  # rows: b, a, a
        words = np.array([a[t], b[t]] if t < 30 else [b[t], a[t], a[t]], dtype=np.int64)
        lp, state = model.advance(state, words, log10=(t % 2 == 1))
        got.append(lp / LOG10_E if t % 2 == 1 else lp)
    np.testing.assert_allclose([g[0] for g in got[:30]], expect_a[:30], rtol=0, atol=1e-6)
    np.testing.assert_allclose([g[1] for g in got[:30]], expect_b[:30], rtol=0, atol=1e-6)
    np.testing.assert_allclose([g[0] for g in got[30:]], expect_b[30:], rtol=0, atol=1e-6)
    np.testing.assert_allclose([g[1] for g in got[30:]], expect_a[30:], rtol=0, atol=1e-6)
    np.testing.assert_allclose([g[2] for g in got[30:]], expect_a[30:], rtol=0, atol=1e-6)
    after = model.begin_state(1, history=a[:7])
    lp, _ = model.advance(after, a[7:8])
    np.testing.assert_allclose(lp, stream_log_probs(model, a[7:8], history=a[:7]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", ["kn", "class", "interpolated"])
def test_compiled_steps_refuse_bad_words_with_one_error(corpus, kind):
    model = build_ngram(kind, corpus, 3, **({"classes": 8} if kind == "class" else {}))
    state = model.begin_state(2)
    for words in (np.array([1, len(model.vocab)]), np.array([-1, 0]), [1, len(model.vocab)]):
        with pytest.raises(NnlmError, match="outside the vocabulary"):
            model.advance(state, words)
    with pytest.raises(NnlmError, match="not made by this model"):
        model.advance(build_ngram("kn", corpus, 3).begin_state(2), np.array([1, 2]))
