"""Streaming corpus preparation gives the ids and vocabulary of reading everything at once."""
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from nnlm.data import corpus as corpus_mod
from nnlm.data import load_corpus, text_stream
from nnlm.data.vocab import PARAGRAPH, TEXT, UNK, Vocabulary

TRICKY = ("the cat sat\n\n  \t\nthe dog  ran <p> away\r\nlast line, no break\x0cform feed\n"
          "caf\u00e9 \u00fcber\u2028sep\u00a0nbsp\n" + "word " * 300 + "\n" + "a b c\n" * 200)


def whole_file_tokens(path: Path) -> list[str]:
    """The reference: the whole file read, split into lines, each non-blank line's words then <p>."""
    tokens: list[str] = []
    for line in path.read_bytes().decode("utf-8").splitlines():
        if line.split():
            tokens.extend(line.split())
            tokens.append(PARAGRAPH)
    return tokens


def make_dir(root: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(300)] + ["caf\u00e9", "<unk>", "<p>"])
    for name in ("train", "valid", "test"):
        lines = [" ".join(words[rng.zipf(1.3, size=rng.integers(0, 15)) % len(words)]) for _ in range(400)]
        (root / f"{name}.txt").write_text("\n".join(lines) + (TRICKY if name == "train" else "") + "\nend")
    return root


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_blocks_give_the_whole_file_tokens(tmp_path, monkeypatch, block):
    path = tmp_path / "t.txt"
    path.write_text(TRICKY + "no final break")
    monkeypatch.setattr(text_stream, "BLOCK_BYTES", block)
    streamed = [t for b in text_stream.token_blocks(path) for t in b]
    assert streamed == whole_file_tokens(path)


@pytest.mark.parametrize("vocab_from, min_count, max_vocab", [("train", 1, None), ("all", 2, None), ("train", 1, 50)])
def test_text_dir_same_ids_and_vocab_as_whole_file_reading(tmp_path, monkeypatch, vocab_from, min_count, max_vocab):
    root = make_dir(tmp_path / "c", 3) if (tmp_path / "c").mkdir() is None else None
    splits = {s: whole_file_tokens(root / f"{s}.txt") for s in corpus_mod.SPLITS}
    counted = splits["train"] if vocab_from == "train" else [t for s in corpus_mod.SPLITS for t in splits[s]]
    vocab = Vocabulary.from_counts(Counter(counted), min_count=min_count, max_size=max_vocab)
    monkeypatch.setattr(text_stream, "BLOCK_BYTES", 333)  # many blocks per file
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))
    for use_cache in (False, True, True):  # built in memory; built into the cache; read from the cache
        c = load_corpus(str(root), min_count=min_count, max_vocab=max_vocab, vocab_from=vocab_from,
                        use_cache=use_cache)
        assert c.vocab == vocab
        for s in corpus_mod.SPLITS:
            np.testing.assert_array_equal(c.split(s), vocab.encode(splits[s]))
            assert c.split(s).dtype == np.int32
        np.testing.assert_array_equal(c.stream(), np.concatenate([c.train, c.valid, c.test]))


def test_cached_ids_are_memory_mapped(toy_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))
    load_corpus(str(toy_dir))
    c = load_corpus(str(toy_dir))
    assert isinstance(c.stream(), np.memmap) and np.shares_memory(c.train, c.stream())


@pytest.mark.brown
def test_brown_cached_form_has_the_same_ids_as_the_token_list(brown, brown_token_list):
    tokens = brown_token_list  # corpus_mod.brown_tokens(), read once per test process
    vocab = Vocabulary.from_counts(Counter(tokens), min_count=4, specials=(UNK, PARAGRAPH, TEXT))
    assert brown.vocab == vocab
    np.testing.assert_array_equal(brown.stream(), vocab.encode(tokens))
    assert (len(brown.train), len(brown.valid)) == (800_000, 200_000)
