"""nnlm: neural probabilistic language models (Bengio et al. 2003) and their n-gram baselines.

The names below are imported on first use (nnlm.lazy), so that `nnlm --help` and small tools do
not pay for numpy and torch before they need them."""
from __future__ import annotations

from nnlm.compile_cache import ensure_writable_cache
from nnlm.lazy import lazy_getattr

ensure_writable_cache()  # before numba is imported: it reads NUMBA_CACHE_DIR then

_EXPORTS = {
    "Corpus": "nnlm.data.corpus", "load_corpus": "nnlm.data.corpus", "Vocabulary": "nnlm.data.vocab",
    "NnlmError": "nnlm.errors", "LanguageModel": "nnlm.lm", "perplexity": "nnlm.lm", "split_log_probs": "nnlm.lm",
    "load": "nnlm.loading", "generate": "nnlm.use", "next_words": "nnlm.use", "score_words": "nnlm.use",
    "text_perplexity": "nnlm.use", "score_sentence": "nnlm.sentence",
    "score_sentences": "nnlm.sentence",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"
__getattr__ = lazy_getattr("nnlm", _EXPORTS, globals())
