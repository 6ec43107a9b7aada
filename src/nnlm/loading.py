"""`nnlm.load(path)`: any saved model -> a LanguageModel, chosen by what is at `path`."""
from __future__ import annotations

from pathlib import Path

from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel


def load(path: str | Path) -> LanguageModel:
    """Load a saved n-gram model directory (more kinds register in `LOADERS`)."""
    path = Path(path)
    if not path.exists():
        raise NnlmError(f"no model at {path}")
    for accepts, loader in LOADERS:
        if accepts(path):
            return loader(path)
    raise NnlmError(f"{path} is not a model nnlm can load (a saved n-gram directory)")


def _is_ngram_dir(path: Path) -> bool:
    return path.is_dir() and (path / "arrays.npz").exists()


def _load_ngram(path: Path) -> LanguageModel:
    from nnlm.ngram.build import load_ngram

    return load_ngram(path)


LOADERS = [(_is_ngram_dir, _load_ngram)]
