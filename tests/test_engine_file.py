"""The query engine's tables saved beside a model (nnlm.ngram.engine_file): written with the model, read at
load instead of built, the same numbers; a stale, damaged or foreign one is refused with one line and the engine
is built instead; loading one never executes anything from it."""
from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.ngram import engine_file, engine_tables
from nnlm.ngram.build import load_ngram, save_ngram
from nnlm.ngram.class_based import ClassNgram
from nnlm.ngram.kneser_ney import KneserNeyModel
from nnlm.use import score_lines

V = 150


def zipf_ids(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ((rng.zipf(1.3, n) - 1) % (V - 5)).astype(np.int64)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, V)]))


@pytest.fixture(scope="module")
def kn(vocab) -> KneserNeyModel:
    return KneserNeyModel.fit(vocab, zipf_ids(20_000, 1), 4)


LINES = ["w2 w3 w4 w5 w2 w3", "w7 w2 nothere w9 w10", "", "w140 w141 w2 w2 w2 <unk> w3"]


def all_scores(model) -> list:
    """Every number the faces report for LINES: score_lines' per-word and per-line log10, and log_prob rows."""
    lines = score_lines(model, LINES)[0] + [s for line in LINES for s in score_lines(model, [line])[0]]
    ids = zipf_ids(500, 3)
    ctx = np.stack([np.roll(ids, j) for j in range(model.order - 1, 0, -1)], axis=1) \
        if model.order > 1 else np.zeros((len(ids), 0), dtype=np.int64)
    return [(s.log10_prob, s.word_log10.tolist(), s.oov) for s in lines] + [model.log_prob(ctx, ids).tolist()]


def saved(model, path) -> object:
    save_ngram(model, path)
    return load_ngram(path)


def test_saved_with_the_model_and_read_at_load_same_numbers(kn, tmp_path, capsys):
    loaded = saved(kn, tmp_path / "m")
    assert (tmp_path / "m" / "engine.npy").is_file() and (tmp_path / "m" / "engine.json").is_file()
    engine = loaded.tables.query_engine()
    assert engine is not None and engine.build_seconds == 0.0  # read, not built
    (tmp_path / "m" / "engine.json").unlink()  # the same model without the saved tables: built in memory
    built = load_ngram(tmp_path / "m")
    assert built.tables.query_engine().build_seconds > 0
    assert np.array_equal(engine.table, built.tables.query_engine().table)  # slot for slot
    assert all_scores(loaded) == all_scores(built) == all_scores(kn)  # bit for bit
    assert capsys.readouterr().err == ""  # a model without the files builds silently


def test_class_model_saves_its_class_engine(vocab, tmp_path):
    model = ClassNgram.fit(vocab, zipf_ids(6_000, 4), 3, 12, progress=False)
    loaded = saved(model, tmp_path / "c")
    assert loaded.tables.query_engine().build_seconds == 0.0
    assert all_scores(loaded) == all_scores(model)


def corrupt_table(path, change) -> None:
    """Rewrite engine.npy with `change(table)` applied and engine.json's CRC-32 made to match it."""
    table = np.load(path / "engine.npy")
    table = change(table)
    np.save(path / "engine.npy", table)
    info = json.loads((path / "engine.json").read_text())
    (path / "engine.json").write_text(json.dumps(info | {"table_crc": zlib.crc32(table), "shape": list(table.shape)}))


def flip_a_byte(path) -> None:
    data = bytearray((path / "engine.npy").read_bytes())
    data[len(data) // 2] ^= 0x40
    (path / "engine.npy").write_bytes(bytes(data))


def truncate(path) -> None:
    data = (path / "engine.npy").read_bytes()
    (path / "engine.npy").write_bytes(data[:len(data) // 2])


def other_model_beside(path, vocab) -> None:
    """engine files of another model (same vocabulary and order) copied beside these arrays."""
    other = path.parent / "other"
    save_ngram(KneserNeyModel.fit(vocab, zipf_ids(20_000, 9), 4), other)
    for name in ("engine.npy", "engine.json"):
        (path / name).write_bytes((other / name).read_bytes())


def pickled_array(path) -> None:
    np.save(path / "engine.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


def other_layout(path) -> None:
    info = json.loads((path / "engine.json").read_text())
    (path / "engine.json").write_text(json.dumps(info | {"layout": engine_file.LAYOUT + 1}))


def slots_moved(path) -> None:
    """Every entry one slot before its place (as a changed hash would put them), the files otherwise consistent:
    only the spot check can tell."""
    corrupt_table(path, lambda table: np.roll(table, -1, axis=0))


def not_json(path) -> None:
    (path / "engine.json").write_text("{not json")


@pytest.mark.parametrize("damage, reason", [
    (flip_a_byte, "CRC-32"), (truncate, ""), (pickled_array, ""), (other_layout, "layout"),
    (slots_moved, "slots"), (not_json, ""), ("other", "another arrays.npz")])
def test_a_bad_saved_engine_is_refused_in_one_line_and_built_instead(kn, vocab, tmp_path, capsys, damage, reason):
    path = tmp_path / "m"
    save_ngram(kn, path)
    other_model_beside(path, vocab) if damage == "other" else damage(path)
    loaded = load_ngram(path)
    engine = loaded.tables.query_engine()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nnlm: note:") and "engine.npy not used" in err and reason in err
    assert engine is not None and engine.build_seconds > 0  # built in memory instead
    assert all_scores(loaded) == all_scores(kn)


def test_no_engine_files_where_the_engine_is_switched_off(kn, tmp_path, monkeypatch):
    monkeypatch.setattr(engine_tables, "ENABLED", False)
    fresh = KneserNeyModel(kn.vocab, type(kn.tables)(kn.tables.vocab_size, kn.tables.keys, kn.tables.log10_prob,
                                                     kn.tables.log10_backoff), kn.params)
    save_ngram(fresh, tmp_path / "m")
    assert not (tmp_path / "m" / "engine.npy").exists() and not (tmp_path / "m" / "engine.json").exists()
    assert load_ngram(tmp_path / "m").tables.query_engine() is None  # (the saved files are not read either)


def test_written_atomically_with_the_model(kn, vocab, tmp_path, monkeypatch):
    """A save that fails while writing the engine tables leaves the model saved before, as it was."""
    path = tmp_path / "m"
    save_ngram(kn, path)
    before = {p.name: p.read_bytes() for p in path.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine_file.np, "save", full_disk)
    with pytest.raises(NnlmError, match="space"):
        save_ngram(KneserNeyModel.fit(vocab, zipf_ids(5_000, 5), 3), path)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary directory left


def test_a_unigram_model_keeps_no_engine_files(vocab, tmp_path, capsys):
    model = KneserNeyModel.fit(vocab, zipf_ids(2_000, 6), 1)
    loaded = saved(model, tmp_path / "u")
    assert not (tmp_path / "u" / "engine.npy").exists()
    assert all_scores(loaded) == all_scores(model) and capsys.readouterr().err == ""


def test_a_model_saved_over_the_directory_after_the_load_does_not_lend_its_engine(kn, vocab, tmp_path, capsys):
    """Tables loaded from a directory that another model is saved into before their first query keep their
    own numbers: the new engine files are refused for them (their arrays' CRC-32s were noted at the load)."""
    path = tmp_path / "m"
    save_ngram(kn, path)
    loaded = load_ngram(path)
    save_ngram(KneserNeyModel.fit(vocab, zipf_ids(20_000, 9), 4), path)
    assert loaded.tables.query_engine().build_seconds > 0
    assert "built from another arrays.npz" in capsys.readouterr().err
    assert all_scores(loaded) == all_scores(kn)


def test_streams_score_on_the_mapping_and_per_call_apis_on_a_copy(kn, tmp_path):
    """A stream (score_lines of many lines, `nnlm score`) scores on the mapped table; the first per-call use
    (a one-line call) copies it into 2 MiB-page memory first; the numbers are the same either way."""
    loaded = saved(kn, tmp_path / "m")
    streamed = score_lines(loaded, LINES)[0]
    engine = loaded.tables._engine
    assert engine.mapped and engine.build_seconds == 0.0
    mapped_table = engine.table
    one = score_lines(loaded, [LINES[0]])[0]
    assert not engine.mapped and engine.table is not mapped_table and np.array_equal(engine.table, mapped_table)
    again = score_lines(loaded, LINES)[0]
    assert [(s.log10_prob, s.word_log10.tolist()) for s in streamed + one] \
        == [(s.log10_prob, s.word_log10.tolist()) for s in again + one] \
        == [(s.log10_prob, s.word_log10.tolist()) for s in score_lines(kn, LINES)[0] + score_lines(kn, [LINES[0]])[0]]


def test_streams_promote_the_mapping_once_it_would_have_paid_for_the_copy(kn, tmp_path):
    """Streams on a mapped table count their tokens; once one token per STREAM_BYTES_PER_TOKEN bytes of table has
    been streamed (this call included), the table is copied before the call, and the numbers do not change."""
    from nnlm.ngram.engine_file import STREAM_BYTES_PER_TOKEN

    loaded = saved(kn, tmp_path / "m")
    first = score_lines(loaded, LINES)[0]
    engine = loaded.tables._engine
    assert engine.mapped and 0 < engine.mapped_tokens < engine.table.nbytes / STREAM_BYTES_PER_TOKEN
    words = [f"w{i % (V - 2) + 2}" for i in range(engine.table.nbytes // STREAM_BYTES_PER_TOKEN)]
    long_text = [" ".join(words[:100]), " ".join(words[100:])]  # two lines: a stream (one line is a per-call use)
    assert score_lines(loaded, long_text[:1] * 2)[0] and engine.mapped  # 200 tokens more: still mapped
    mapped_table = engine.table
    long_scores = score_lines(loaded, long_text)[0]
    assert not engine.mapped and np.array_equal(engine.table, mapped_table)
    assert [(s.log10_prob, s.word_log10.tolist()) for s in first + long_scores] \
        == [(s.log10_prob, s.word_log10.tolist()) for s in score_lines(kn, LINES)[0] + score_lines(kn, long_text)[0]]
