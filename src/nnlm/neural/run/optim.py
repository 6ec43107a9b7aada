"""The two update rules: the paper's SGD written out, Adam from torch.optim; state as plain named tensors.

Both keep the paper's split: weight decay applies to the weights and C (`NPLM.decayed_parameters`),
never to the biases b and d. `state_tensors` / `load_state_tensors` are what a checkpoint saves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.optim.adamw import adamw

from nnlm.errors import NnlmError
from nnlm.neural.net.model import NPLM

if TYPE_CHECKING:  # (types only: a run without classes or the kept layer imports neither)
    from nnlm.neural.net.feature_init import ClassPull
    from nnlm.neural.net.kept_output import KeptOutput


class PaperSGD:
    """Gradient ascent on log-likelihood, eps_t = eps_0 / (1 + r t), t = examples seen.

    A batch of B examples makes the B online updates of the paper at once, all gradients taken at
    the batch-start parameters: step eps_t x (sum of the B gradients), decay (1 - eps_t lambda)^B.
    The loss handed to backward() is the batch *mean*, hence the factor B below."""

    def __init__(self, net: NPLM, lr: float, lr_decay: float, weight_decay: float,
                 kept: KeptOutput | None = None) -> None:
        self.net, self.lr, self.lr_decay, self.weight_decay = net, lr, lr_decay, weight_decay
        self.kept = kept  # the output weights and their copy updated in one pass (nnlm.neural.net.kept_output)
        self.class_pull: ClassPull | None = None
        self.pulled: list[torch.Tensor] = []

    def pull_towards(self, class_pull: ClassPull, rows: list[torch.Tensor]) -> None:
        """Add `class_pull`'s gradient of each of `rows` (C, U, W) to every update, taken at the weights the
        batch's loss saw: for a kept output layer, whose W and U gradients never reach the parameters (and
        whose C gradient is sparse, which a gradient hook may not make dense), in place of the hooks of
        `feature_init.add_class_pull`; W's and U's go into the kept layer's own update."""
        self.class_pull, self.pulled = class_pull, list(rows)
        if self.kept is not None:
            self.kept.pull_towards(class_pull, self.pulled)

    @torch.no_grad()
    def step(self, examples_seen: int, batch: int) -> None:
        eps = self.lr / (1.0 + self.lr_decay * examples_seen)
        shrink = (1.0 - eps * self.weight_decay) ** batch
        kept = self.kept
        for p in self.net.decayed_parameters():
            if kept is None or not kept.owns(p):
                late = None
                if any(p is r for r in self.pulled):  # (C, beside its sparse gradient: the pull moves it first)
                    late = self.class_pull.fold_into_update(p, shrink, -eps * batch)
                p.mul_(shrink).add_(p.grad, alpha=-eps * batch)
                if late is not None:
                    p.add_(late, alpha=-eps * batch)
        for p in self.net.bias_parameters():
            if kept is None or not kept.owns(p):
                p.add_(p.grad, alpha=-eps * batch)
        if kept is not None:
            kept.step(shrink, -eps * batch)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {}  # stateless: eps_t is a function of the examples seen, which state.json holds

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        pass


class Adam:
    """AdamW's fused kernel (torch.optim.adamw.adamw, fused=True) with decoupled weight decay on the weights and
    C only.

    Measured at MLP1's shape (6M parameters, one thread): 6.8 ms per step fused, against 18 ms for
    the hand-written foreach-style loop it replaced and 20 ms for foreach=True. The update is the
    same as that loop's: m, v moments with bias correction, p <- p (1 - lr wd) - lr m_hat /
    (sqrt(v_hat) + eps). Its state is exposed as named tensors (m, v by parameter name, and the
    step count t) so checkpoints hold plain tensors and Hogwild workers can swap in shared ones.
    The functional form, not the torch.optim.AdamW class: the class's constructor imports torch._dynamo,
    2.2 s of every training process's start on an idle AVX2 core, for the same kernel and the same bits."""

    def __init__(self, net: NPLM, lr: float, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.net = net
        self.params = dict(net.named_parameters())
        decayed = {id(p) for p in net.decayed_parameters()}
        self.groups = [(names, decay) for names, decay in (
            ([n for n, p in self.params.items() if id(p) in decayed], weight_decay),
            ([n for n, p in self.params.items() if id(p) not in decayed], 0.0)) if names]
        self.lr, self.betas, self.eps = lr, betas, eps
        # the state exists from the start, so a checkpoint at step 0 has it
        self.state = {name: {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                             "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                      for name, p in self.params.items()}

    @torch.no_grad()
    def step(self, examples_seen: int, batch: int) -> None:
        for names, decay in self.groups:
            live = [n for n in names if self.params[n].grad is not None]
            if not live:
                continue
            adamw([self.params[n] for n in live], [self.params[n].grad for n in live],
                  [self.state[n]["exp_avg"] for n in live], [self.state[n]["exp_avg_sq"] for n in live], [],
                  [self.state[n]["step"] for n in live], foreach=False, capturable=False, differentiable=False,
                  fused=True, grad_scale=None, found_inf=None, has_complex=False, amsgrad=False,
                  beta1=self.betas[0], beta2=self.betas[1], lr=self.lr, weight_decay=decay, eps=self.eps,
                  maximize=False)

    def _moments(self, key: str) -> dict[str, torch.Tensor]:
        return {name: self.state[name][key] for name in self.params}

    def _set_moments(self, key: str, tensors: dict[str, torch.Tensor]) -> None:
        for name in self.params:
            self.state[name][key] = tensors[name]

    m = property(lambda self: self._moments("exp_avg"), lambda self, t: self._set_moments("exp_avg", t),
                 doc="first moments by parameter name (the live tensors)")
    v = property(lambda self: self._moments("exp_avg_sq"), lambda self, t: self._set_moments("exp_avg_sq", t),
                 doc="second moments by parameter name (the live tensors)")

    @property
    def t(self) -> int:
        """Steps taken (every parameter has a gradient at every step, so they share one count)."""
        return int(next(iter(self.state.values()))["step"])

    @t.setter
    def t(self, value: int) -> None:
        for state in self.state.values():
            state["step"].fill_(value)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return adam_state_tensors(self.m, self.v, self.t)

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.t = load_adam_state(self.m, self.v, tensors)


def adam_state_tensors(m: dict[str, torch.Tensor], v: dict[str, torch.Tensor], t: int) -> dict[str, torch.Tensor]:
    """An Adam-type optimizer's checkpoint tensors: moments by parameter name, and the step count."""
    out = {f"optim.m.{k}": x for k, x in m.items()} | {f"optim.v.{k}": x for k, x in v.items()}
    return out | {"optim.t": torch.tensor(t, dtype=torch.int64)}


def load_adam_state(m: dict[str, torch.Tensor], v: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor]) -> int:
    """Copy checkpoint tensors into the live moments m, v (names and shapes checked); returns the step count."""
    expected = set(adam_state_tensors(m, v, 0))
    if set(tensors) != expected:
        raise NnlmError(f"the checkpoint's optimizer state has {sorted(tensors)}, Adam needs {sorted(expected)}")
    for store, kind in ((m, "m"), (v, "v")):
        for k, live in store.items():
            saved = tensors[f"optim.{kind}.{k}"]
            if saved.shape != live.shape:
                raise NnlmError(f"the checkpoint's optimizer state for {k} has shape {list(saved.shape)}, "
                                f"the model needs {list(live.shape)}")
            live.copy_(saved)
    return int(tensors["optim.t"])
