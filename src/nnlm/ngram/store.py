"""Saving count-based models: a directory of config.json + vocab.json + arrays.npz.

Arrays are stored with np.savez and read with allow_pickle=False, so loading a model never
executes code from the file. `config.json` names the model kind; `load_ngram` dispatches on it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import atomic_dir

FORMAT = "nnlm-ngram/1"


def save_arrays(directory: Path | str, kind: str, order: int, vocab: Vocabulary,
                arrays: dict[str, np.ndarray], params: dict[str, Any] | None = None) -> None:
    """Write a model directory in one atomic step (a crash leaves the old one, or none)."""
    directory = Path(directory)
    config = {"format": FORMAT, "kind": kind, "order": order, "vocab_size": len(vocab),
              "vocab_fingerprint": vocab.fingerprint, "params": params or {}}
    with atomic_dir(directory, replace=True) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        vocab.save(tmp / "vocab.json")
        np.savez(tmp / "arrays.npz", **arrays)


def load_arrays(directory: Path | str) -> tuple[dict[str, Any], Vocabulary, dict[str, np.ndarray]]:
    """Read what `save_arrays` wrote, checking that config, vocabulary and arrays agree."""
    directory = Path(directory)
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NnlmError(f"{directory} is not a saved n-gram model (config.json: {exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise NnlmError(f"{directory} is not a saved n-gram model of format {FORMAT}")
    vocab = Vocabulary.load(directory / "vocab.json")
    if vocab.fingerprint != config.get("vocab_fingerprint") or len(vocab) != config.get("vocab_size"):
        raise NnlmError(f"{directory}: vocab.json does not match config.json")
    try:
        with np.load(directory / "arrays.npz", allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as exc:
        raise NnlmError(f"{directory}: unreadable arrays.npz ({exc})") from None
    return config, vocab, arrays
