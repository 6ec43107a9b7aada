"""Mixtures of language models: P(w | h) = sum_k lambda_k(h) P_k(w | h).

The weights are a table [buckets, components]; a `bucketer` maps each context to a bucket
(one bucket = global weights, as the paper's fixed 0.5/0.5 or one EM weight per component;
context-frequency buckets = the paper's "weights conditional on the frequency of the context").
EM fits the table on the components' probabilities of a held-out split, computed once.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np

from nnlm.em import EMResult, fit_weights_em
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, LMState, chunked_log_probs, perplexity_from_log_probs, stream_contexts

# EM runs until a step gains less than MIX_EM_TOL nats a token: 20 fixed steps left a mix of 16 parts
# 0.3% short of its optimum on Brown (valid 217.7 against 217.0); Table 1's 2-part mixes move < 0.01%.
MIX_EM_ITERATIONS = 300
MIX_EM_TOL = 1e-6

__all__ = ["EMResult", "FittedMixture", "Mixture", "fit_weights_em", "mix_on_corpus", "mix_scored"]

Bucketer = Callable[[np.ndarray], np.ndarray]  # contexts [N, k] -> bucket ids [N] in 0..B-1


def one_bucket(contexts: np.ndarray) -> np.ndarray:
    return np.zeros(len(contexts), dtype=np.int64)


class Mixture(LanguageModel):
    """A LanguageModel that averages others (same vocabulary) with per-bucket weights."""

    kind = "mixture"

    def __init__(self, components: Sequence[LanguageModel], weights: np.ndarray | Sequence[float],
                 bucketer: Bucketer | None = None, bucketer_order: int = 1) -> None:
        if len(components) < 1:
            raise NnlmError("a mixture needs at least one component")
        vocab = components[0].vocab
        for c in components[1:]:
            if c.vocab.fingerprint != vocab.fingerprint:
                raise NnlmError("mixture components must share one vocabulary "
                                f"({len(vocab)} vs {len(c.vocab)} words)")
        weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        if weights.shape[1] != len(components):
            raise NnlmError(f"{weights.shape[1]} weights for {len(components)} components")
        if (weights < 0).any() or not np.allclose(weights.sum(axis=1), 1.0, atol=1e-6):
            raise NnlmError("mixture weights must be non-negative and sum to 1")
        self.components = list(components)
        self.weights = weights
        self.vocab = vocab
        self.bucketer = bucketer or one_bucket
        self.order = max([c.order for c in components] + [bucketer_order])

    def parameter_count(self) -> int:
        return sum(c.parameter_count() for c in self.components) + self.weights.size

    def _buckets(self, contexts: np.ndarray) -> np.ndarray:
        return self.bucketer(contexts)

    def _own_context(self, model: LanguageModel, contexts: np.ndarray) -> np.ndarray:
        return contexts[:, contexts.shape[1] - model.context_size:]

    def component_log_probs(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log P_k of each target under each component: float64 [K, N]."""
        return np.stack([m.log_prob(self._own_context(m, contexts), targets) for m in self.components])

    @contextmanager
    def long_pass(self, tokens: int) -> Iterator[None]:
        with ExitStack() as stack:
            for model in self.components:
                stack.enter_context(model.long_pass(tokens))
            yield

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return self.combine(self.component_log_probs(contexts, targets), self._buckets(contexts))

    def stream_log_prob(self, stream: np.ndarray, first: int, count: int, pad_id: int,
                        since_start: np.ndarray | None = None) -> np.ndarray:
        """ln P of stream[first:first + count] (nnlm.capabilities.ScoresStreams): each component's own stream
        scores (nnlm.lm.chunked_log_probs: a recurrent net reads each token's whole text before it, a count
        model its query engine, the others their context rows), mixed with the weights of each position's
        bucket. Context rows alone would show a recurrent component only its n-1 words, so a saved mixture
        would not give the numbers `nnlm mix` fitted its weights on."""
        parts = np.stack([chunked_log_probs(m, stream, first, count, pad_id, since_start, chunk=max(count, 1))
                          for m in self.components])
        ctx = stream_contexts(stream, np.arange(first, first + count), self.context_size, pad_id, since_start)
        return self.combine(parts, self._buckets(ctx))

    def combine(self, component_log_probs: np.ndarray, buckets: np.ndarray) -> np.ndarray:
        """log sum_k w_k[bucket] P_k from the components' log-probs [K, N]: reuse them across weightings."""
        log_w = np.log(np.maximum(self.weights[buckets].T, 1e-300))
        return np.logaddexp.reduce(component_log_probs + log_w, axis=0)

    # --- the stateful API: each component's own state nested in the mixture's (its `extra`) ---

    def _component_keys(self) -> list[str]:
        return [f"component{k}" for k in range(len(self.components))]

    def begin_state(self, batch: int = 1, history: Sequence[int] | np.ndarray | None = None) -> LMState:
        """The mixture's context (for the buckets) and every component's own state after `history`."""
        state = super().begin_state(batch, history)
        state.extra = {key: model.begin_state(batch, history)
                       for key, model in zip(self._component_keys(), self.components, strict=True)}
        return state

    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        """Each component steps its own state (its fast path); the log-probs are mixed with the weights of
        the bucket of the mixture's context, as `log_prob` mixes them."""
        words = self.check_step(state, words)
        keys = self._component_keys()
        if set(state.extra) != set(keys):
            raise NnlmError("this state was not made by this model (use model.begin_state())")
        stepped = [model.advance(state.extra[key], words) for key, model in zip(keys, self.components, strict=True)]
        log_probs = self.combine(np.stack([lp for lp, _ in stepped]), self._buckets(state.context))
        after = self.shift_state(state, words)
        after.extra = {key: inner for key, (_, inner) in zip(keys, stepped, strict=True)}
        return (log_probs * LOG10_E if log10 else log_probs), after

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        w = self.weights[self._buckets(contexts)]
        out = np.zeros((len(contexts), len(self.vocab)), dtype=np.float64)
        for k, m in enumerate(self.components):
            out += w[:, k:k + 1] * m.distribution(self._own_context(m, contexts))
        return out


MIX_MODES = ("fixed", "em", "em-buckets")


@dataclass
class FittedMixture:
    model: Mixture
    em: EMResult | None
    split_log_probs: dict[str, np.ndarray]   # the mixture's log P of every token, per split

    @property
    def perplexity(self) -> dict[str, float]:
        """The mixture's perplexity on each mixed split."""
        return {s: perplexity_from_log_probs(lp) for s, lp in self.split_log_probs.items()}


def mix_on_corpus(components: Sequence[LanguageModel], corpus, mode: str,
                  fixed_weights: Sequence[float] | None = None, splits: Sequence[str] = ("valid", "test"),
                  fit_split: str = "valid", iterations: int = MIX_EM_ITERATIONS) -> FittedMixture:
    """Mix `components`, fitting weights on `fit_split` (EM modes); each component scores each split once."""
    from nnlm.lm import split_log_probs

    needed = list(dict.fromkeys([fit_split, *splits])) if mode != "fixed" else list(splits)
    scored = {s: [split_log_probs(m, corpus, s) for m in components] for s in needed}
    return mix_scored(components, corpus, scored, mode, fixed_weights, splits, fit_split, iterations)


def mix_scored(components: Sequence[LanguageModel], corpus, scored: dict[str, Sequence[np.ndarray]], mode: str,
               fixed_weights: Sequence[float] | None = None, splits: Sequence[str] = ("valid", "test"),
               fit_split: str = "valid", iterations: int = MIX_EM_ITERATIONS) -> FittedMixture:
    """Like `mix_on_corpus`, from the components' split log-probs already computed (split -> one array each)."""
    from nnlm.lm import contexts
    from nnlm.ngram.interpolated import InterpolatedTrigram

    if mode not in MIX_MODES:
        raise NnlmError(f"unknown mixing mode {mode!r}; choose from {', '.join(MIX_MODES)}")
    lps = {s: np.stack(list(arrays)) for s, arrays in scored.items()}
    bucketer, n_buckets, order = None, 1, 1
    if mode == "em-buckets":
        trigram = InterpolatedTrigram.fit(corpus.vocab, corpus.train)  # its buckets, not its weights
        bucketer = trigram.bucketer()  # (a ContextBuckets: what a saved mixture keeps, nnlm.mixture_store)
        n_buckets, order = bucketer.n_buckets, bucketer.order
    stream = corpus.stream()

    def buckets_of(split: str) -> np.ndarray:
        if bucketer is None:
            return np.zeros(len(corpus.split(split)), dtype=np.int64)
        start = corpus.split_offset(split)
        positions = np.arange(start, start + len(corpus.split(split)))
        return bucketer(contexts(stream, positions, 2, corpus.pad_id))

    em = None
    if mode == "fixed":
        if fixed_weights is None:
            raise NnlmError("fixed mixing needs weights")
        weights = np.asarray(fixed_weights, dtype=np.float64)
    else:
        em = fit_weights_em(lps[fit_split], buckets_of(fit_split), n_buckets, iterations, tol=MIX_EM_TOL)
        weights = em.weights
    model = Mixture(components, weights, bucketer, order)
    return FittedMixture(model, em, {s: model.combine(lps[s], buckets_of(s)) for s in splits})
