"""Reading frame log-probabilities: .npy files named by utterance, .npz files with one array per
utterance, or directories of them. Each array is [T, C] (frames x labels), finite, with T >= 1.
Rows are normalized with a log-softmax, so raw logits and log-probabilities both work."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nnlm.errors import NnlmError


def logit_files(sources: list[str]) -> list[Path]:
    """The .npy / .npz files named, directories expanded to the ones they hold (sorted)."""
    files: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz") and p.is_file())
            if not inside:
                raise NnlmError(f"directory {path} holds no .npy or .npz files of frame log-probabilities")
            files.extend(inside)
        else:
            files.append(path)
    return files


def read_logits(sources: list[str], width: int) -> dict[str, np.ndarray]:
    """Utterance id -> log-probabilities float32 [T, width], in the order given."""
    from nnlm.io import require_regular

    utterances: dict[str, np.ndarray] = {}
    for path in logit_files(sources):
        require_regular(path, "logits file")
        if path.suffix not in (".npy", ".npz"):
            raise NnlmError(f"logits file {path} is neither .npy (one utterance) nor .npz (one array per utterance)")
        try:
            loaded = np.load(path, allow_pickle=False)
            arrays = {k: loaded[k] for k in loaded.files} if path.suffix == ".npz" else {path.stem: loaded}
        except (ValueError, OSError, EOFError) as exc:
            raise NnlmError(f"cannot read logits file {path}: {exc}") from None
        if not arrays:
            raise NnlmError(f"logits file {path} holds no arrays")
        for uid, array in arrays.items():
            if uid in utterances:
                raise NnlmError(f"utterance {uid} appears twice in the logits given")
            utterances[uid] = _checked(array, f"{path}:{uid}" if path.suffix == ".npz" else str(path), width)
    return utterances


def _checked(array: np.ndarray, where: str, width: int) -> np.ndarray:
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.floating):
        raise NnlmError(f"logits {where} must be a float array [frames, labels], got {array.dtype} {array.shape}")
    if array.shape[0] == 0:
        raise NnlmError(f"logits {where} have no frames")
    if array.shape[1] != width:
        raise NnlmError(f"logits {where} have {array.shape[1]} columns but the labels file has {width} labels")
    if not np.isfinite(array).all():
        raise NnlmError(f"logits {where} hold NaN or infinite values")
    array = array.astype(np.float64)
    top = array.max(axis=1, keepdims=True)
    return (array - top - np.log(np.exp(array - top).sum(axis=1, keepdims=True))).astype(np.float32)
