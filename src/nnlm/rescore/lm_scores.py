"""Language-model scores of many short hypotheses in few model calls.

Each hypothesis is scored on its own, as one paragraph from the start of a text (its words and the
closing `<p>`), so its score does not depend on its neighbours in the file. All hypotheses are laid
end to end and their contexts cut from that one array, so a whole n-best set costs
ceil(tokens / chunk) calls of `LanguageModel.log_prob` however many hypotheses it holds."""
from __future__ import annotations

import numpy as np

from nnlm.data.vocab import PARAGRAPH
from nnlm.lm import EVAL_CHUNK, LanguageModel
from nnlm.use import start_token, stream_log_probs


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
    ctx = hypothesis_contexts(model, lengths, ids)
    out = np.empty(len(ids), dtype=np.float64)
    for lo in range(0, len(ids), chunk):
        out[lo:lo + chunk] = model.log_prob(ctx[lo:lo + chunk], ids[lo:lo + chunk])
    return np.add.reduceat(out, np.concatenate([[0], np.cumsum(lengths)[:-1]]))


def hypothesis_contexts(model: LanguageModel, lengths: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Context rows [len(ids), order-1] of hypotheses laid end to end: each starts from the start token."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    position_in_hyp = np.arange(len(ids)) - np.repeat(starts, lengths)
    offsets = np.arange(-model.context_size, 0, dtype=np.int64)
    index = np.arange(len(ids))[:, None] + offsets[None, :]
    inside = position_in_hyp[:, None] + offsets[None, :] >= 0  # before a hypothesis: the start token
    pad = model.vocab.id(start_token(model.vocab))
    return np.where(inside, ids[np.maximum(index, 0)], pad).astype(np.int64)


def one_at_a_time_log_probs(model: LanguageModel, hypotheses: list[list[str]]) -> np.ndarray:
    """The same numbers, one model call per hypothesis: the plain reference the benchmark compares with."""
    return np.array([stream_log_probs(model, encode_hypotheses(model, [words])[0]).sum() for words in hypotheses])
