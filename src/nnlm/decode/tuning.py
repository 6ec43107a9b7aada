"""alpha and beta chosen on dev utterances by word error rate: a coordinate search over two small grids
(alpha with beta held, then beta with alpha held, twice). WER is piecewise constant in both, so a grid
is the honest search; each point is one decode of the dev set."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from nnlm.decode.beam import DecodeOptions
from nnlm.decode.wer import corpus_wer

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
BETAS = (-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0)


def tune_alpha_beta(decode_set: Callable[[DecodeOptions], dict[str, list[str]]], refs: dict[str, list[str]],
                    start: DecodeOptions, rounds: int = 2) -> tuple[DecodeOptions, float, list[dict]]:
    """The options with the lowest dev WER (ties: the earlier point), that WER, and every trial."""
    tried: dict[tuple[float, float], float] = {}
    trials: list[dict] = []

    def wer(options: DecodeOptions) -> float:
        point = (options.alpha, options.beta)
        if point not in tried:
            errors, words = corpus_wer(decode_set(options), refs)
            tried[point] = errors / max(words, 1)
            trials.append({"alpha": options.alpha, "beta": options.beta, "wer": tried[point]})
        return tried[point]

    best, best_wer = start, wer(start)
    for _ in range(rounds):
        moved = False
        for field, grid in (("alpha", ALPHAS), ("beta", BETAS)):
            for value in grid:
                candidate = replace(best, **{field: value})
                if wer(candidate) < best_wer:
                    best, best_wer, moved = candidate, wer(candidate), True
        if not moved:
            break
    return best, best_wer, trials
