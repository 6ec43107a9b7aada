"""nnlm: neural probabilistic language models (Bengio et al. 2003) and their n-gram baselines."""
from nnlm.data import Corpus, Vocabulary, load_corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel, perplexity, split_log_probs
from nnlm.loading import load

__all__ = ["Corpus", "LanguageModel", "NnlmError", "Vocabulary", "load", "load_corpus", "perplexity", "split_log_probs"]
__version__ = "0.1.0"
