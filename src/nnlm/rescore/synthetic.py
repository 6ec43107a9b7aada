"""Made-up n-best lists for testing and demonstrating rescoring: each true sentence hidden among
corrupted copies (adjacent words swapped, words substituted or deleted), every hypothesis given a noisy
"acoustic" score that only loosely prefers fewer edits, so the decoder's order is often wrong and a
language model has something to fix."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nnlm.io import atomic_write_text

ACOUSTIC_PER_EDIT = 1.0   # log10 units lost per edit
ACOUSTIC_NOISE = 1.5      # standard deviation of the noise added to every hypothesis


def corrupt(words: list[str], pool: np.ndarray, rng: np.random.Generator) -> tuple[list[str], int]:
    """A copy of `words` with 1-3 edits (swap, substitution from `pool`, deletion); (copy, edits made)."""
    out = list(words)
    edits = int(rng.integers(1, 4))
    for _ in range(edits):
        kind = rng.integers(3) if len(out) > 2 else 1
        i = int(rng.integers(len(out) - 1)) if kind == 0 else int(rng.integers(len(out)))
        if kind == 0:
            out[i], out[i + 1] = out[i + 1], out[i]
        elif kind == 1:
            out[i] = str(rng.choice(pool))
        else:
            del out[i]
    return out, edits


def make_nbest(sentences: list[list[str]], n: int, seed: int = 0) -> list[tuple[list[list[str]], np.ndarray]]:
    """Per sentence: (n hypotheses sorted by acoustic score, best first; their acoustic scores).
    The true sentence is among them unless a corruption happens to equal it."""
    rng = np.random.default_rng(seed)
    pool = np.array([w for s in sentences for w in s])
    lists = []
    for words in sentences:
        hyps, edits = [list(words)], [0]
        for _ in range(n - 1):
            hyp, e = corrupt(words, pool, rng)
            hyps.append(hyp)
            edits.append(e)
        acoustic = -ACOUSTIC_PER_EDIT * np.array(edits) + rng.normal(0.0, ACOUSTIC_NOISE, n)
        order = np.argsort(-acoustic, kind="stable")
        lists.append(([hyps[i] for i in order], acoustic[order]))
    return lists


def write_srilm_set(sentences: list[list[str]], directory: Path, n: int = 10, seed: int = 0,
                    prefix: str = "utt") -> Path:
    """SRILM lists `acoustic lm nwords words` (lm 0: the "decoder" had none), one file per sentence under
    `directory`, and `directory`.refs with `uttid words` per line; returns the references' path."""
    directory.mkdir(parents=True, exist_ok=True)
    refs = []
    for i, (words, (hyps, acoustic)) in enumerate(zip(sentences, make_nbest(sentences, n, seed), strict=True)):
        uid = f"{prefix}{i:04d}"
        atomic_write_text(directory / uid, "".join(f"{a:.4f} 0 {len(h)} {' '.join(h)}\n"
                                                   for h, a in zip(hyps, acoustic, strict=True)))
        refs.append(f"{uid} {' '.join(words)}\n")
    refs_path = directory.with_suffix(".refs")
    atomic_write_text(refs_path, "".join(refs))
    return refs_path
