"""A saved model's arrays are mapped from arrays.npz (nnlm.ngram.mapped_npz) with np.load's values, dtypes and
shapes; a damaged file is refused in one line, not read as numbers; a compressed file is read by np.load. Saved
arrays are 64-byte aligned in the file (an unaligned array sends np.searchsorted and numba down slow paths), and an
np.savez file's misaligned arrays are copied aligned at the load."""
from __future__ import annotations

import numpy as np
import pytest

from nnlm.errors import NnlmError
from nnlm.ngram.mapped_npz import mapped_arrays, save_aligned_npz
from nnlm.ngram.store import load_arrays

ARRAYS = {"keys_1": np.arange(7, dtype=np.int64), "p": np.linspace(-3, 0, 12).reshape(3, 4),
          "f": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)), "empty": np.zeros(0),
          "scalar": np.array(2.5)}


def test_mapped_arrays_are_np_loads(tmp_path):
    np.savez(tmp_path / "a.npz", **ARRAYS)
    got = mapped_arrays(tmp_path / "a.npz")
    assert sorted(got) == sorted(ARRAYS)
    for name, want in ARRAYS.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape
        np.testing.assert_array_equal(got[name], want)
    got["p"][0, 0] = 9.0  # writable, and the file is left as it was
    np.testing.assert_array_equal(np.load(tmp_path / "a.npz")["p"], ARRAYS["p"])


def test_saved_arrays_are_aligned_and_np_load_reads_them(tmp_path):
    odd = {"a" * 7: np.arange(3, dtype=np.int8)} | ARRAYS | {"b" * 13: np.arange(5, dtype=np.int64)}
    save_aligned_npz(tmp_path / "s.npz", odd)
    got = mapped_arrays(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz", allow_pickle=False) as npz:
        for name, want in odd.items():
            np.testing.assert_array_equal(npz[name], want)
            np.testing.assert_array_equal(got[name], want)
            assert got[name].dtype == want.dtype and got[name].shape == want.shape
            assert got[name].ctypes.data % 64 == 0 and got[name].base is not None  # aligned, and mapped (no copy)


def test_np_savez_files_load_aligned(tmp_path):
    odd = {"x": np.arange(3, dtype=np.int8), "keys": np.arange(1000, dtype=np.int64)}
    np.savez(tmp_path / "u.npz", **odd)
    got = mapped_arrays(tmp_path / "u.npz")
    assert got["keys"].flags.aligned and got["keys"].ctypes.data % 8 == 0
    np.testing.assert_array_equal(got["keys"], odd["keys"])


def test_compressed_or_damaged_files(tmp_path):
    np.savez_compressed(tmp_path / "c.npz", **ARRAYS)
    assert mapped_arrays(tmp_path / "c.npz") is None  # np.load reads it
    np.savez(tmp_path / "d.npz", **ARRAYS)
    data = bytearray((tmp_path / "d.npz").read_bytes())
    at = data.find(np.linspace(-3, 0, 12).tobytes()[8:16])
    data[at] ^= 0xFF  # one byte of an array's numbers
    (tmp_path / "d.npz").write_bytes(bytes(data))
    with pytest.raises(Exception, match="CRC"):
        mapped_arrays(tmp_path / "d.npz")


def test_a_damaged_model_is_one_line(tmp_path, random_corpus):
    from nnlm.ngram.build import build_ngram, save_ngram

    save_ngram(build_ngram("kn", random_corpus, 3), tmp_path / "m")
    config, vocab, arrays = load_arrays(tmp_path / "m")
    assert config["kind"] == "kn" and arrays["keys_1"].shape == (len(vocab),)
    assert all(a.flags.aligned and a.ctypes.data % 64 == 0 for a in arrays.values() if a.size)
    data = bytearray((tmp_path / "m" / "arrays.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "m" / "arrays.npz").write_bytes(bytes(data))
    with pytest.raises(NnlmError, match="unreadable arrays.npz") as err:
        load_arrays(tmp_path / "m")
    assert "\n" not in str(err.value)
