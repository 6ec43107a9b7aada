"""`score_lines` / `score_text` of a count-based model take the short path (nnlm.compiled_lines, the query
engine's stream scorer) and give the generic path's numbers (nnlm.score_stream over log_prob's rows): every
line's total, tokens, OOV count and per-word log10, on lines with OOV words, typed "<unk>", blank lines,
"\\r" / "\\u2028" paragraph breaks and non-ASCII text, with the context carried or not; the stream scorer
equals log_prob's rows in chunked_log_probs; and the engine is built by a model's first query, whatever
asks it (no warm-up)."""
from __future__ import annotations

import numpy as np
import pytest

from nnlm.lm import chunked_log_probs
from nnlm.ngram import engine_tables
from nnlm.ngram.build import build_ngram
from nnlm.score_stream import ScoreStream
from nnlm.textfile import line_pieces
from nnlm.use import score_lines, score_text, score_words

LINES = ["w1 w2 w3 w5", "", "  w0 w0 w7 unknownword w9 w1  ", "w4", "w2 <unk> w3\rw5 w6\u2028w7", "   ",
         "w1 w1 w1 w1 w1 w1 w2 w3 w4 w5 w6 w7 w8", "caf\u00e9 w3 w2", "w9", "\u2028", "zz w1 zz"]
KINDS = [("kn", 5), ("kn", 2), ("class", 3), ("interpolated", 3)]


def generic(model, lines, carry):
    """score_lines' numbers by the generic path: ScoreStream over the pieces, log_prob on context rows."""
    stream = ScoreStream(model, line_pieces(lines), carry)
    return list(stream), stream.blank


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from conftest import random_corpus_texts, write_text_corpus

    from nnlm.data import load_corpus

    root = write_text_corpus(tmp_path_factory.mktemp("lines"), *random_corpus_texts())
    return load_corpus(str(root), use_cache=False)


@pytest.fixture(scope="module")
def models(corpus):
    return {(kind, order): build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
            for kind, order in KINDS}


@pytest.mark.parametrize("kind,order", KINDS)
@pytest.mark.parametrize("carry", [True, False])
def test_short_path_equals_the_generic_path(models, kind, order, carry, monkeypatch):
    model = models[(kind, order)]
    quick = score_lines(model, LINES, carry_context=carry)
    # the generic path with log_prob on context rows: no stream scorer in chunked_log_probs
    monkeypatch.setattr(type(model), "stream_log_prob", None, raising=False)
    expect, blank = generic(model, LINES, carry)
    monkeypatch.undo()
    assert quick[1] == []
    assert [s.line_number for s in quick[0]] == [s.line_number for s in expect] == [1, 3, 4, 5, 7, 8, 9, 11]
    for got, want in zip(quick[0], expect, strict=True):
        assert (got.tokens, got.oov) == (want.tokens, want.oov)
        assert abs(got.log10_prob - want.log10_prob) <= 1e-9
        np.testing.assert_allclose(got.word_log10, want.word_log10, rtol=0, atol=1e-9)
    assert [s.oov for s in expect] == [0, 1, 0, 0, 0, 1, 0, 2]  # a typed "<unk>" is no OOV word
    text = score_text(model, LINES, carry_context=carry)
    assert text.blank == blank == 3 and abs(text.log10_prob - sum(s.log10_prob for s in expect)) <= 1e-9


@pytest.mark.parametrize("kind,order", KINDS)
def test_one_line_calls_equal_the_generic_path(models, kind, order, monkeypatch):
    """A one-line call (its own compiled route: ids with the pads and the OOV count in one pass) on each line."""
    model = models[(kind, order)]
    quick = [score_lines(model, [line], carry_context=carry)[0] for line in LINES for carry in (True, False)]
    monkeypatch.setattr(type(model), "stream_log_prob", None, raising=False)
    expect = [generic(model, [line], carry)[0] for line in LINES for carry in (True, False)]
    for got, want in zip(quick, expect, strict=True):
        assert [(s.line_number, s.tokens, s.oov, s.log10_prob) for s in got] == \
            [(s.line_number, s.tokens, s.oov, s.log10_prob) for s in want]  # bit for bit
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a.word_log10, b.word_log10)
    assert score_text(model, ["  \u2028 "]).blank == 1 and score_lines(model, [" "])[0] == []


@pytest.mark.parametrize("kind,order", KINDS)
def test_stream_scorer_equals_log_prob_rows(models, kind, order):
    model = models[(kind, order)]
    rng = np.random.default_rng(3)
    ids = rng.integers(0, len(model.vocab), 3_000)
    since = np.arange(len(ids)) % 7  # texts of 7 tokens laid end to end
    for first in (0, 1, 6):
        for offsets in (None, since[first:]):
            fast = chunked_log_probs(model, ids, first, len(ids) - first, 2, since_start=offsets, chunk=1000)
            rows = chunked_log_probs(model, ids, first, len(ids) - first, 2, since_start=offsets,
                                     log_prob=model.log_prob)
            np.testing.assert_array_equal(fast, rows)  # bit for bit
    with pytest.raises(IndexError):
        model.stream_log_prob(np.array([0, len(model.vocab)]), 0, 2, 1)


@pytest.mark.parametrize("kind,order", KINDS)
def test_no_engine_keeps_the_generic_path(corpus, kind, order, monkeypatch):
    monkeypatch.setattr(engine_tables, "ENABLED", False)  # NNLM_QUERY_ENGINE=0: the numpy paths
    model = build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
    assert model.stream_log_prob(np.array([0, 1]), 1, 1, 0) is None
    lines = score_lines(model, LINES, carry_context=False)[0]
    expect, _ = generic(model, LINES, False)
    assert [s.log10_prob for s in lines] == [s.log10_prob for s in expect]


@pytest.mark.parametrize("kind,order", KINDS)
@pytest.mark.parametrize("first", ["score_lines", "score_words", "log_prob"])
def test_first_query_builds_the_engine(models, kind, order, first, tmp_path):
    """No warm-up: a model loaded afresh gets its engine from whatever asks it first, even for one token."""
    from nnlm.loading import load
    from nnlm.ngram.build import save_ngram
    from nnlm.ngram.interpolated import InterpolatedTrigram

    save_ngram(models[(kind, order)], tmp_path / "m")
    model = load(tmp_path / "m")
    holder = model if isinstance(model, InterpolatedTrigram) else model.tables
    assert holder._engine is None
    if first == "score_lines":
        score_lines(model, ["w1"])
    elif first == "score_words":
        score_words(model, "w1 w2")
    else:
        model.log_prob(np.zeros((1, model.context_size), dtype=np.int64), np.array([1]))
    assert holder._engine


@pytest.mark.parametrize("carry", [True, False])
def test_a_mixture_of_count_models_takes_the_short_path_with_the_generic_numbers(models, carry, monkeypatch):
    from nnlm.mixture import Mixture

    mix = Mixture([models[("kn", 5)], models[("class", 3)]], [[0.6, 0.4], [0.2, 0.8]],
                  bucketer=lambda ctx: (ctx[:, -1] % 2).astype(np.int64), bucketer_order=2)
    quick = score_lines(mix, LINES, carry_context=carry)
    monkeypatch.setattr(Mixture, "stream_log_prob", None)  # the generic path: the mixture's context rows
    expect, _ = generic(mix, LINES, carry)
    monkeypatch.undo()
    assert [s.line_number for s in quick[0]] == [s.line_number for s in expect]
    for got, want in zip(quick[0], expect, strict=True):
        assert (got.tokens, got.oov) == (want.tokens, want.oov)
        np.testing.assert_allclose(got.word_log10, want.word_log10, rtol=0, atol=1e-9)
