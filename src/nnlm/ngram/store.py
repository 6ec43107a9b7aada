"""Saving count-based models: a directory of config.json + vocab.json + arrays.npz.

Arrays are stored as np.savez stores them (each 64-byte aligned: mapped_npz.save_aligned_npz) and read
with allow_pickle=False, so loading a model never
executes code from the file. `config.json` names the model kind; `load_ngram` dispatches on it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import JSON_LIMIT, atomic_dir, atomic_write_text, read_input, require_regular
from nnlm.ngram.mapped_npz import mapped_arrays, save_aligned_npz

FORMAT = "nnlm-ngram/1"


def save_arrays(directory: Path | str, kind: str, order: int, vocab: Vocabulary,
                arrays: dict[str, np.ndarray], params: dict[str, Any] | None = None,
                beside: Callable[[Path], Any] | None = None) -> None:
    """Write a model directory in one atomic step (a crash leaves the old one, or none); `beside(tmp)` writes
    more files into it once arrays.npz is there (a back-off model's engine tables, nnlm.ngram.engine_file)."""
    directory = save_target(Path(directory))
    config = {"format": FORMAT, "kind": kind, "order": order, "vocab_size": len(vocab),
              "vocab_fingerprint": vocab.fingerprint, "params": params or {}}
    with atomic_dir(directory, replace=True) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        vocab.save(tmp / "vocab.json")
        save_aligned_npz(tmp / "arrays.npz", arrays)
        if beside is not None:
            beside(tmp)


def record_corpus(directory: Path | str, corpus: dict[str, Any]) -> None:
    """Add the corpus options a model was built on to its config.json (one atomic replace), so that
    commands score it on that corpus by default (nnlm.data.provenance)."""
    path = Path(os.path.realpath(directory)) / "config.json"
    config = json.loads(read_input(path, "config", JSON_LIMIT))
    atomic_write_text(path, json.dumps(config | {"corpus": corpus}, indent=2))


def _is_saved_model(directory: Path) -> bool:
    try:
        return json.loads(read_input(directory / "config.json", "config", JSON_LIMIT)).get("format") == FORMAT
    except (NnlmError, ValueError, AttributeError):
        return False


def save_target(directory: Path, is_ours: Callable[[Path], bool] = _is_saved_model) -> Path:
    """Where `--save DIR` writes (a symlink is followed): a new name, an empty directory or a model
    nnlm saved before (`is_ours`); anything else (files, a run directory, /) is refused and left as it is."""
    real = Path(os.path.realpath(directory))
    if not real.name:
        raise NnlmError(f"cannot save a model as {directory}: give a new directory name")
    if os.path.lexists(real) and not real.is_dir():
        raise NnlmError(f"{directory} exists and is not a directory; it is not replaced (choose another --save)")
    if real.is_dir() and any(real.iterdir()) and not is_ours(real):
        raise NnlmError(f"{directory} exists and is not a model saved by nnlm; it is not replaced "
                        "(choose another --save)")
    return real


def read_config(directory: Path | str) -> dict[str, Any]:
    """The config.json of a saved model (its kind: which class loads it), checked to be one nnlm saved."""
    directory = Path(directory)
    try:
        config = json.loads(read_input(directory / "config.json", "config", JSON_LIMIT))
    except (NnlmError, ValueError) as exc:
        raise NnlmError(f"{directory} is not a saved n-gram model (config.json: {exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise NnlmError(f"{directory} is not a saved n-gram model of format {FORMAT}")
    return config


def load_arrays(directory: Path | str) -> tuple[dict[str, Any], Vocabulary, dict[str, np.ndarray]]:
    """Read what `save_arrays` wrote, checking that config, vocabulary and arrays agree."""
    directory = Path(directory)
    config = read_config(directory)
    vocab = Vocabulary.load(directory / "vocab.json")
    if vocab.fingerprint != config.get("vocab_fingerprint") or len(vocab) != config.get("vocab_size"):
        raise NnlmError(f"{directory}: vocab.json does not match config.json")
    require_regular(directory / "arrays.npz", "model arrays")
    try:
        arrays = mapped_arrays(directory / "arrays.npz")  # mapped: no copies (mapped_npz.py)
        if arrays is None:
            with np.load(directory / "arrays.npz", allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:  # zipfile.BadZipFile, OSError, ValueError: a damaged file, one line
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise NnlmError(f"{directory}: unreadable arrays.npz ({reason})") from None
    return config, vocab, arrays
