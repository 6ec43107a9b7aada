"""Word errors, and the weights that combine n-best features, found by coordinate search on a dev set.

The lists are padded into arrays [utterances, max hypotheses, features], so trying a column of
candidate weights costs one array expression: no loop over hypotheses. Two objectives: word error
rate of the 1-best (what a recognizer is judged by; piecewise constant, hence a grid search), and the
log-likelihood of each list's oracle (lowest-error) hypothesis under a softmax of the combined scores
(smooth, so it also separates weightings that give the same 1-best)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnlm.errors import NnlmError
from nnlm.rescore.nbest import NBestSet

OBJECTIVES = ("wer", "likelihood")
GRID = np.linspace(-3.0, 3.0, 61)  # candidate weights, in units that put each feature on the primary's scale


def word_errors(hypothesis: list[str], reference: list[str]) -> int:
    """Levenshtein distance in words (substitutions, insertions, deletions), a row per reference word."""
    hyp = np.asarray(hypothesis, dtype=object)
    row = np.arange(len(hyp) + 1)
    steps = np.arange(len(hyp) + 1)
    for i, word in enumerate(reference, start=1):
        diagonal = row[:-1] + (hyp != word)
        best = np.concatenate([[i], np.minimum(row[1:] + 1, diagonal)])
        row = np.minimum.accumulate(best - steps) + steps  # insertions: a running minimum along the row
    return int(row[-1])


def read_references(path: str) -> dict[str, list[str]]:
    """`uttid words` per line, words by the one tokenization rule; a second line for an id is refused."""
    from nnlm.io import read_input
    from nnlm.rescore.formats import words_of

    refs: dict[str, list[str]] = {}
    first: dict[str, int] = {}
    for number, line in enumerate(read_input(path, "references").decode("utf-8", errors="replace").splitlines(), 1):
        fields = words_of(line)
        if not fields:
            continue
        if fields[0] in refs:
            raise NnlmError(f"{path}:{number}: a second reference for {fields[0]!r} (first on line "
                            f"{first[fields[0]]}); keep one")
        refs[fields[0]], first[fields[0]] = fields[1:], number
    return refs


def require_references(nbest: NBestSet, refs: dict[str, list[str]], option: str) -> None:
    """Every utterance of `nbest` has a reference in `refs` (read from `option`), else one line."""
    missing = [u.uid for u in nbest.utterances if u.uid not in refs]
    if missing:
        raise NnlmError(f"{option}: no reference for utterance {missing[0]}"
                        + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))


@dataclass
class DevSet:
    """An n-best set padded for fast search: features [U, N, F], -inf-masked pads, errors per hypothesis."""

    features: np.ndarray
    valid: np.ndarray
    errors: np.ndarray
    reference_words: int

    @classmethod
    def build(cls, nbest: NBestSet, refs: dict[str, list[str]]) -> DevSet:
        missing = [u.uid for u in nbest.utterances if u.uid not in refs]
        if missing:
            raise NnlmError(f"no reference for utterance {missing[0]}"
                            + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        n = max(len(u.hypotheses) for u in nbest.utterances)
        shape = (len(nbest.utterances), n)
        features = np.zeros((*shape, len(nbest.names)))
        valid = np.zeros(shape, dtype=bool)
        errors = np.zeros(shape, dtype=np.int64)
        for i, utt in enumerate(nbest.utterances):
            h = len(utt.hypotheses)
            features[i, :h] = utt.features
            valid[i, :h] = True
            errors[i, :h] = [word_errors(words, refs[utt.uid]) for words in utt.hypotheses]
        return cls(features, valid, errors, sum(len(refs[u.uid]) for u in nbest.utterances))

    def scores(self, weights: np.ndarray) -> np.ndarray:
        """[..., U, N] combined scores for weights [..., F], pads at -inf."""
        s = np.einsum("unf,...f->...un", self.features, weights)
        return np.where(self.valid, s, -np.inf)

    def wer(self, weights: np.ndarray) -> np.ndarray:
        """Word error rate of the 1-best for each weight vector of weights [..., F]."""
        best = np.argmax(self.scores(weights), axis=-1)
        errs = np.take_along_axis(np.broadcast_to(self.errors, best.shape + self.errors.shape[-1:]),
                                  best[..., None], axis=-1)[..., 0]
        return errs.sum(axis=-1) / max(self.reference_words, 1)

    def oracle_log_likelihood(self, weights: np.ndarray) -> np.ndarray:
        """Sum over utterances of log softmax(scores)[oracle] for weights [..., F]."""
        s = self.scores(weights)
        top = s.max(axis=-1, keepdims=True)
        log_z = top[..., 0] + np.log(np.exp(s - top).sum(axis=-1))
        oracle = np.argmin(np.where(self.valid, self.errors, np.iinfo(np.int64).max), axis=-1)
        picked = np.take_along_axis(s, np.broadcast_to(oracle, s.shape[:-1])[..., None], axis=-1)[..., 0]
        return (picked - log_z).sum(axis=-1)

    def loss(self, objective: str, weights: np.ndarray) -> np.ndarray:
        return self.wer(weights) if objective == "wer" else -self.oracle_log_likelihood(weights)


def tune_weights(dev: DevSet, start: np.ndarray, tunable: list[int], fixed: int, objective: str,
                 passes: int = 4) -> np.ndarray:
    """Coordinate search: each tunable weight in turn set to the best value of a grid scaled to its feature,
    the `fixed` column's weight held (the ranking is unchanged by scaling all weights). The grid narrows
    around the current value each pass; ties keep the current value."""
    if objective not in OBJECTIVES:
        raise NnlmError(f"unknown objective {objective!r} (one of {', '.join(OBJECTIVES)})")
    weights = np.asarray(start, dtype=np.float64).copy()
    flat = dev.features[dev.valid]
    spread = flat.std(axis=0)
    reference = spread[fixed] * abs(weights[fixed]) if spread[fixed] > 0 else 1.0
    span = np.where(spread > 0, reference / np.maximum(spread, 1e-300), 1.0)
    current = float(dev.loss(objective, weights))
    for step in range(passes):
        for j in tunable:
            if j == fixed:
                continue
            values = weights[j] + GRID * span[j] / (4 ** step) if step else GRID * span[j]
            trial = np.repeat(weights[None, :], len(values), axis=0)
            trial[:, j] = values
            losses = dev.loss(objective, trial)
            best = int(np.argmin(losses))
            if losses[best] < current - 1e-12:
                weights, current = trial[best], float(losses[best])
    return weights
