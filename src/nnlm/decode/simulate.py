"""SIMULATED recognizer output, for tests and benchmarks only: frame log-probabilities made from a
known text with a character-confusion model. No audio and no acoustic model is involved.

Each character of the text (words joined by the boundary label) holds 1-3 frames, with 0-2 blank
frames after it (at least one between two equal characters, as CTC needs). A frame's logits are
Gaussian noise plus `strength` on its character; with probability `confusion` a character's frames
also favour one of its `confusable` neighbours (a fixed random map per alphabet, like acoustically
close sounds) by `strength` + N(0, 1) * `spread`, so the wrong character wins about half the time and
only a language model can tell which spelling is a word."""
from __future__ import annotations

import numpy as np

from nnlm.decode.alphabet import Alphabet


def confusion_map(alphabet: Alphabet, seed: int = 0, neighbours: int = 2) -> dict[int, np.ndarray]:
    """For each character column, `neighbours` other character columns it is confused with."""
    rng = np.random.default_rng(seed)
    chars = np.flatnonzero(alphabet.emits)
    return {int(c): rng.choice(chars[chars != c], size=min(neighbours, len(chars) - 1), replace=False)
            for c in chars}


def simulated_log_probs(words: list[str], alphabet: Alphabet, rng: np.random.Generator,
                        confusable: dict[int, np.ndarray], confusion: float = 0.15, strength: float = 8.0,
                        spread: float = 1.5, noise: float = 1.0) -> np.ndarray:
    """[T, C] log-probabilities of a simulated recognizer that heard `words` (see the module doc)."""
    column = alphabet.char_column
    targets: list[int] = []
    for i, word in enumerate(words):
        if i and alphabet.boundary is not None:
            targets.append(alphabet.boundary)
        targets.extend(column[ch] for ch in word)
    frames: list[tuple[int, int]] = []  # (target column, confuser column or -1)
    for i, target in enumerate(targets):
        confuser = -1
        if target in confusable and rng.random() < confusion:
            confuser = int(rng.choice(confusable[target]))
        frames.extend([(target, confuser)] * int(rng.integers(1, 4)))
        blanks = int(rng.integers(0, 3))
        if i + 1 < len(targets) and targets[i + 1] == target:
            blanks = max(blanks, 1)
        frames.extend([(alphabet.blank, -1)] * blanks)
    if not frames:
        frames = [(alphabet.blank, -1)]
    target_cols = np.array([f[0] for f in frames])
    confuser_cols = np.array([f[1] for f in frames])
    logits = rng.normal(0.0, noise, size=(len(frames), len(alphabet)))
    rows = np.arange(len(frames))
    logits[rows, target_cols] += strength
    confused = confuser_cols >= 0
    # one offset per confused character segment would be more faithful; per frame keeps it simple
    logits[rows[confused], confuser_cols[confused]] += strength + rng.normal(0.0, spread, size=int(confused.sum()))
    logits[:, alphabet.blank] += 0.5  # blanks slightly favoured between characters, as trained CTC models do
    top = logits.max(axis=1, keepdims=True)
    return (logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))).astype(np.float32)
