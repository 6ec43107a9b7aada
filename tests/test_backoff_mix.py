"""Back-off models merged into one (SRILM's -mix-lm): every context sums to 1, every listed n-gram is the dynamic
mixture's, vocabularies are united, KenLM reads the file and agrees, and what cannot be merged is refused."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import random_corpus_texts, write_text_corpus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_arpa import assert_kenlm_agrees
from test_use_neural import cli, one_line_error  # noqa: F401  (fixtures)

from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.mixture import Mixture
from nnlm.ngram.arpa import read_arpa
from nnlm.ngram.backoff_mix import merge_backoff, part_log10
from nnlm.ngram.build import build_ngram

OTHER_TEXT = ("the cat sat on the mat <p> a dog ate the cat <p> w1 w2 the w3 sat <p> "
              "the mat is on the dog <p> w4 w4 the cat w1 <p> ") * 30


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    from nnlm.data import load_corpus

    root = tmp_path_factory.mktemp("mix")
    rand = load_corpus(str(write_text_corpus(root / "rand", *random_corpus_texts())), use_cache=False)
    other = load_corpus(str(write_text_corpus(root / "other", OTHER_TEXT, OTHER_TEXT[:400], OTHER_TEXT[:400])),
                        use_cache=False)
    return rand, other


@pytest.fixture(scope="module")
def same_vocab(corpora):
    rand, _ = corpora
    parts = [build_ngram("kn", rand, 4), build_ngram("kn", rand, 2)]
    return rand, parts, merge_backoff(parts, [0.7, 0.3])


@pytest.fixture(scope="module")
def union_vocab(corpora):
    rand, other = corpora
    parts = [build_ngram("kn", rand, 3), build_ngram("kn", other, 4)]
    return parts, merge_backoff(parts, [0.6, 0.4])


settings_ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings_
@given(st.data())
def test_every_context_sums_to_one(same_vocab, union_vocab, data):
    for merged in (same_vocab[2], union_vocab[1]):
        v, n = len(merged.vocab), merged.order - 1
        random_rows = data.draw(st.lists(st.lists(st.integers(0, v - 1), min_size=n, max_size=n), min_size=1,
                                         max_size=6))
        k = data.draw(st.integers(2, merged.order))  # contexts the merged model lists, padded on the left
        listed = merged.tables.words(k)[data.draw(st.integers(0, len(merged.tables.keys[k - 1]) - 1)), :-1]
        contexts = np.vstack([np.array(random_rows), np.r_[np.zeros(n - len(listed), dtype=np.int64), listed]])
        np.testing.assert_allclose(merged.distribution(contexts).sum(axis=1), 1.0, atol=1e-9)


def test_listed_ngrams_are_the_dynamic_mixture_and_the_rest_close(same_vocab):
    corpus, parts, merged = same_vocab
    top = merged.tables.words(merged.order)
    dynamic = Mixture(parts, [0.7, 0.3]).log_prob(top[:, :-1], top[:, -1])
    np.testing.assert_allclose(merged.log_prob(top[:, :-1], top[:, -1]), dynamic, rtol=0, atol=1e-9)
    for k in range(1, merged.order):  # lower orders: the parts' own back-off from the shorter context
        grams = merged.tables.words(k)
        mixed = sum(w * 10.0 ** part_log10(p.tables, grams[:, :-1], grams[:, -1])
                    for w, p in zip((0.7, 0.3), parts, strict=True))
        np.testing.assert_allclose(merged.tables.log10_prob[k - 1], np.log10(mixed), atol=1e-12)
    for split in ("valid", "test"):  # only n-grams absent from the union differ
        static, mix = perplexity(merged, corpus, split), perplexity(Mixture(parts, [0.7, 0.3]), corpus, split)
        assert abs(static / mix - 1) < 0.01


def test_union_of_vocabularies_gives_a_missing_word_zero_from_its_part(union_vocab):
    (a, b), merged = union_vocab
    assert set(merged.vocab.tokens) == set(a.vocab.tokens) | set(b.vocab.tokens)
    assert merged.vocab.tokens[:len(a.vocab)] == a.vocab.tokens
    only_b = [t for t in b.vocab.tokens if t not in a.vocab][0]
    p_b = 10.0 ** b.tables.log10_prob[0][b.vocab.id(only_b)]
    assert np.isclose(10.0 ** merged.tables.log10_prob[0][merged.vocab.id(only_b)], 0.4 * p_b)
    assert np.isclose(np.sum(10.0 ** merged.tables.log10_prob[0]), 1.0)


def test_kenlm_reads_the_merged_file_and_agrees(same_vocab, union_vocab, tmp_path):
    from nnlm.ngram.arpa import write_arpa

    corpus, _, merged = same_vocab
    write_arpa(merged, tmp_path / "merged.arpa")
    assert_kenlm_agrees(merged, corpus, "test", tmp_path / "merged.arpa")  # 2e-5 in log10
    again = read_arpa(tmp_path / "merged.arpa", corpus.vocab)
    np.testing.assert_allclose(again.tables.log10_prob[-1], merged.tables.log10_prob[-1], atol=1e-9)
    write_arpa(union_vocab[1], tmp_path / "union.arpa")
    pytest.importorskip("kenlm").Model(str(tmp_path / "union.arpa"))


def test_what_has_no_static_form_is_refused(same_vocab, corpora):
    _, parts, _ = same_vocab
    with pytest.raises(NnlmError, match="only back-off n-gram models"):
        merge_backoff([parts[0], build_ngram("interpolated", corpora[0], 3)], [0.5, 0.5])
    with pytest.raises(NnlmError, match="per-bucket"):
        merge_backoff(parts, np.full((3, 2), 0.5))
    with pytest.raises(NnlmError, match="summing to 1"):
        merge_backoff(parts, [0.7, 0.7])


def test_cli_merges_and_reports_both_perplexities(tmp_path, cli):  # noqa: F811
    import json

    corpus_dir = str(write_text_corpus(tmp_path / "rand", *random_corpus_texts()))
    code, out, err = cli("mix", "kn:4", "kn:2", "--corpus", corpus_dir, "--arpa", tmp_path / "m.arpa", "--json")
    assert code == 0, err
    result = json.loads(out)
    for split, p in result["perplexity"].items():
        assert abs(result["arpa_perplexity"][split] / p - 1) < 0.01
    assert read_arpa(tmp_path / "m.arpa").order == 4


@pytest.mark.parametrize(("models", "weights", "message"), [
    ("neural", "em", "back-off n-gram models only"),
    ("interpolated:3", "em", "back-off n-gram models only"),
    ("kn:3", "em-buckets", "per-bucket weights"),
])
def test_cli_refuses_what_cannot_be_merged_and_writes_nothing(neural_run, tmp_path, cli, models, weights,  # noqa: F811
                                                             message):
    run_dir, corpus_dir = neural_run
    part = str(run_dir) if models == "neural" else models
    result = cli("mix", "kn:2", part, "--corpus", corpus_dir, "--weights", weights, "--arpa", tmp_path / "m.arpa")
    one_line_error(result, message)
    assert list(tmp_path.iterdir()) == []
