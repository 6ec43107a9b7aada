"""The compiled per-feature sum of the older words (nnlm.neural.net.older_sum) against its torch formula."""
from __future__ import annotations

import pytest
import torch

from nnlm.neural.net import older_sum as module
from nnlm.neural.net.older_sum import older_sum


def operands(dtype, rows: int = 30, n: int = 11, j: int = 7, m: int = 5, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(rows, m, dtype=dtype, generator=gen).requires_grad_()
    weights = torch.randn(j, m, dtype=dtype, generator=gen).requires_grad_()
    idx = torch.randint(0, rows, (n, j), generator=gen)
    idx[0] = 3  # one row read at every position of a context: its gradient sums them all
    return table, idx, weights


def test_the_sum_and_its_gradients_are_the_torch_formulas():
    table, idx, weights = operands(torch.float64)
    got = older_sum(table, idx, weights)
    grad = torch.randn_like(got)
    got.backward(grad)
    compiled = (table.grad.clone(), weights.grad.clone())
    table.grad = weights.grad = None
    want = (table[idx] * weights).sum(1)
    want.backward(grad)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compiled, (table.grad, weights.grad), rtol=1e-12, atol=1e-12)


def test_gradients_match_finite_differences():
    table, idx, weights = operands(torch.float64, seed=1)
    assert torch.autograd.gradcheck(lambda t, w: older_sum(t, idx, w), (table, weights))


@pytest.mark.parametrize("compiled", [True, False])
def test_float32_and_views_take_either_path_alike(monkeypatch, compiled):
    monkeypatch.setattr(module, "_compiled", lambda *_: compiled)
    table, idx, weights = operands(torch.float32, m=8)
    wide = torch.cat([idx, idx], 1)[:, ::2]  # a view that is not contiguous
    torch.testing.assert_close(older_sum(table, wide, weights), (table[wide] * weights).sum(1), rtol=1e-5, atol=1e-5)
