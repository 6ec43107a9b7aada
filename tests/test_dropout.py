"""The compiled dropout mask (nnlm.neural.net.dropout): its rate, its scale, its gradient, its seed."""
from __future__ import annotations

import pytest
import torch

from nnlm.neural.net import dropout as module
from nnlm.neural.net.dropout import dropout


@pytest.mark.parametrize("p", [0.05, 0.25, 0.5])
def test_cells_are_dropped_at_rate_p_and_the_kept_ones_scaled_by_1_over_1_minus_p(p):
    torch.manual_seed(0)
    x = torch.rand(400_000) + 0.5
    y = dropout(x, p)
    dropped = (y == 0).double().mean().item()
    assert abs(dropped - p) < 5 * (p * (1 - p) / len(x)) ** 0.5
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    assert abs(y.mean().item() - x.mean().item()) < 0.01  # unbiased: E[y] = x


def test_the_gradient_is_the_mask_and_the_seed_comes_from_torch():
    x = torch.randn(64, 30, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.3)
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach() / x.detach())
    torch.manual_seed(3)
    torch.testing.assert_close(dropout(x, 0.3), y)  # torch.manual_seed fixes the mask
    assert not torch.equal(dropout(x, 0.3), y)  # and each call draws a new one


def test_p_zero_keeps_everything_and_the_torch_path_stays_reachable(monkeypatch):
    x = torch.randn(10, 10)
    torch.testing.assert_close(dropout(x, 0.0), x)
    monkeypatch.setattr(module, "COMPILED", False)
    torch.manual_seed(0)
    expected = torch.nn.functional.dropout(x, 0.2, training=True)
    torch.manual_seed(0)
    torch.testing.assert_close(dropout(x, 0.2), expected)
