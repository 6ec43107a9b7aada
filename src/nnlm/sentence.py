"""One text's log-probability in one call, like KenLM's `model.score(sentence)`: what a decoder or an
application asks per hypothesis, so its fixed cost per call is kept to a few microseconds.

The text is cut by THE tokenization rule (nnlm.data.tokenize.text_tokens: each non-blank line's words,
then `<p>`), and scored from the start of a text, as `nnlm score` scores a file: the start token fills
the first context (KenLM's bos) and every paragraph's closing `<p>` is predicted and counted (its eos).
Words outside the vocabulary are `<unk>`. So `score_sentence(model, text)` equals the sum of
`nnlm.use.score_words(model, text)`, in log10 (KenLM's unit) or in natural log.

The count-based models answer in one compiled call (their query engines: nnlm.ngram.query_engine,
nnlm.ngram.interpolated_engine); any other model is scored through `log_prob` on the stream.
"""
from __future__ import annotations

from itertools import chain, repeat

import numpy as np

from nnlm.data.tokenize import text_tokens
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, stream_log_probs

__all__ = ["score_sentence", "score_sentences"]


def _lexicon(model: LanguageModel):
    """nnlm.ngram.ascii_tokens.lexicon(model); the module (numba) is imported at the first call, not with nnlm."""
    kept = model.__dict__.get("_ascii_lexicon")
    if kept is None:
        from nnlm.ngram.ascii_tokens import lexicon

        kept = lexicon(model)
    return kept


def sentence_ids(model: LanguageModel, sentence: str, unknown: int | None = None) -> np.ndarray:
    """The token ids (int64) of `sentence` by the tokenization rule, `<unk>` (or `unknown`) for words outside V
    (ASCII text in one compiled pass, nnlm.ngram.ascii_tokens; other text by text_tokens and the vocabulary's dict)."""
    if sentence.isascii():
        return _lexicon(model).encode_one(sentence, unknown)
    tokens = text_tokens(sentence)
    default = model.vocab.unk_id if unknown is None else unknown
    return np.fromiter(map(model.vocab._index.get, tokens, repeat(default)), dtype=np.int64, count=len(tokens))


def batch_ids(model: LanguageModel, sentences: list[str], unknown: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, bounds): the token ids of every sentence, sentence i's at ids[bounds[i]:bounds[i+1]]; a word
    outside the vocabulary gets `<unk>`'s id, or `unknown` if given (to count OOV words apart from "<unk>")."""
    if all(map(str.isascii, sentences)):
        return _lexicon(model).encode(sentences, unknown)
    tokens = list(map(text_tokens, sentences))
    bounds = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(list(map(len, tokens)), out=bounds[1:])
    default = model.vocab.unk_id if unknown is None else unknown
    ids = np.fromiter(map(model.vocab._index.get, chain.from_iterable(tokens), repeat(default)),
                      dtype=np.int64, count=int(bounds[-1]))
    return ids, bounds


def score_sentence(model: LanguageModel, sentence: str, log10: bool = True) -> float:
    """log10 P(sentence) (natural log with `log10=False`), scored from the start of a text with every
    paragraph's `<p>` counted; 0.0 for a text with no words."""
    if not isinstance(sentence, str):
        raise NnlmError(f"score_sentence takes a text (str), not {type(sentence).__name__}")
    ids = sentence_ids(model, sentence)
    if len(ids) == 0:
        return 0.0
    fast = getattr(model, "text_log10", None)
    total = fast(ids) if fast is not None else None
    if total is None:
        total = float(stream_log_probs(model, ids).sum()) * LOG10_E
    return float(total) if log10 else float(total) / LOG10_E


def score_sentences(model: LanguageModel, sentences: list[str], log10: bool = True) -> np.ndarray:
    """`score_sentence` of each text, float64 [len(sentences)], with one compiled call for all of them on the
    count-based models (the batch form: the texts are cut and looked up in one pass)."""
    if isinstance(sentences, str) or not (set(map(type, sentences)) <= {str}
                                          or all(isinstance(s, str) for s in sentences)):
        raise NnlmError("score_sentences takes a list of texts (str)")
    fast = getattr(model, "texts_log10", None)
    totals = None
    if fast is not None and sentences:
        ids, bounds = batch_ids(model, sentences)
        totals = fast(ids, bounds)
    if totals is None:
        totals = np.array([score_sentence(model, s) for s in sentences], dtype=np.float64)
    return totals if log10 else totals / LOG10_E
