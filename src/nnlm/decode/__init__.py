"""CTC beam search with an nnlm model as the word language model (shallow fusion).

A recognizer's frame posteriors [T, C] over a character alphabet, a labels file naming the columns,
and any nnlm LanguageModel: `CTCWordDecoder` searches the label sequences, adding alpha * ln P(word) +
beta at each word end, with all hypotheses' words of a frame scored in one `model.advance` call.
`nnlm.decode.pyctc` adapts a model to pyctcdecode's language-model interface instead (optional extra)."""
from __future__ import annotations

from nnlm.decode.alphabet import Alphabet, read_labels
from nnlm.decode.beam import CTCWordDecoder, DecodeOptions
from nnlm.decode.logits import read_logits
from nnlm.decode.wer import corpus_wer

__all__ = ["Alphabet", "CTCWordDecoder", "DecodeOptions", "corpus_wer", "read_labels", "read_logits"]
