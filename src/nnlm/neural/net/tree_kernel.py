"""The tree output layer's decision scores for exact scoring (no gradient) as one compiled loop.

Why: with torch ops each decision's score y = b_r + W_r . x + U_r . a gathers its rows into a
[decisions, K] copy, gathers the token's x and a into another, multiplies them into a third and sums
it: about five passes over [decisions, K] floats per operand, where this loop reads each row once
and the token's operands from cache. Used by `TreeNPLM.target_log_probs_from_features` when nothing
needs a gradient, on the CPU; training keeps the torch ops (autograd).
"""
from __future__ import annotations

import numba
import numpy as np
import torch


@numba.njit(cache=True, nogil=True, fastmath=True)
def _add_dots(out, weight, rows, z, token):
    """out[p, j] += weight[rows[p, j]] . z[token[p]] for every decision p and row j. The inner loop over a
    row's contiguous cells is vectorized only with fastmath (a reassociated sum)."""
    for p in range(rows.shape[0]):
        zt = z[token[p]]
        for j in range(rows.shape[1]):
            wr = weight[rows[p, j]]
            acc = out.dtype.type(0.0)
            for k in range(len(zt)):
                acc += wr[k] * zt[k]
            out[p, j] += acc


def applies(tensors: list[torch.Tensor]) -> bool:
    """Whether the compiled loop can take these: CPU tensors of one float dtype that need no gradient."""
    first = tensors[0]
    return (not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors)) and all(
        t.device.type == "cpu" and t.dtype == first.dtype and t.dtype in (torch.float32, torch.float64)
        for t in tensors)


def decision_scores(b: torch.Tensor, weights: list[torch.Tensor], zs: list[torch.Tensor], rows: torch.Tensor,
                    token: torch.Tensor) -> torch.Tensor:
    """y [P, B-1] = b[rows] + sum_j weights[j][rows] . zs[j][token], compiled."""
    out = b[rows].contiguous()
    rows_np, token_np = rows.numpy(), token.numpy()
    for w, z in zip(weights, zs, strict=True):
        _add_dots(out.numpy(), np.ascontiguousarray(w.detach().numpy()), rows_np,
                  np.ascontiguousarray(z.detach().numpy()), token_np)
    return out
