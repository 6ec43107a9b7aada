"""The older words' sum weighted per feature (`--sum-weights feature`), gathered and summed in one compiled pass.

    older[n] = sum_j A[j] * table[idx[n, j]]        (feature by feature; idx: the older words' rows of the table)

Why: with torch ops the sum first gathers the rows into an [N, n-1-k, m] tensor, multiplies it by A into a second
one and sums that; backward writes two more of that size and scatters one into the table's gradient. At a batch of
256 and n = 128 that is four passes over 13 MB a step, most of a Brown epoch (the profile of a tied n = 128 run:
61% of the step in backward, the context's gathers and sums the bulk of it). Here forward reads each row once from
the table (which stays in cache: a batch touches ~12k distinct rows of 100 features) and writes only [N, m];
backward adds A[j] * g[n] into the rows' gradient and g[n] * table[idx[n, j]] into A's, nothing [N, J, m] made.
One thread, in a fixed order: the same bits every run. Other devices and dtypes take the torch ops.
"""
from __future__ import annotations

import numba
import torch


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _forward(table, idx, weights, out):
    """out[n] = sum_j weights[j] * table[idx[n, j]] (out zeroed by the caller)."""
    for n in range(idx.shape[0]):
        acc = out[n]
        for j in range(idx.shape[1]):
            row, w = table[idx[n, j]], weights[j]
            for f in range(acc.shape[0]):
                acc[f] += w[f] * row[f]


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _backward(table, idx, weights, grad, grad_table, grad_weights):
    """grad_table[idx[n, j]] += weights[j] * grad[n]; grad_weights[j] += grad[n] * table[idx[n, j]] (both zeroed)."""
    for n in range(idx.shape[0]):
        g = grad[n]
        for j in range(idx.shape[1]):
            r = idx[n, j]
            row, w, gt, gw = table[r], weights[j], grad_table[r], grad_weights[j]
            for f in range(g.shape[0]):
                gt[f] += w[f] * g[f]
                gw[f] += g[f] * row[f]


def _compiled(table: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor) -> bool:
    return (table.device.type == "cpu" and table.dtype in (torch.float32, torch.float64)
            and weights.dtype == table.dtype and idx.dtype == torch.int64)


class _OlderSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        table, idx, weights = table.contiguous(), idx.contiguous(), weights.contiguous()
        out = torch.zeros(idx.shape[0], table.shape[1], dtype=table.dtype)
        _forward(table.numpy(), idx.numpy(), weights.numpy(), out.numpy())
        ctx.save_for_backward(table, idx, weights)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        table, idx, weights = ctx.saved_tensors
        grad_table, grad_weights = torch.zeros_like(table), torch.zeros_like(weights)
        _backward(table.numpy(), idx.numpy(), weights.numpy(), grad.contiguous().to(table.dtype).numpy(),
                  grad_table.numpy(), grad_weights.numpy())
        return grad_table, None, grad_weights


def older_sum(table: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_j weights[j] * table[idx[:, j]], [N, m], from table [R, m], idx [N, J] (row ids), weights [J, m]."""
    if _compiled(table, idx, weights):
        return _OlderSum.apply(table, idx, weights)
    return (table[idx] * weights).sum(1)
