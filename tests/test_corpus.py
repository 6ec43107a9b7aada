import numpy as np
import pytest

from nnlm.data import corpus as corpus_mod
from nnlm.data import load_corpus
from nnlm.errors import NnlmError


@pytest.mark.brown
def test_brown_protocol_figures(brown):
    s = brown.stats()
    assert [s["splits"][k]["tokens"] for k in ("train", "valid", "test")] == [800_000, 200_000, 177_359]
    assert s["vocab"] == 17_907
    assert brown.vocab.tokens[:3] == ("<unk>", "<p>", "<text>")
    stream = brown.stream()
    assert (stream == brown.vocab.id("<text>")).sum() == 500
    assert (stream == brown.vocab.id("<p>")).sum() == 15_667
    assert brown.pad_token == "<text>"


@pytest.mark.brown
def test_brown_unk_is_whole_stream_frequency_at_most_3(brown, brown_token_list):
    tokens = brown_token_list  # corpus_mod.brown_tokens(), read once per test process
    assert len(tokens) == 1_177_359
    from collections import Counter

    counts = Counter(tokens)
    assert sum(1 for c in counts.values() if c > 3) + 1 == 17_907
    rare = sum(c for c in counts.values() if c <= 3)
    assert brown.stats()["unk"] == rare


@pytest.mark.brown
def test_brown_second_load_comes_from_cache(brown, monkeypatch):
    def fail():
        raise AssertionError("rebuilt instead of reading the cache")

    monkeypatch.setattr(corpus_mod, "_build_brown", fail)
    again = load_corpus("brown")
    assert np.array_equal(again.test, brown.test) and again.vocab == brown.vocab


def test_missing_brown_says_how_to_get_it(monkeypatch, tmp_path):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(NnlmError, match=r"nltk.downloader brown.*|.*" + str(tmp_path)) as err:
        load_corpus("brown")
    assert "nltk.downloader brown" in str(err.value) and str(tmp_path) in str(err.value)


def test_text_dir_lines_become_paragraphs(toy_dir):
    c = load_corpus(str(toy_dir), use_cache=False)
    assert c.vocab.decode(c.valid) == ["the", "cat", "sat", "on", "the", "log", "<p>"]
    assert len(c.train) == 6 + 6 + 5 + 3 and c.pad_token == "<p>"


def test_text_dir_vocab_options(toy_dir):
    c = load_corpus(str(toy_dir), min_count=2, use_cache=False)
    assert "mat" not in c.vocab and "the" in c.vocab and "<unk>" in c.vocab
    assert c.vocab.decode(c.test)[-3:] == ["the", "<unk>", "<p>"]
    c = load_corpus(str(toy_dir), max_vocab=4, use_cache=False)
    assert len(c.vocab) == 4
    c = load_corpus(str(toy_dir), vocab_from="all", use_cache=False)
    assert (c.test != c.vocab.unk_id).all()


def test_text_dir_cache_roundtrip_and_key(toy_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))
    a = load_corpus(str(toy_dir))
    b = load_corpus(str(toy_dir))
    assert a.vocab == b.vocab and np.array_equal(a.train, b.train)
    c = load_corpus(str(toy_dir), min_count=2)  # other options, other cache entry
    assert len(c.vocab) < len(a.vocab)
    assert len(list((tmp_path / "cache").iterdir())) == 2


@pytest.mark.parametrize(
    "content, message",
    [(b"", "empty"), (b"  \n\n", "empty"), (b"caf\xe9 au lait\n", "not valid UTF-8"),
     (b"\x7fELF\x00\x01\x02", "binary")],
)
def test_bad_text_files(toy_dir, content, message):
    (toy_dir / "valid.txt").write_bytes(content)
    with pytest.raises(NnlmError, match=message):
        load_corpus(str(toy_dir), use_cache=False)


def test_missing_split_file(toy_dir):
    (toy_dir / "test.txt").unlink()
    with pytest.raises(NnlmError, match="no test.txt"):
        load_corpus(str(toy_dir))


def test_unknown_corpus_name():
    with pytest.raises(NnlmError, match="unknown corpus"):
        load_corpus("penn-treebank-please")


def test_a_symlink_loop_or_dangling_link_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("a", "dangling"):
        with pytest.raises(NnlmError, match="symbolic link that leads nowhere"):
            load_corpus(str(tmp_path / name))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "file"])
def test_damaged_cache_is_rebuilt_with_a_note(toy_dir, tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))
    first = load_corpus(str(toy_dir))
    first_train = np.array(first.train)  # a copy: the cached ids are memory-mapped from the file damaged below
    (entry,) = (tmp_path / "cache").iterdir()
    if damage == "garbage":
        (entry / "ids.npy").write_bytes(b"garbage")
    elif damage == "truncated":
        data = (entry / "ids.npy").read_bytes()
        (entry / "ids.npy").write_bytes(data[: len(data) // 2])
    else:
        import shutil

        shutil.rmtree(entry)
        entry.write_text("not a directory")
    again = load_corpus(str(toy_dir))
    assert "unreadable corpus cache" in capsys.readouterr().err
    np.testing.assert_array_equal(again.train, first_train)
    assert load_corpus(str(toy_dir)).vocab == first.vocab and capsys.readouterr().err == ""  # repaired


def test_failed_cache_write_leaves_nothing_behind(toy_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "open_memmap", boom)
    corpus = load_corpus(str(toy_dir))  # a cache that cannot be written is a note, not a failure
    assert len(corpus.train) > 0
    assert list((tmp_path / "cache").iterdir()) == []


def test_written_files_get_ordinary_permissions(tmp_path):
    import os

    from nnlm.io import atomic_dir, atomic_write_text

    mask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "f.txt", "x")
        with atomic_dir(tmp_path / "d") as d:
            (d / "inner").write_text("y")
    finally:
        os.umask(mask)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
