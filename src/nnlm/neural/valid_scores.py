"""The best epoch's validation scores, kept beside its weights so that they are not computed twice.

Why: a training run scores all of valid exactly after every epoch, and the epoch with the best
validation perplexity is the one model.safetensors holds. `nnlm reproduce` then loads that model and
scored valid again, on the same exact fp32 path (a |V|-wide product for each of valid's 200k Brown
tokens: 42 CPU-s for MLP1 on the AVX2 host, 7 s on the AMX host; docs/experiments/host-speed.md). The
numbers are the same bit for bit (same weights, same code; exact scoring does not depend on the thread
count, tests/test_valid_scores.py), so the run keeps each best epoch's log P of every valid token in
valid_scores.safetensors, tagged with the digest of the weights they were computed from, and the job
reads them instead of scoring again. A file whose tag does not match the weights (a run continued or
changed by another version) is ignored: the split is then scored as before.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from nnlm.errors import NnlmError
from nnlm.neural import checkpoint as ck

VALID_SCORES = "valid_scores.safetensors"


def weights_digest(run_dir: Path) -> str | None:
    """The digest model.safetensors carries in its header (of its tensors), or None without the file."""
    path = run_dir / ck.WEIGHTS
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as fh:
        return (fh.metadata() or {}).get("sha256")


def keep(run_dir: Path, log_probs: np.ndarray | None) -> None:
    """Keep `log_probs` (log P of every valid token) as the scores of the weights model.safetensors now holds
    (None: nothing to keep; a file kept for earlier weights no longer matches their digest)."""
    digest = weights_digest(run_dir)
    if digest is None or log_probs is None:
        return
    ck.save_tensors(run_dir / VALID_SCORES, {"log_probs": torch.from_numpy(np.ascontiguousarray(log_probs))},
                    {"weights_sha256": digest})


def kept(run_dir: Path, tokens: int) -> np.ndarray | None:
    """The valid scores of the weights in model.safetensors, if the run kept them for exactly these weights
    and a split of `tokens` tokens; else None (the caller scores the split)."""
    path = run_dir / VALID_SCORES
    if not os.path.isfile(path):
        return None
    digest = weights_digest(run_dir)
    try:
        tensors, meta = ck.load_tensors(path)
    except NnlmError:
        return None  # damaged: scoring again costs time, not correctness
    scores = tensors.get("log_probs")
    if digest is None or meta.get("weights_sha256") != digest or scores is None or scores.shape != (tokens,) \
            or scores.dtype != torch.float64:
        return None
    return scores.numpy()
