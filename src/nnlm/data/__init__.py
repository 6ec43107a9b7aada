"""Vocabularies and corpora: text -> integer id arrays."""
from nnlm.data.corpus import Corpus, load_corpus
from nnlm.data.vocab import Vocabulary

__all__ = ["Corpus", "Vocabulary", "load_corpus"]
