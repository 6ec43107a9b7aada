"""Numpy probes of the back-off engine's tables (nnlm.ngram.numpy_probe) give the compiled kernels' numbers bit for
bit (rows and streams: any start, texts restarting, scales), hand a stream to the kernel where the tables would make
the two differ, and let a fresh process score a saved model without importing numba."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.ngram import numpy_probe
from nnlm.ngram.backoff import BackoffTables
from nnlm.ngram.kneser_ney import fit_kneser_ney
from nnlm.ngram.stream_scoring import scaled_token_log10

V = 120


def zipf_ids(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ((rng.zipf(1.3, n) - 1) % (V - 4)).astype(np.int64)


@pytest.fixture(scope="module", params=[1, 2, 3, 5])
def engine(request):
    tables = fit_kneser_ney(zipf_ids(15_000, request.param), request.param, V)
    return tables.query_engine()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), first=st.integers(0, 6), count=st.integers(0, 400), restarts=st.booleans(),
       scale=st.sampled_from([1.0, 2.302585092994046]))
def test_streams_bit_for_bit(engine, seed, first, count, restarts, scale):
    rng = np.random.default_rng(seed)
    stream = zipf_ids(first + count, seed)
    stream[::13] = V - 1  # a word never seen in train (its unigram only)
    since = None
    if restarts:  # texts of random lengths: tokens of its own text before each token
        lengths = rng.integers(1, 30, size=count + 1)
        since = np.concatenate([np.arange(n) for n in lengths])[:count]
    got = numpy_probe.stream_token_log10(engine, stream, first, count, 1, since, scale, 0.4342944819032518)
    want = scaled_token_log10(engine, stream, first, count, 1, since, scale, 0.4342944819032518)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]


def test_rows_bit_for_bit(engine):
    rng = np.random.default_rng(7)
    ids = zipf_ids(3_000, 8)
    n1 = engine.order - 1
    contexts = np.stack([np.roll(ids, j) for j in range(n1, 0, -1)], axis=1) if n1 else np.zeros((len(ids), 0), int)
    contexts[::3] = rng.integers(0, V, size=contexts[::3].shape)  # some rows in no stream order
    assert np.array_equal(numpy_probe.rows_log10(engine, contexts, ids), engine.log10_prob(contexts, ids))


def test_ids_outside_the_vocabulary_are_refused(engine):
    with pytest.raises(IndexError):
        numpy_probe.stream_token_log10(engine, np.array([0, 1, V]), 0, 3, 1)
    with pytest.raises(IndexError):
        numpy_probe.stream_token_log10(engine, np.array([0, 1, 2]), 0, 3, V)


def test_a_gram_listed_without_its_context_goes_to_the_kernel():
    """The kernel looks no further than the context's listed suffixes plus one. Tables where a listed trigram's
    context is missing (not a model nnlm writes) could make a full match differ: the probes return None and
    BackoffTables.token_log10 takes the kernel's numbers."""
    ids = zipf_ids(15_000, 4)
    tables = fit_kneser_ney(ids, 3, V)
    engine = tables.query_engine()
    w1, w2, w3 = (int(w) for w in ids[100:103])
    context = numpy_probe.extend(numpy_probe.word_hash(np.array([w2])), np.array([w1]))
    slot = int(numpy_probe.probe(engine, 2, context)[0])
    trigram = numpy_probe.extend(numpy_probe.extend(numpy_probe.word_hash(np.array([w3])), np.array([w2])),
                                 np.array([w1]))
    assert slot >= 0 and numpy_probe.probe(engine, 3, trigram)[0] >= 0
    engine.table[slot, 0] ^= 1 << 40  # the context bigram unlisted; its slot stays taken (probe chains intact)
    stream = np.array([1, 1, w1, w2, w3, w1, w2, w3], dtype=np.int64)
    assert numpy_probe.stream_token_log10(engine, stream, 2, 6, 1) is None
    fresh = BackoffTables(tables.vocab_size, tables.keys, tables.log10_prob, tables.log10_backoff)
    fresh._engine = engine
    got = fresh.token_log10(stream, 2, 6, 1)
    want = scaled_token_log10(engine, stream, 2, 6, 1)
    assert np.array_equal(got[0], want[0])


def test_a_fresh_process_scores_a_saved_model_without_numba(tmp_path, random_corpus):
    from nnlm.ngram.build import build_ngram, save_ngram

    save_ngram(build_ngram("kn", random_corpus, 3), tmp_path / "kn3")
    (tmp_path / "text.txt").write_text("w1 w2 w3\nw4 w5 nothere w6\n")
    code = ("import sys, json\nfrom nnlm.loading import load\nfrom nnlm.use import score_file\n"
            "stream = score_file(load(sys.argv[1]), sys.argv[2])\nlines = [s.log10_prob for s in stream]\n"
            "print(json.dumps({'numba': 'numba' in sys.modules, 'lines': lines}))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "kn3"), str(tmp_path / "text.txt")],
                          capture_output=True, text=True, check=True)
    fresh = json.loads(done.stdout)
    assert fresh["numba"] is False and len(fresh["lines"]) == 2
    from nnlm.loading import load
    from nnlm.use import score_file

    model = load(tmp_path / "kn3")
    model.tables.query_engine()
    import nnlm.ngram.query_engine  # noqa: F401 (the kernels loaded in this process: the compiled path)

    assert [s.log10_prob for s in score_file(model, tmp_path / "text.txt")] == fresh["lines"]
