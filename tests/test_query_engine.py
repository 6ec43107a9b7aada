"""The compiled query engines (nnlm.ngram.query_engine, interpolated_engine) give the numpy paths' numbers
(1e-6, natural log) on every count-based kind, and nnlm.score_sentence is the sum of nnlm.use.score_words."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E
from nnlm.ngram import engine_tables
from nnlm.ngram.arpa import read_arpa, write_arpa
from nnlm.ngram.backoff import LN10, BackoffModel, BackoffTables
from nnlm.ngram.build import build_ngram
from nnlm.ngram.kneser_ney import KneserNeyModel, fit_kneser_ney
from nnlm.sentence import score_sentence
from nnlm.use import score_words

ATOL = 1e-6


def zipf_ids(n: int, v: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, n) - 1) % v
    ids[rng.random(n) < 0.2] = 3
    return ids.astype(np.int64)


def stream_rows(ids: np.ndarray, k: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(contexts, targets) of every position of `ids`, padded at the start as nnlm pads a text."""
    full = np.concatenate([np.full(k, pad), ids])
    ctx = np.stack([full[j:j + len(ids)] for j in range(k)], axis=1) if k else np.zeros((len(ids), 0), np.int64)
    return ctx.astype(np.int64), ids.astype(np.int64)


def check_tables(tables: BackoffTables, ctx: np.ndarray, targets: np.ndarray) -> None:
    assert tables.query_engine() is not None
    expect = tables.reference_log10_prob_of(ctx, targets) * LN10
    np.testing.assert_allclose(tables.log_prob(ctx, targets), expect, rtol=0, atol=ATOL)
    perm = np.random.default_rng(0).permutation(len(targets))  # rows in no stream order: no state carried
    np.testing.assert_allclose(tables.log_prob(ctx[perm], targets[perm]), expect[perm], rtol=0, atol=ATOL)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_kneser_ney_engine_equals_numpy(order):
    v = 200
    train, test = zipf_ids(20_000, v, 1) % 190, zipf_ids(3_000, v, 2)
    test[::17] = 195  # words 190..199 are in V but never in train (unigram floor only)
    tables = fit_kneser_ney(train, order, v)
    check_tables(tables, *stream_rows(test, order - 1, pad=0))
    # contexts wider than the model's (only the last order-1 columns count) and random contexts
    rng = np.random.default_rng(3)
    wide = rng.integers(0, v, size=(500, order + 2))
    check_tables(tables, wide, rng.integers(0, v, 500))


def test_engine_state_carries_only_for_stream_rows():
    """Rows that merely look like a stream (same last context word as the previous target) are not carried."""
    v = 50
    tables = fit_kneser_ney(zipf_ids(5_000, v, 4), 4, v)
    assert tables.query_engine() is not None
    ctx = np.array([[1, 2, 3], [9, 3, 4], [2, 3, 4], [3, 4, 5]])
    targets = np.array([4, 5, 5, 6])
    np.testing.assert_allclose(tables.log_prob(ctx, targets), tables.reference_log10_prob_of(ctx, targets) * LN10,
                               rtol=0, atol=ATOL)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 39), min_size=3, max_size=3), st.integers(0, 39)),
                min_size=1, max_size=30))
def test_engine_equals_numpy_on_any_rows(rows):
    tables = _small_tables()
    ctx = np.array([r[0] for r in rows], dtype=np.int64)
    targets = np.array([r[1] for r in rows], dtype=np.int64)
    np.testing.assert_allclose(tables.log_prob(ctx, targets), tables.reference_log10_prob_of(ctx, targets) * LN10,
                               rtol=0, atol=ATOL)


_SMALL: list[BackoffTables] = []


def _small_tables() -> BackoffTables:
    if not _SMALL:
        _SMALL.append(fit_kneser_ney(zipf_ids(3_000, 40, 5), 4, 40))
        assert _SMALL[0].query_engine() is not None
    return _SMALL[0]


def test_bad_ids_are_refused_not_read_out_of_bounds():
    tables = _small_tables()
    with pytest.raises(IndexError):
        tables.log_prob(np.array([[0, 1, 2]]), np.array([40]))
    with pytest.raises(IndexError):
        tables.log_prob(np.array([[0, -1, 2]]), np.array([3]))


def test_arpa_read_back_uses_the_engine(tmp_path):
    v, order = 120, 5
    vocab = Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, v)]))
    write_arpa(KneserNeyModel.fit(vocab, zipf_ids(15_000, v, 6), order), tmp_path / "m.arpa")
    model = read_arpa(tmp_path / "m.arpa")
    check_tables(model.tables, *stream_rows(zipf_ids(2_000, v, 7), order - 1, pad=vocab.id("<p>")))


def test_tables_not_suffix_closed_keep_the_numpy_path():
    # trigram (0 1 2) is listed, but its suffix (1 2) is not: a pruned file from another tool can be like this
    v = 3
    tables = BackoffTables(v, [np.arange(v), np.array([0 * v + 1]), np.array([0 * v + 2])],
                           [np.log10(np.full(v, 1 / 3)), np.array([-0.5]), np.array([-0.1])],
                           [np.zeros(v), np.array([-0.2]), np.zeros(1)])
    assert tables.query_engine() is None
    ctx, targets = np.array([[0, 1], [2, 1], [1, 1]]), np.array([2, 2, 0])
    np.testing.assert_allclose(tables.log10_prob_of(ctx, targets), [-0.1, np.log10(1 / 3), np.log10(1 / 3)])


def test_switched_off_by_the_environment_flag(monkeypatch):
    monkeypatch.setattr(engine_tables, "ENABLED", False)
    tables = fit_kneser_ney(zipf_ids(2_000, 30, 8), 3, 30)
    assert tables.query_engine() is None
    ctx, targets = stream_rows(zipf_ids(100, 30, 9), 2, 0)
    np.testing.assert_array_equal(tables.log10_prob_of(ctx, targets), tables.reference_log10_prob_of(ctx, targets))


def test_memory_mapped_tables_within_and_beyond_the_budget(tmp_path, monkeypatch):
    from nnlm.ngram.kneser_ney_disk import fit_kneser_ney_to_disk, load_disk_tables

    v, order = 150, 4
    fit_kneser_ney_to_disk(zipf_ids(10_000, v, 10), order, v, 1.0, tmp_path / "model")
    ctx, targets = stream_rows(zipf_ids(1_000, v, 11), order - 1, 0)
    mapped = load_disk_tables(tmp_path / "model", v, order)
    assert isinstance(mapped.keys[-1], np.memmap)
    check_tables(mapped, ctx, targets)  # small: within the mapped budget
    monkeypatch.setattr(engine_tables, "MAPPED_MEMORY_BUDGET_BYTES", 0)
    over = load_disk_tables(tmp_path / "model", v, order)
    assert over.query_engine() is None  # beyond it: the numpy path on the mapped arrays, the same numbers
    np.testing.assert_allclose(over.log_prob(ctx, targets), mapped.log_prob(ctx, targets), rtol=0, atol=ATOL)


@pytest.fixture
def corpus(random_corpus):
    return random_corpus


def _split_rows(corpus, model):
    from nnlm.lm import contexts

    ids = corpus.split("test")
    positions = np.arange(len(ids)) + corpus.split_offset("test")
    stream = corpus.stream()
    return contexts(stream, positions, model.context_size, corpus.pad_id), stream[positions].astype(np.int64)


def test_class_model_engine_equals_numpy(corpus):
    model = build_ngram("class", corpus, 4, classes=8)
    ctx, targets = _split_rows(corpus, model)
    assert model.tables.query_engine() is not None
    expect = (model.tables.reference_log10_prob_of(model.classes[ctx], model.classes[targets]) * LN10
              + np.log(model.word_prob[targets]))
    np.testing.assert_allclose(model.log_prob(ctx, targets), expect, rtol=0, atol=ATOL)


def test_interpolated_engine_equals_numpy(corpus):
    model = build_ngram("interpolated", corpus)
    ctx, targets = _split_rows(corpus, model)
    rng = np.random.default_rng(12)  # and contexts never seen (no bigram, no trigram): every bucket
    ctx = np.concatenate([ctx, rng.integers(0, len(model.vocab), size=(300, 2))])
    targets = np.concatenate([targets, rng.integers(0, len(model.vocab), 300)])
    assert model.query_engine() is not None
    np.testing.assert_allclose(model.log_prob(ctx, targets), model.reference_log_prob(ctx, targets), rtol=0, atol=ATOL)
    model.weights = model._initial_weights()  # weights changed after the engine was built: it uses the new ones
    np.testing.assert_allclose(model.log_prob(ctx, targets), model.reference_log_prob(ctx, targets), rtol=0, atol=ATOL)


@pytest.mark.parametrize("kind,order", [("kn", 3), ("kn", 5), ("class", 3), ("interpolated", 3)])
def test_distributions_still_sum_to_one_and_match_log_prob(corpus, kind, order):
    model = build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
    ctx, _ = _split_rows(corpus, model)
    ctx = ctx[:20]
    dist = model.distribution(ctx)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, atol=1e-9)
    v = len(model.vocab)
    everything = np.exp(model.log_prob(np.repeat(ctx, v, axis=0), np.tile(np.arange(v), len(ctx))))
    np.testing.assert_allclose(everything.reshape(len(ctx), v), dist, rtol=1e-9, atol=1e-12)


TEXT = "w1 w2 w3 w5\n\n  w0 w0 w7 unknownword w9 w1  \nw4\n"


@pytest.mark.parametrize("kind,order", [("kn", 3), ("kn", 5), ("class", 4), ("interpolated", 3), ("addone", 2)])
def test_score_sentence_is_the_sum_of_score_words(corpus, kind, order):
    model = build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
    for text in (TEXT, "w3", "unknownword w3 w3"):
        expect = score_words(model, text).sum()
        assert score_sentence(model, text) == pytest.approx(expect * LOG10_E, abs=ATOL)
        assert score_sentence(model, text, log10=False) == pytest.approx(expect, abs=ATOL)


def test_score_sentence_of_an_arpa_model_and_bad_input(corpus, tmp_path):
    model = build_ngram("kn", corpus, 4)
    write_arpa(model, tmp_path / "m.arpa")
    read = read_arpa(tmp_path / "m.arpa", model.vocab)
    assert isinstance(read, BackoffModel)
    assert read.tables.query_engine() is not None
    assert score_sentence(read, TEXT) == pytest.approx(score_words(read, TEXT).sum() * LOG10_E, abs=ATOL)
    assert score_sentence(read, TEXT) == pytest.approx(score_sentence(model, TEXT), abs=1e-4)  # ARPA's digits
    assert score_sentence(model, " \n\n ") == 0.0
    with pytest.raises(NnlmError, match="text"):
        score_sentence(model, ["w1", "w2"])


def test_score_sentence_is_exported():
    import nnlm

    assert nnlm.score_sentence is score_sentence


@pytest.mark.parametrize("kind,order", [("kn", 5), ("class", 3), ("interpolated", 3), ("addone", 2)])
def test_score_sentences_is_score_sentence_of_each(corpus, kind, order):
    from nnlm.sentence import score_sentences

    model = build_ngram(kind, corpus, order, **({"classes": 8} if kind == "class" else {}))
    texts = [TEXT, "w3", "", "unknownword w3 w3", " \n", "w1 w1 w1 w1 w1 w1 w2"]
    expect = [score_sentence(model, t) for t in texts]
    np.testing.assert_allclose(score_sentences(model, texts), expect, rtol=0, atol=ATOL)
    np.testing.assert_allclose(score_sentences(model, texts, log10=False), np.array(expect) / LOG10_E, rtol=0,
                               atol=ATOL)
    assert score_sentences(model, []).shape == (0,)
    with pytest.raises(NnlmError, match="list of texts"):
        score_sentences(model, "w1 w2")


ASCII_SPACES = ["\t", "\n", "\x0b", "\x0c", "\r", "\r\n", "\x1c", "\x1d", "\x1e", "\x1f", " "]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.sampled_from(["w1", "w2", "w10", "<p>", "<unk>", "zz", "w", "w1w", "x-y", "\x00",
                                                    "\x7f"]), st.sampled_from(ASCII_SPACES)), max_size=12),
                max_size=6))
def test_ascii_ids_are_the_tokenization_rule(pieces):
    """The compiled ASCII pass gives vocab.encode(text_tokens(text)) for every text, one by one or in a batch."""
    from nnlm.data.tokenize import text_tokens
    from nnlm.ngram.ascii_tokens import AsciiLexicon

    vocab = Vocabulary(("<unk>", "<p>", "w1", "w2", "w10", "<text>", "x-y", "\x7f"))
    lexicon = AsciiLexicon(vocab)
    texts = ["".join(p) for p in pieces]
    expect = [vocab.encode(text_tokens(t)).astype(np.int64) for t in texts]
    ids, bounds = lexicon.encode(texts)
    assert [ids[bounds[i]:bounds[i + 1]].tolist() for i in range(len(texts))] == [e.tolist() for e in expect]
    for text, e in zip(texts, expect, strict=True):
        assert lexicon.encode_one(text).tolist() == e.tolist()


def test_non_ascii_text_goes_through_the_rule_itself(corpus):
    model = build_ngram("kn", corpus, 3)
    text = "w1 w2\u2028w3\u00a0w4 caf\u00e9\u2029\u3000w5"  # Unicode line and word breaks: text_tokens' own
    assert score_sentence(model, text) == pytest.approx(score_words(model, text).sum() * LOG10_E, abs=ATOL)


def test_pickled_or_copied_models_rebuild_their_engine_and_own_their_states(corpus):
    import copy
    import pickle

    model = build_ngram("kn", corpus, 3)
    ctx, targets = _split_rows(corpus, model)
    assert model.tables.query_engine() is not None
    expect = model.log_prob(ctx, targets)
    back = pickle.loads(pickle.dumps(model))
    assert back.tables._engine is None  # not carried: rebuilt at the first query
    assert back.tables.query_engine() is not None
    np.testing.assert_array_equal(back.log_prob(ctx, targets), expect)
    twin = copy.copy(model)
    with pytest.raises(NnlmError, match="not made by this model"):
        twin.advance(model.begin_state(1), np.array([1]))
