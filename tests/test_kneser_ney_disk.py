"""Kneser-Ney estimated out of core (tables on disk, order by order) is the in-memory model to the last bit."""
import json
import subprocess
import sys

import numpy as np
import pytest

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.ngram import arpa, external_counts
from nnlm.ngram.arpa import write_arpa
from nnlm.ngram.backoff import BackoffModel
from nnlm.ngram.kneser_ney import KneserNeyModel, _fit
from nnlm.ngram.kneser_ney_disk import context_chunks, fit_kneser_ney_to_disk, load_disk_tables


def zipf_ids(n: int, v: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.2, n) - 1) % v
    ids[rng.random(n) < 0.3] = 7  # a frequent word: counts of every size at every order
    return ids.astype(np.int32)


@pytest.mark.parametrize("n, order, chunk", [(40_000, 5, 3_000), (20_000, 4, 997), (200, 3, 7), (50, 2, 5),
                                             (30, 1, 4)])
def test_disk_tables_equal_the_in_memory_tables(n, order, chunk, tmp_path, monkeypatch):
    v = 300
    ids = zipf_ids(n, v, n)
    expect, expect_discounts = _fit(ids, order, v)
    monkeypatch.setattr(external_counts, "chunk_positions", lambda memory, order: chunk)
    monkeypatch.setattr("nnlm.ngram.kneser_ney_disk.chunk_positions", lambda memory, order: chunk)
    discounts = fit_kneser_ney_to_disk(ids, order, v, 1.0, tmp_path / "model", workdir=tmp_path)
    assert discounts == expect_discounts
    got = load_disk_tables(tmp_path / "model", v, order)
    for k in range(order):
        for table in ("keys", "log10_prob", "log10_backoff"):
            a, b = getattr(expect, table)[k], getattr(got, table)[k]
            assert a.dtype == b.dtype and np.array_equal(a, b), (table, k + 1)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # the counts' directory is gone


def test_disk_model_writes_the_same_arpa_bytes_and_kenlm_agrees(tmp_path, monkeypatch):
    v, order = 400, 5
    ids = zipf_ids(40_000, v, 1)
    vocab = Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, v)]))
    write_arpa(KneserNeyModel.fit(vocab, ids, order), tmp_path / "memory.arpa")
    monkeypatch.setattr("nnlm.ngram.kneser_ney_disk.chunk_positions", lambda memory, order: 2_000)
    monkeypatch.setattr(external_counts, "chunk_positions", lambda memory, order: 2_000)
    fit_kneser_ney_to_disk(ids, order, v, 1.0, tmp_path / "model")
    monkeypatch.setattr(arpa, "WRITE_ROWS", 333)  # the memory-mapped tables written a block at a time
    write_arpa(BackoffModel(vocab, load_disk_tables(tmp_path / "model", v, order)), tmp_path / "disk.arpa")
    assert (tmp_path / "memory.arpa").read_bytes() == (tmp_path / "disk.arpa").read_bytes()


def test_chunks_are_cut_between_contexts():
    v = 10
    keys = np.array([0 * v + 1, 0 * v + 2, 0 * v + 3, 2 * v + 1, 2 * v + 5, 3 * v + 0, 5 * v + 9])
    # nominal cuts at 2, 4, 6 move back to the first entry of their context: 0 (dropped), 3, 6
    chunks = context_chunks(keys, v, 2, contexts=7)
    assert chunks == [(0, 3, 0, 2), (3, 6, 2, 5), (6, 7, 5, 7)]


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(NnlmError, match="token ids"):
        fit_kneser_ney_to_disk(np.array([0, 5, 1]), 2, 3, 1.0, tmp_path / "m")
    with pytest.raises(NnlmError, match="--memory"):
        fit_kneser_ney_to_disk(np.array([0, 1, 1]), 2, 3, 0.0, tmp_path / "m")


def test_kenlm_reads_the_disk_models_arpa(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    v, order = 200, 4
    ids = zipf_ids(30_000, v, 3)
    vocab = Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, v)]))
    # 1e-3 GB: chunks of 3,355 positions, 9 of them (1e-4 made 90, and their merges took 25 CPU s)
    fit_kneser_ney_to_disk(ids, order, v, 1e-3, tmp_path / "model")
    model = BackoffModel(vocab, load_disk_tables(tmp_path / "model", v, order))
    write_arpa(model, tmp_path / "disk.arpa")
    theirs = kenlm.Model(str(tmp_path / "disk.arpa"))
    rng = np.random.default_rng(0)
    for start in rng.integers(0, len(ids) - 40, 20):
        sentence = ids[start:start + 40]
        words = [vocab.tokens[i] for i in sentence]
        # no <s> or </s>; the words with a full context, whose scores do not depend on how a start is treated
        full = [score for score, _, _ in theirs.full_scores(" ".join(words), bos=False, eos=False)][order - 1:]
        at = np.arange(order - 1, len(sentence))
        contexts = np.stack([sentence[t - order + 1:t] for t in at])
        ours = model.log10_prob(contexts, sentence[at])
        np.testing.assert_allclose(full, ours, atol=2e-5, rtol=0)
        assert sum(full) == pytest.approx(float(ours.sum()), abs=1e-4)


def test_cli_memory_builds_saves_and_writes_the_in_memory_model(random_corpus, tmp_path):
    corpus_dir = str(tmp_path / "rand")  # where the fixture wrote the corpus
    base = ["ngram", "--corpus", corpus_dir, "--kind", "kn", "--order", "4", "--json", "--no-cache"]
    runs = {}
    for name, extra in (("memory", []), ("disk", ["--memory", "0.0001"])):
        outputs = ["--arpa", str(tmp_path / f"{name}.arpa"), "--save", str(tmp_path / name)]
        runs[name] = subprocess.run([sys.executable, "-m", "nnlm", *base, *extra, *outputs],
                                    capture_output=True, text=True, timeout=300)
        assert runs[name].returncode == 0, runs[name].stderr
    assert json.loads(runs["memory"].stdout)["perplexity"] == json.loads(runs["disk"].stdout)["perplexity"]
    assert (tmp_path / "memory.arpa").read_bytes() == (tmp_path / "disk.arpa").read_bytes()
    saved = [BackoffModel.load(tmp_path / name).tables for name in ("memory", "disk")]
    for k in range(4):
        assert np.array_equal(saved[0].log10_prob[k], saved[1].log10_prob[k])
        assert np.array_equal(saved[0].log10_backoff[k], saved[1].log10_backoff[k])
