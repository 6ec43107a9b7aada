"""Word classes: groups of words that behave alike, found from the training text, below both model families.

The class-based n-gram (nnlm.ngram.class_based), the class-factored output layer (nnlm.neural.net.class_output)
and the class-tied feature rows (nnlm.neural.net.feature_init) all start from the same classes, so the algorithms
that find them live here, importing neither family: the exchange algorithm over class bigrams
(`exchange`, its compiled moves in `exchange_kernels`) and its refinement by the class trigram (`trigram`).
Nothing is imported with the package: `from nnlm.wordclasses.exchange import exchange_clusters`.
"""
