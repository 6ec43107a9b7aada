"""Language-model scores of many short hypotheses in few model calls.

Each hypothesis is scored on its own, as one paragraph from the start of a text (its words and the
closing `<p>`), so its score does not depend on its neighbours in the file. All hypotheses are laid
end to end and their contexts cut from that one array, so a whole n-best set costs
ceil(tokens / chunk) calls of `LanguageModel.log_prob` however many hypotheses it holds."""
from __future__ import annotations

import numpy as np

from nnlm.data.vocab import PARAGRAPH
from nnlm.lm import EVAL_CHUNK, LanguageModel, chunked_log_probs, start_id, stream_log_probs


def encode_hypotheses(model: LanguageModel, hypotheses: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(ids of every hypothesis + `<p>`, end to end; the length of each)."""
    tokens = [w for words in hypotheses for w in (*words, PARAGRAPH)]
    lengths = np.fromiter((len(words) + 1 for words in hypotheses), dtype=np.int64, count=len(hypotheses))
    return np.asarray(model.vocab.encode(tokens), dtype=np.int64), lengths


def hypothesis_log_probs(model: LanguageModel, hypotheses: list[list[str]], chunk: int = EVAL_CHUNK) -> np.ndarray:
    """Natural-log probability of each hypothesis (words and closing `<p>`), float64 [len(hypotheses)]."""
    if not hypotheses:
        return np.zeros(0, dtype=np.float64)
    ids, lengths = encode_hypotheses(model, hypotheses)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    position_in_hyp = np.arange(len(ids)) - np.repeat(starts, lengths)  # each starts from the start token
    out = chunked_log_probs(model, ids, 0, len(ids), start_id(model), since_start=position_in_hyp, chunk=chunk)
    return np.add.reduceat(out, starts)


def one_at_a_time_log_probs(model: LanguageModel, hypotheses: list[list[str]]) -> np.ndarray:
    """The same numbers, one model call per hypothesis: the plain reference the benchmark compares with."""
    return np.array([stream_log_probs(model, encode_hypotheses(model, [words])[0]).sum() for words in hypotheses])
