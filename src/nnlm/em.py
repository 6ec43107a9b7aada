"""EM for the weights of a mixture, per bucket of contexts: one routine that the model mixtures
(nnlm.mixture) and the deleted-interpolation trigram's own components (nnlm.ngram.interpolated)
both fit with, kept apart so that neither has to import the other."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class EMResult:
    weights: np.ndarray                 # [B, K]
    log_likelihood: list[float] = field(default_factory=list)  # mean log-likelihood before each step, and at the end


def fit_weights_em(component_log_probs: np.ndarray, buckets: np.ndarray | None = None,
                   n_buckets: int = 1, iterations: int = 20, tol: float | None = 1e-7,
                   initial: np.ndarray | None = None) -> EMResult:
    """EM for mixture weights per bucket, maximizing the mean log-likelihood of held-out data.

    component_log_probs: [K, N] natural-log probabilities of the held-out tokens under each
    component (computed once; EM only reweights them; -inf where a component is undefined, whose
    weight must then start at 0). The likelihood never decreases. Stops after `iterations`
    steps, or earlier once a step gains less than `tol` (None: never earlier). Buckets absent
    from the held-out data keep their initial weights (default: equal).
    """
    lp = np.asarray(component_log_probs, dtype=np.float64)
    k, n = lp.shape
    buckets = np.zeros(n, dtype=np.int64) if buckets is None else np.asarray(buckets, dtype=np.int64)
    weights = np.full((n_buckets, k), 1.0 / k) if initial is None else np.array(initial, dtype=np.float64)
    shift = lp.max(axis=0)
    p = np.exp(lp - shift)  # [K, N], scaled per token: the scale cancels in the posteriors
    size = np.bincount(buckets, minlength=n_buckets)
    seen = size > 0
    history: list[float] = []
    for step in range(iterations + 1):
        joint = weights[buckets].T * p          # [K, N]
        total = joint.sum(axis=0)
        history.append(float(np.mean(np.log(total) + shift)))
        if step == iterations or (tol is not None and step > 0 and history[-1] - history[-2] < tol):
            break
        posterior = joint / total               # responsibilities [K, N]
        mass = np.stack([np.bincount(buckets, weights=posterior[j], minlength=n_buckets) for j in range(k)], axis=1)
        weights[seen] = mass[seen] / size[seen, None]
    return EMResult(weights, history)
