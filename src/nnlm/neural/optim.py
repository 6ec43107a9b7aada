"""The two update rules, written out (a few lines each) so their state is plain named tensors.

Both keep the paper's split: weight decay applies to the weights and C (`NPLM.decayed_parameters`),
never to the biases b and d. `state_tensors` / `load_state_tensors` are what a checkpoint saves.
"""
from __future__ import annotations

import math

import torch

from nnlm.errors import NnlmError
from nnlm.neural.model import NPLM


class PaperSGD:
    """Gradient ascent on log-likelihood, eps_t = eps_0 / (1 + r t), t = examples seen.

    A batch of B examples makes the B online updates of the paper at once, all gradients taken at
    the batch-start parameters: step eps_t x (sum of the B gradients), decay (1 - eps_t lambda)^B.
    The loss handed to backward() is the batch *mean*, hence the factor B below."""

    def __init__(self, net: NPLM, lr: float, lr_decay: float, weight_decay: float) -> None:
        self.net, self.lr, self.lr_decay, self.weight_decay = net, lr, lr_decay, weight_decay

    @torch.no_grad()
    def step(self, examples_seen: int, batch: int) -> None:
        eps = self.lr / (1.0 + self.lr_decay * examples_seen)
        shrink = (1.0 - eps * self.weight_decay) ** batch
        for p in self.net.decayed_parameters():
            p.mul_(shrink).add_(p.grad, alpha=-eps * batch)
        for p in self.net.bias_parameters():
            p.add_(p.grad, alpha=-eps * batch)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {}  # stateless: eps_t is a function of the examples seen, which state.json holds

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        pass


class Adam:
    """Adam (Kingma & Ba) with decoupled weight decay on the weights and C only."""

    def __init__(self, net: NPLM, lr: float, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.net, self.lr, self.weight_decay, self.betas, self.eps = net, lr, weight_decay, betas, eps
        self.params = dict(net.named_parameters())
        self.decayed = {id(p) for p in net.decayed_parameters()}
        self.m = {k: torch.zeros_like(p) for k, p in self.params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in self.params.items()}
        self.t = 0

    @torch.no_grad()
    def step(self, examples_seen: int, batch: int) -> None:
        self.t += 1
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1 ** self.t)
        root_correction = math.sqrt(1 - b2 ** self.t)
        for name, p in self.params.items():
            m, v = self.m[name], self.v[name]
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            if self.weight_decay and id(p) in self.decayed:
                p.mul_(1 - self.lr * self.weight_decay)
            p.addcdiv_(m, v.sqrt().div_(root_correction).add_(self.eps), value=-step_size)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {f"optim.m.{k}": t for k, t in self.m.items()} | {f"optim.v.{k}": t for k, t in self.v.items()}
        return out | {"optim.t": torch.tensor(self.t, dtype=torch.int64)}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        expected = set(self.state_tensors())
        if set(tensors) != expected:
            raise NnlmError(f"the checkpoint's optimizer state has {sorted(tensors)}, Adam needs {sorted(expected)}")
        for k in self.params:
            for store, kind in ((self.m, "m"), (self.v, "v")):
                saved = tensors[f"optim.{kind}.{k}"]
                if saved.shape != store[k].shape:
                    raise NnlmError(f"the checkpoint's optimizer state for {k} has shape {list(saved.shape)}, "
                                    f"the model needs {list(store[k].shape)}")
                store[k].copy_(saved)
        self.t = int(tensors["optim.t"])
