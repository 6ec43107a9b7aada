"""One batch of training: the example order of an epoch, a batch's rows, its loss and its update.

Examples are all positions of the training split; the context of position t is the n-1 tokens
before it (padded at the very start, exactly as `nnlm.lm.contexts` does). Each epoch visits them
in the order of a permutation drawn from numpy's generator seeded with (seed, epoch), so the data
position of a run is just (epoch, batch index): nothing about it needs saving but those numbers.
These are the functions every trainer (and the benchmarks) run, so they time what `nnlm train` does.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nnlm.neural.net.model import NPLM
from nnlm.neural.net.softmax_loss import softmax_cross_entropy

EXPLODED = 3.0  # a batch loss above EXPLODED * log|V| (3x a uniform guess) means training diverged


def batch_loss(net: NPLM, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool) -> torch.Tensor:
    """Mean negative log-likelihood of a batch, as a float32 scalar.

    The output layer and its softmax run as one fused step (`softmax_loss`), in bf16 (everything else
    and all weights stay fp32: it saves the passes over [B, |V|] that autocast with an fp32 log-softmax,
    which it replaced, made) or in fp32 (the same function as autograd through `net` and
    F.cross_entropy, up to rounding, 1.16x its step for MLP1 with Adam on one thread).
    A class-factored output layer (nnlm.neural.net.class_output) has its own loss, always fp32, as has a tree
    one (nnlm.neural.net.tree_output)."""
    if net.config.output_classes:
        from nnlm.neural.net.class_output import class_output_loss

        return class_output_loss(net, contexts, targets)
    if net.config.output_tree:
        from nnlm.neural.net.tree_output import tree_output_loss

        return tree_output_loss(net, contexts, targets)
    if (net.W is None and net.H is None) or net.config.energy:  # (y = b: no product; energy: its own logits)
        return F.cross_entropy(net(contexts), targets)
    zs, ws = net.output_operands(contexts)
    return softmax_cross_entropy(zs, ws, net.b, targets, torch.bfloat16 if bf16 else torch.float32)


def padded_stream(ids: np.ndarray, k: int, pad_id: int, device: torch.device) -> torch.Tensor:
    """The training ids after k pads, on the device once: every batch is then one gather there."""
    return torch.cat([torch.full((k,), pad_id, dtype=torch.int64), torch.as_tensor(ids.astype(np.int64))]).to(device)


def epoch_order(seed: int, epoch: int, n_examples: int) -> torch.Tensor:
    """The order in which an epoch visits the examples: a permutation seeded with (seed, epoch)."""
    return torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n_examples))


def batch_rows(padded: torch.Tensor, order: torch.Tensor, b: int, batch: int, window: torch.Tensor) -> torch.Tensor:
    """Batch b of an epoch as rows [B, k+1] (context, then target): one gather from the padded
    stream (window = arange(k+1) on its device)."""
    return padded[order[b * batch:(b + 1) * batch, None] + window]


def epoch_batches(padded: torch.Tensor, k: int, batch: int, seed: int, epoch: int,
                  first: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(contexts [B, k], targets [B]) of an epoch from batch index `first` on, in the trainer's
    order; the last batch may be smaller."""
    n_examples = len(padded) - k
    order = epoch_order(seed, epoch, n_examples).to(padded.device)
    window = torch.arange(k + 1, device=padded.device)
    for b in range(first, math.ceil(n_examples / batch)):
        rows = batch_rows(padded, order, b, batch, window)
        yield rows[:, :k], rows[:, k]


def diverged(value: float, explode_at: float) -> str | None:
    """What is wrong with a batch's mean loss ("NaN", "infinite", "exploding (x)"), or None."""
    if math.isfinite(value) and value <= explode_at:
        return None
    return "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else f"exploding ({value:.1f})"


def update(net: nn.Module, optimizer: Any, loss: torch.Tensor, examples_seen: int, batch: int) -> None:
    """One step of the optimizer on the gradient of `loss`."""
    net.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step(examples_seen, batch)
