"""Training a recurrent net (nnlm.neural.net.recurrent) by truncated back-propagation through time.

The example-window batches of the feed-forward nets do not fit a net whose state carries the text: here
the training split is cut into R contiguous streams (R = ceil(--batch-size / (n-1)), so a batch still holds
about --batch-size predicted tokens) laid side by side, and batch b of an epoch is their window of n-1 steps
starting at b (n-1). The state after a window starts the next one, detached (the gradient flows back n-1
steps at most), and is zero at an epoch's start; before every start-of-text token it is zeroed, as scoring
does (nnlm.neural.lm.recurrent_lm). The gradient's norm is clipped to GRADIENT_CLIP (the LSTM reference's,
nnlm.reproduce.lstm_reference) before the recipe's step. Everything else -- recipes, schedules, early
stopping, the time budget, checkpoints, validation by nnlm.lm.perplexity -- is the one loop's
(nnlm.neural.run.train). The carried state is checkpointed with the optimizer's tensors ("carry.state"),
so `--resume` mid-epoch continues exactly.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from nnlm.neural.net.softmax_loss import softmax_cross_entropy
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.trainer import Trainer, TrainingSetup

GRADIENT_CLIP = 0.25  # the largest norm of a step's gradient (the reference LSTM's recipe)
CARRY = "carry.state"


class CarriedOptimizer:
    """The optimizer, and the trainer's carried state beside its tensors in a checkpoint."""

    def __init__(self, optimizer: Any, trainer: RecurrentTrainer) -> None:
        self.optimizer, self.trainer = optimizer, trainer

    def state_tensors(self) -> dict[str, torch.Tensor]:
        carry = self.trainer.carry
        return self.optimizer.state_tensors() | ({} if carry is None else {CARRY: carry})

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.optimizer.load_state_tensors({k: v for k, v in tensors.items() if k != CARRY})

    def __getattr__(self, name: str) -> Any:  # lr and the rest: the optimizer's own
        return getattr(self.optimizer, name)


def streams(ids: np.ndarray, pad_id: int, rows: int, device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """`ids` cut into `rows` contiguous streams side by side: (inputs [R, L] (each target's previous word, the
    pad before the first), targets [R, L], resets [R, L] (an input that starts a text: the state is zeroed
    before it)). The last len % rows tokens are left out."""
    length = len(ids) // rows
    ids = ids[:rows * length].astype(np.int64)
    before = np.concatenate([[pad_id], ids[:-1]]).reshape(rows, length)
    return (torch.as_tensor(before, device=device), torch.as_tensor(ids.reshape(rows, length), device=device),
            before == pad_id)


def window_loss(net: nn.Module, loss_fn: Any, loss: str, inputs: torch.Tensor, targets: torch.Tensor,
                resets: np.ndarray, carry: torch.Tensor | None, bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the mean loss of a window of the streams, the state after it) read from `carry`: the full softmax's
    cross-entropy, or the sampled / nce loss at its sampled rows (nnlm.neural.net.sampled)."""
    a, x, after = net.read(inputs, resets, carry)
    zs = [z.reshape(-1, z.shape[-1]) for z in net.output_operands(a, x)]
    targets = targets.reshape(-1)
    if loss != "full":
        return loss_fn.output_loss(zs, net.output_weights(), net.b, targets), after
    return softmax_cross_entropy(zs, net.output_weights(), net.b, targets,
                                 torch.bfloat16 if bf16 else torch.float32), after


def clipped_update(net: nn.Module, optimizer: Any, loss: torch.Tensor, examples_seen: int, examples: int) -> None:
    """The recipe's step on the gradient of `loss`, its norm clipped to GRADIENT_CLIP first."""
    net.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(net.parameters(), GRADIENT_CLIP)
    optimizer.step(examples_seen, examples)


class RecurrentTrainer(Trainer):
    """The single process, with windows of contiguous streams as its batches (module docstring)."""

    def __init__(self, setup: TrainingSetup) -> None:
        super().__init__(setup)
        corpus, steps = setup.corpus, self.k
        self.rows = max(1, math.ceil(self.run.batch_size / steps))
        self.inputs, self.targets, self.resets = streams(corpus.train, corpus.pad_id, self.rows, self.device)
        length = self.inputs.shape[1]
        self.n_examples, self.batch = self.rows * length, self.rows * steps
        self.n_batches = math.ceil(length / steps)
        self.carry: torch.Tensor | None = None
        if setup.resume and setup.state.get("tensors") and setup.state["batch"] > 0:
            tensors, _ = ck.load_tensors(setup.out / setup.state["tensors"])
            if CARRY in tensors:
                self.carry = tensors[CARRY].to(self.device)

    def describe(self) -> str:
        return (f"truncated BPTT over {self.k} steps, {self.rows} streams of {self.inputs.shape[1]:,} tokens, "
                + super().describe())

    def whole(self) -> tuple[nn.Module, Any]:
        return self.net, CarriedOptimizer(self.optimizer, self)

    def batch_at(self, order: torch.Tensor, b: int) -> slice:
        """Window b of the streams (the epoch's order of examples does not apply: the windows run in order)."""
        if b == 0:
            self.carry = None  # each epoch reads its streams from the zero state
        return slice(b * self.k, (b + 1) * self.k)

    def examples_in(self, window: slice) -> int:
        return self.rows * len(range(*window.indices(self.inputs.shape[1])))

    def batch_loss(self, window: slice, step: int) -> tuple[torch.Tensor, float]:
        loss, after = window_loss(self.net, self.loss_fn, self.run.loss, self.inputs[:, window],
                                  self.targets[:, window], self.resets[:, window], self.carry, self.run.bf16)
        self.carry = after.detach()
        return loss, float(loss.detach()) * self.examples_in(window)

    def update(self, loss: torch.Tensor, examples_seen: int, examples: int) -> None:
        clipped_update(self.net, self.optimizer, loss, examples_seen, examples)
