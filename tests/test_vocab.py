from collections import Counter

import numpy as np
import pytest

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError


def test_from_counts_orders_specials_then_frequency_then_string():
    v = Vocabulary.from_counts(Counter({"b": 3, "a": 3, "c": 5, "rare": 1}), min_count=2)
    assert v.tokens == ("<unk>", "<p>", "c", "a", "b")


def test_max_size_keeps_most_frequent():
    v = Vocabulary.from_counts(Counter({"b": 3, "a": 4, "c": 5}), max_size=3)
    assert v.tokens == ("<unk>", "<p>", "c")


def test_encode_maps_unknown_to_unk_and_decode_inverts():
    v = Vocabulary(("<unk>", "x", "y"))
    ids = v.encode(["y", "zzz", "x"])
    assert ids.dtype == np.int32 and ids.tolist() == [2, 0, 1]
    assert v.decode(ids) == ["y", "<unk>", "x"]


def test_save_load_roundtrip(tmp_path):
    v = Vocabulary(("<unk>", "é", "<p>"))
    v.save(tmp_path / "v.json")
    w = Vocabulary.load(tmp_path / "v.json")
    assert w == v and w.fingerprint == v.fingerprint


@pytest.mark.parametrize("tokens", [("<unk>", "a", "a"), ("a", "b")])
def test_invalid_vocabularies_are_refused(tokens):
    with pytest.raises(NnlmError):
        Vocabulary(tokens)


def test_unreadable_vocab_file(tmp_path):
    (tmp_path / "v.json").write_text("{not json")
    with pytest.raises(NnlmError, match="cannot read vocabulary"):
        Vocabulary.load(tmp_path / "v.json")
