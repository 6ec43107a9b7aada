"""The stateful API (LanguageModel.begin_state / advance): a text scored word by word through
states gives the batch scores, for every model kind; bad input is one NnlmError."""
from __future__ import annotations

import numpy as np
import pytest

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LMState
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
    from nnlm.use import stream_log_probs

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
