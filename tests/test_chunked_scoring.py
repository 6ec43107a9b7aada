"""The one chunked scorer of nnlm.lm (chunked_log_probs, stream_log_probs, text_contexts) and the one top-k of
nnlm.use (top_words), against plain references written token by token: every face (nnlm score, the API,
rescore, serve, the neural model's --oov-vector path) scores through them, so they must give the numbers of
one call over the whole text, whatever the chunk, and the history and text starts must be the right ones."""
from __future__ import annotations

import numpy as np
import pytest

from nnlm.lm import chunked_log_probs, start_id, stream_log_probs, text_contexts, text_stream
from nnlm.ngram.build import build_ngram
from nnlm.use import next_context, top_words


@pytest.fixture(scope="module")
def kn4(tmp_path_factory):
    from conftest import random_corpus_texts, write_text_corpus

    from nnlm.data.corpus import load_corpus

    root = write_text_corpus(tmp_path_factory.mktemp("chunked"), *random_corpus_texts())
    return build_ngram("kn", load_corpus(str(root), use_cache=False), 4)


def plain_context(ids: list[int], i: int, k: int, pad: int, history: list[int] = ()) -> list[int]:
    """Token i's context by hand: the k ids before it, history before the text, pad before that."""
    before = [pad] * k + list(history) + ids[:i]
    return before[len(before) - k:] if k else []


def plain_log_probs(model, ids: list[int], history: list[int] = ()) -> np.ndarray:
    k, pad = model.context_size, start_id(model)
    ctx = np.array([plain_context(ids, i, k, pad, history) for i in range(len(ids))], dtype=np.int64)
    return np.array([model.log_prob(ctx[i:i + 1], np.array([ids[i]]))[0] for i in range(len(ids))])


def test_text_contexts_are_the_ids_before_each_token(kn4):
    ids = [5, 6, 7, 8, 9]
    for history in ([], [1], [1, 2], [1, 2, 3, 4]):  # shorter than, as long as and longer than k = 3
        got = text_contexts(np.array(ids), 3, 0, np.array(history, dtype=np.int64))
        assert got.tolist() == [plain_context(ids, i, 3, 0, history) for i in range(len(ids))]
    assert text_stream(np.zeros(0), 3, 0, [1, 2]).tolist() == [0, 1, 2]  # the context after a history
    assert text_contexts(np.array(ids), 0, 0).shape == (5, 0)


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 15])
def test_chunks_give_the_numbers_of_one_token_at_a_time(kn4, chunk):
    ids = np.random.default_rng(1).integers(0, len(kn4.vocab), size=50)
    want = plain_log_probs(kn4, ids.tolist(), [3, 4])
    got = stream_log_probs(kn4, ids, history=np.array([3, 4]), chunk=chunk)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_texts_laid_end_to_end_are_each_scored_from_their_start(kn4):
    rng = np.random.default_rng(2)
    texts = [rng.integers(0, len(kn4.vocab), size=n).tolist() for n in (1, 4, 2, 9, 3)]
    ids = np.array([w for t in texts for w in t])
    since_start = np.concatenate([np.arange(len(t)) for t in texts])
    for chunk in (1, 3, 100):
        got = chunked_log_probs(kn4, ids, 0, len(ids), start_id(kn4), since_start=since_start, chunk=chunk)
        np.testing.assert_allclose(got, np.concatenate([plain_log_probs(kn4, t) for t in texts]), rtol=0, atol=1e-12)


def test_a_state_after_a_short_history_scores_as_the_stream(kn4):
    # a history shorter than the context: every word of it is kept (the start token fills the rest)
    history = np.array([3, 4])
    state = kn4.begin_state(1, history)
    assert state.context[0].tolist() == [start_id(kn4), 3, 4]
    lp, _ = kn4.advance(state, [5])
    np.testing.assert_allclose(lp, stream_log_probs(kn4, np.array([5]), history=history), rtol=0, atol=1e-12)


def test_next_context_is_the_context_after_the_history(kn4):
    words = [kn4.vocab.tokens[i] for i in (3, 4, 5, 6)]
    assert next_context(kn4, words[:1]).tolist() == [start_id(kn4), start_id(kn4), 3]
    assert next_context(kn4, words).tolist() == [4, 5, 6]


def test_top_words_is_a_stable_sort_of_each_row(kn4):
    rng = np.random.default_rng(3)
    v = len(kn4.vocab)
    dist = rng.choice([0.1, 0.2, 0.3], size=(6, v))  # many ties: they go in vocabulary order
    dist[0] = 1.0 / v  # a uniform row: all tied
    for k in (1, 5, v):
        got = top_words(kn4, dist, k)
        for row, words in zip(dist, got, strict=True):
            want = np.argsort(-row, kind="stable")[:k]
            assert words == [(kn4.vocab.tokens[i], float(row[i])) for i in want]
