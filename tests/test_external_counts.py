"""Out-of-core counting (--memory) gives the in-memory model to the last bit."""
import json
import subprocess
import sys

import numpy as np
import pytest

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.ngram import external_counts
from nnlm.ngram.arpa import write_arpa
from nnlm.ngram.counts import count_ngrams
from nnlm.ngram.kneser_ney import KneserNeyModel

TINY_GB = 6_000 * 4 * external_counts.BYTES_PER_POSITION / 2**30  # chunks of 6,000 positions


def zipf_ids(n: int, v: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.2, n) - 1) % v
    ids[rng.random(n) < 0.3] = 7  # a frequent word: counts of every size at every order
    return ids.astype(np.int32)


@pytest.mark.parametrize("n, chunk", [(40_000, 6_000), (20_000, 997), (200, 7), (9, 6)])
def test_counts_equal_the_in_memory_counts(n, chunk, monkeypatch):
    ids = zipf_ids(n, 300, n)
    monkeypatch.setattr(external_counts, "chunk_positions", lambda memory, order: chunk)
    expect = count_ngrams(ids, 5, 300)
    got = external_counts.count_ngrams_external(ids, 5, 300, memory_bytes=1)
    for table in ("keys", "counts", "prefix", "suffix"):
        for k in range(5):
            a, b = getattr(expect, table)[k], getattr(got, table)[k]
            assert a.dtype == b.dtype and np.array_equal(a, b), (table, k + 1)


def test_tiny_budget_gives_the_same_model_and_arpa_bytes(tmp_path):
    ids = zipf_ids(40_000, 400, 1)
    assert external_counts.chunk_positions(int(TINY_GB * 2**30), 5) < len(ids) // 5  # several chunks
    vocab = Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, 400)]))
    in_memory = KneserNeyModel.fit(vocab, ids, 5)
    out_of_core = KneserNeyModel.fit(vocab, ids, 5, memory_gb=TINY_GB)
    write_arpa(in_memory, tmp_path / "a.arpa")
    write_arpa(out_of_core, tmp_path / "b.arpa")
    assert (tmp_path / "a.arpa").read_bytes() == (tmp_path / "b.arpa").read_bytes()
    for k in range(5):
        for table in ("keys", "log10_prob", "log10_backoff"):
            assert np.array_equal(getattr(in_memory.tables, table)[k], getattr(out_of_core.tables, table)[k])


def test_bad_budget_is_one_clear_error():
    with pytest.raises(NnlmError, match="--memory"):
        KneserNeyModel.fit(Vocabulary(("<unk>", "a")), np.zeros(10, dtype=np.int32), 3, memory_gb=0)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnlm", *args], capture_output=True, text=True, timeout=300)


def test_cli_memory_option_gives_the_same_perplexities(random_corpus, tmp_path):
    corpus_dir = str(tmp_path / "rand")  # where the fixture wrote the corpus
    base = ["ngram", "--corpus", corpus_dir, "--kind", "kn", "--order", "4", "--json", "--no-cache"]
    chunks_of_500 = 500 * 4 * external_counts.BYTES_PER_POSITION / 2**30
    plain, budget = _cli(*base), _cli(*base, "--memory", f"{chunks_of_500:.12f}")
    assert plain.returncode == 0 and budget.returncode == 0, plain.stderr + budget.stderr
    assert json.loads(plain.stdout)["perplexity"] == json.loads(budget.stdout)["perplexity"]


def test_cli_memory_is_for_the_out_of_core_kinds_only(toy_dir):
    proc = _cli("ngram", "--corpus", str(toy_dir), "--kind", "addone", "--memory", "1", "--no-cache")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "nnlm: error: --memory applies only when building --kind kn or interpolated"


@pytest.mark.parametrize("n, chunk", [(40_000, 6_000), (20_000, 997), (200, 7), (9, 6)])
def test_interpolated_trigram_out_of_core_is_the_in_memory_model(n, chunk, monkeypatch, tmp_path):
    from nnlm.ngram import interpolated_disk
    from nnlm.ngram.interpolated import InterpolatedTrigram

    ids = zipf_ids(n, 300, n + 1)
    monkeypatch.setattr(interpolated_disk, "chunk_positions", lambda memory, order: chunk)
    monkeypatch.setattr(external_counts, "chunk_positions", lambda memory, order: chunk)
    vocab = Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, 300)]))
    in_memory = InterpolatedTrigram.fit(vocab, ids)
    out_of_core = InterpolatedTrigram.fit(vocab, ids, memory_gb=1.0)
    assert set(in_memory.tables) == set(out_of_core.tables)
    for name, table in in_memory.tables.items():
        got = out_of_core.tables[name]
        assert table.dtype == got.dtype and np.array_equal(table, got), name
    contexts = np.stack([ids[:-2], ids[1:-1]], 1)[:500]
    targets = ids[2:][:500].astype(np.int64)
    for model in (in_memory, out_of_core):  # EM on the same held-out rows: the same weights
        model.fit_weights(contexts, targets)
    assert np.array_equal(in_memory.weights, out_of_core.weights)
    assert np.array_equal(in_memory.log_prob(contexts, targets), out_of_core.log_prob(contexts, targets))
    out_of_core.save(tmp_path / "saved")  # mapped tables save like in-memory ones
    assert np.array_equal(InterpolatedTrigram.load(tmp_path / "saved").tables["trigram_keys"],
                          in_memory.tables["trigram_keys"])


def test_interpolated_bad_budget_is_one_clear_error():
    from nnlm.ngram.interpolated import InterpolatedTrigram

    with pytest.raises(NnlmError, match="--memory"):
        InterpolatedTrigram.fit(Vocabulary(("<unk>", "a")), np.zeros(10, dtype=np.int32), memory_gb=0)


def test_cli_interpolated_memory_gives_the_same_perplexities(random_corpus, tmp_path):
    corpus_dir = str(tmp_path / "rand")
    base = ["ngram", "--corpus", corpus_dir, "--kind", "interpolated", "--json", "--no-cache"]
    chunks_of_500 = 500 * 4 * external_counts.BYTES_PER_POSITION / 2**30
    plain, budget = _cli(*base), _cli(*base, "--memory", f"{chunks_of_500:.12f}")
    assert plain.returncode == 0 and budget.returncode == 0, plain.stderr + budget.stderr
    assert json.loads(plain.stdout)["perplexity"] == json.loads(budget.stdout)["perplexity"]
