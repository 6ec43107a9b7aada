"""An nnlm model where pyctcdecode (and Hugging Face's Wav2Vec2ProcessorWithLM) take KenLM today.

    from nnlm.decode.pyctc import build_ctcdecoder
    decoder = build_ctcdecoder(labels, nnlm.load("kn5"), alpha=0.5, beta=1.0)
    text = decoder.decode(log_probs)                      # log_probs: [T, len(labels)]

pyctcdecode asks for one word at a time (`score(prev_state, word, is_last_word)`), so this adapter
cannot batch a frame's words as `nnlm decode`'s own search does; it is the way into existing code.
Needs the optional extra: pip install 'nnlm[decode]'."""
from __future__ import annotations

import math

from nnlm.data.vocab import PARAGRAPH, TEXT
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel, LMState

try:
    from pyctcdecode.alphabet import Alphabet as _PyAlphabet
    from pyctcdecode.decoder import BeamSearchDecoderCTC
    from pyctcdecode.language_model import AbstractLanguageModel
except ImportError:  # pragma: no cover - the message is the point
    raise NnlmError("the pyctcdecode adapter needs pyctcdecode: pip install 'nnlm[decode]'") from None

AVG_TOKEN_LEN = 6
LN10 = math.log(10.0)  # pyctcdecode's unk offset is in log10 units, added before the LM weight


class NnlmLanguageModel(AbstractLanguageModel):
    """pyctcdecode's language-model interface over any nnlm LanguageModel: alpha * ln P(word) + beta per
    word (pyctcdecode's units: its KenLM model converts log10 to ln); alpha * ln(10) * `unk_offset` more
    for a word outside the vocabulary, `unk_offset` for such a partial word (its KenLM model's rules);
    the paragraph end `<p>` as the sentence end when `score_boundary`."""

    def __init__(self, model: LanguageModel, alpha: float = 0.5, beta: float = 1.0, unk_offset: float = -10.0,
                 score_boundary: bool = True) -> None:
        self.model = model
        self.alpha, self.beta, self.unk_offset, self.score_boundary = alpha, beta, unk_offset, score_boundary
        words = [t for t in model.vocab.tokens if t not in (model.vocab.unk, PARAGRAPH, TEXT)]
        self._words = set(words)
        self._prefixes = {w[:i] for w in words for i in range(1, len(w) + 1)}
        self._end = model.vocab.id(PARAGRAPH) if PARAGRAPH in model.vocab else None

    @property
    def order(self) -> int:
        return self.model.order

    def get_start_state(self) -> LMState:
        return self.model.begin_state(1)

    def score_partial_token(self, partial_token: str) -> float:
        score = 0.0 if partial_token in self._prefixes or not partial_token else self.unk_offset
        return score * len(partial_token) / AVG_TOKEN_LEN if len(partial_token) > AVG_TOKEN_LEN else score

    def score(self, prev_state: LMState, word: str, is_last_word: bool = False) -> tuple[float, LMState]:
        log_prob, state = self.model.advance(prev_state, [self.model.vocab.id(word)])
        total = float(log_prob[0]) + (0.0 if word in self._words else LN10 * self.unk_offset)
        if is_last_word and self.score_boundary and self._end is not None:
            total += float(self.model.advance(state, [self._end])[0][0])
        return self.alpha * total + self.beta, state

    def reset_params(self, **params) -> None:
        for name in ("alpha", "beta", "unk_offset", "score_boundary"):
            if params.get(name) is not None:
                setattr(self, name, params[name])


def build_ctcdecoder(labels: list[str], model: LanguageModel, alpha: float = 0.5, beta: float = 1.0,
                     unk_offset: float = -10.0, score_boundary: bool = True) -> BeamSearchDecoderCTC:
    """A pyctcdecode decoder over `labels` (wav2vec2 style: <pad> blank, | space) with `model` as its LM."""
    if not math.isfinite(alpha) or not math.isfinite(beta):
        raise NnlmError("alpha and beta must be finite numbers")
    return BeamSearchDecoderCTC(_PyAlphabet.build_alphabet(list(labels)),
                                NnlmLanguageModel(model, alpha, beta, unk_offset, score_boundary))
