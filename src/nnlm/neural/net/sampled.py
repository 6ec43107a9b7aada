"""Sampled output layers for training: the loss never computes the |V|-wide softmax.

Each batch draws one set S of K distinct words (shared by the batch) from a proposal q = unigram
counts of train (+1) raised to PROPOSAL_POWER and normalized. Only the rows of W, U, b for S and
the batch's targets, and the rows of C for the batch's context words, enter the forward and
backward pass: they are gathered as leaf tensors, the logits are [B, K] (+ one dot product per
target), and `RowAdam` updates just those rows (plus the small dense H, d and
the variants' deeper layers, gains and A).

Both losses correct a word's score y_w by the log of its inclusion probability p_w = P(w in S).
S is drawn without replacement (torch.multinomial), which gives S the law of "draw from q with
replacement until K distinct words"; for T such draws P(w in S) = 1 - (1 - q_w)^T, and T is fixed
once per run so that the p_w sum to K (exact for a uniform q; all 1 when K = |V|).

- `sampled` (importance sampling, Bengio & Senecal 2003/2008; Jean et al. 2015): cross-entropy
  over the target and the samples with scores y_w - log p_w, a sample equal to the row's target
  removed. With K = |V| this is exactly the full softmax cross-entropy.
  Self-normalization (Devlin et al. 2014): + alpha (log Z^)^2 per row, where
  Z^ = sum_{w in S} exp(y_w) / p_w is the Horvitz-Thompson estimate of Z = sum_w exp(y_w) (exact
  when K = |V|): it costs nothing beyond the logits already computed and touches no other rows.
- `nce` (Mnih & Teh 2012; Vaswani et al. 2013): logistic regression of data against noise with
  log Z fixed to 0, delta_w = y_w - log p_w:  softplus(-delta_target) + sum_{w in S} softplus(delta_w).
  Its optimum has exp(y_w) = P(w | context), so the model self-normalizes by construction.

Both start b at the log unigram probabilities (log Z = 0 and the unigram model at step 0).
The scores are computed in fp32: the matrices are small, bf16 autocast does not pay here.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from nnlm.errors import NnlmError
from nnlm.neural.net.model import NPLM
from nnlm.neural.run.config import check_loss
from nnlm.neural.run.optim import adam_state_tensors, load_adam_state

PROPOSAL_POWER = 0.75  # unigram^0.75 (Mikolov et al. 2013's smoothing): frequent words less dominant
SELF_NORMALIZATION = 0.1  # alpha of the sampled loss's (log Z^)^2 term (Devlin et al. 2014 used 0.1)
ROWS = ("C", "W", "U", "b")  # the |V|-row parameters, updated only where a batch touched them


def proposal(train_ids: np.ndarray, vocab_size: int, power: float = PROPOSAL_POWER) -> torch.Tensor:
    """q_w proportional to (count of w in train + 1)^power, float64 [|V|]."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64) + 1.0
    q = counts ** power
    return torch.from_numpy(q / q.sum())


def inclusion_probabilities(q: torch.Tensor, samples: int) -> torch.Tensor:
    """p_w = 1 - (1 - q_w)^T with T (draws with replacement) chosen so that sum_w p_w = K; float64."""
    q = q.double()
    if samples >= len(q):
        return torch.ones_like(q)
    log1m = torch.log1p(-q)
    lo, hi = float(samples), float(samples)
    while (-torch.expm1(hi * log1m)).sum() < samples:  # expected distinct words grows with T
        hi *= 2.0
    for _ in range(100):  # bisection on T to double precision
        mid = 0.5 * (lo + hi)
        if (-torch.expm1(mid * log1m)).sum() < samples:
            lo = mid
        else:
            hi = mid
    return -torch.expm1(hi * log1m)


def initial_bias(train_ids: np.ndarray, vocab_size: int) -> torch.Tensor:
    """log of the (+1 smoothed) unigram probabilities: a self-normalized start for b."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64) + 1.0
    return torch.from_numpy(np.log(counts / counts.sum())).float()


class SampledLoss:
    """The batch loss of a sampled run; remembers the rows it gathered for `RowAdam.step`."""

    def __init__(self, kind: str, q: torch.Tensor, samples: int, alpha: float = SELF_NORMALIZATION,
                 multinomial: bool = False) -> None:
        check_loss(kind, samples, len(q))
        if kind == "full":
            raise NnlmError("SampledLoss is for --loss sampled or nce")
        self.kind, self.samples, self.alpha = kind, samples, alpha
        self.q = q.float()
        self.inverse_q = 1.0 / self.q  # q > 0: the proposal is smoothed by +1 counts
        self.multinomial = multinomial
        self.log_p = inclusion_probabilities(q, samples).log().float()
        self.touched: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (parameter, rows, leaf with grad)
        self.before_read: Callable[[str, torch.Tensor], None] | None = None  # RowAdam's exact decay (TouchesRows)

    def to(self, device: torch.device) -> SampledLoss:
        self.q, self.inverse_q, self.log_p = self.q.to(device), self.inverse_q.to(device), self.log_p.to(device)
        return self

    def draw(self) -> torch.Tensor:
        """K distinct word ids from q (torch's global RNG, so a checkpoint's RNG state resumes it exactly).

        The K largest of log(u_w) / q_w, u_w uniform on [0, 1): ranking words by Exp(1)_w / q_w is
        drawing from q without replacement (the exponential-races form of the Gumbel top-k trick), the
        law torch.multinomial(replacement=False) samples. That call draws its exponentials with
        torch's `exponential_`, which took 5x as long as `rand` and a log on the CPU (8.5% of an MLP1
        step); `multinomial=True` keeps it."""
        if self.samples == len(self.q):
            return torch.arange(len(self.q), device=self.q.device)
        if self.multinomial:
            return torch.multinomial(self.q, self.samples, replacement=False)
        keys = torch.rand(len(self.q), device=self.q.device).log_().mul_(self.inverse_q)
        return torch.topk(keys, self.samples, sorted=False).indices

    def _rows(self, net: NPLM, name: str, ids: torch.Tensor) -> torch.Tensor:
        """A leaf copy of rows `ids` of parameter `name`; its gradient is what RowAdam applies."""
        if self.before_read is not None:
            self.before_read(name, ids)
        leaf = getattr(net, name).detach().index_select(0, ids).requires_grad_()
        self.touched.append((name, ids, leaf))
        return leaf

    def __call__(self, net: NPLM, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        self.touched = []
        if net.config.tied:
            return self._tied(net, contexts, targets)
        words, where = torch.unique(contexts, return_inverse=True)
        x = net.context_from_rows(self._rows(net, "C", words), where)
        inputs, _ = net.output_operands_from_features(x)  # [x if W, hidden output if H], with the net's dropout
        sample, out_ids, out_where = self._output_rows(targets)
        names = (["W"] if net.W is not None else []) + (["U"] if net.H is not None else [])
        weights = [self._rows(net, name, out_ids) for name in names]
        return self._scores(self._rows(net, "b", out_ids), inputs, weights, out_where, targets, sample)

    def _tied(self, net: NPLM, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The loss of a tied net (U = C): one leaf of C's rows for the context words and the output words
        together, so that RowAdam updates each row of C once a step with the sum of both gradients."""
        sample, out_ids, out_where = self._output_rows(targets)
        words, where = torch.unique(torch.cat([contexts.flatten(), out_ids]), return_inverse=True)
        rows = self._rows(net, "C", words)
        x = net.context_from_rows(rows, where[:contexts.numel()].view(contexts.shape))
        inputs, _ = net.output_operands_from_features(x)
        weights = ([self._rows(net, "W", out_ids)] if net.W is not None else []) \
            + [rows.index_select(0, where[contexts.numel():])]
        return self._scores(self._rows(net, "b", out_ids), inputs, weights, out_where, targets, sample)

    def output_loss(self, zs: list[torch.Tensor], ws: list[torch.Tensor], b: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
        """The loss of an output layer y = b + sum_j zs[j] ws[j]^T given as operands (a recurrent net's: its
        features come out of the cell, not from C rows this loss could gather), at the rows of the batch's
        targets and one sample. The rows are gathered through autograd, so the net's own dense optimizer
        updates them; tied weights (ws[j] is C) get both gradients."""
        sample, out_ids, out_where = self._output_rows(targets)
        return self._scores(b.index_select(0, out_ids), zs, [w.index_select(0, out_ids) for w in ws], out_where,
                            targets, sample)

    def _output_rows(self, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the sample, the distinct output rows of the targets and the sample, each one's place among them)."""
        sample = self.draw()
        out_ids, out_where = torch.unique(torch.cat([targets, sample]), return_inverse=True)
        return sample, out_ids, out_where

    def _scores(self, b: torch.Tensor, inputs: list[torch.Tensor], weights: list[torch.Tensor],
                out_where: torch.Tensor, targets: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
        """The objective from the output rows' b, the output operands `inputs` and their rows `weights`."""
        t_at, s_at = out_where[:len(targets)], out_where[len(targets):]
        # one [B, K_in] x [K_in, K] product for W x + U a(x) at the samples' rows
        y_t, y_s = b.index_select(0, t_at), b.index_select(0, s_at)
        if inputs:
            inputs, weights = torch.cat(inputs, 1), torch.cat(weights, 1)
            y_t = y_t + (inputs * weights.index_select(0, t_at)).sum(1)
            y_s = torch.addmm(y_s, inputs, weights.index_select(0, s_at).t())
        else:
            y_s = y_s.expand(len(targets), -1)
        return self.objective(y_t, y_s, self.log_p[targets], self.log_p[sample], targets[:, None] == sample[None, :])

    def objective(self, y_t: torch.Tensor, y_s: torch.Tensor, log_p_t: torch.Tensor, log_p_s: torch.Tensor,
                  hits: torch.Tensor) -> torch.Tensor:
        """Mean over the batch, from the target scores [B], the sample scores [B, K], the log inclusion
        probabilities and hits[i, j] = (sample j is row i's target)."""
        delta_t, delta_s = y_t - log_p_t, y_s - log_p_s
        if self.kind == "nce":
            return (F.softplus(-delta_t) + F.softplus(delta_s).sum(1)).mean()
        others = delta_s.masked_fill(hits, -math.inf)
        log_norm = torch.logsumexp(torch.cat([delta_t[:, None], others], 1), 1)
        loss = (log_norm - delta_t).mean()
        if self.alpha:
            loss = loss + self.alpha * torch.logsumexp(delta_s, 1).square().mean()
        return loss


class TouchesRows(Protocol):
    """A batch loss that records, after each call, the rows of the |V|-row parameters its gradient reaches:
    `touched` holds (parameter name, rows [R] distinct, holder whose .grad is their gradient [R, ...]) --
    SampledLoss (sampled / nce), and nnlm.neural.net.class_output.ClassRowLoss (the class-factored output).
    `before_read` (None, or set by RowAdam's exact rule) is called with (parameter name, rows) before the
    loss reads those rows, so that they owe no weight decay when the batch's forward pass sees them."""

    touched: list[tuple[str, torch.Tensor, Any]]
    before_read: Callable[[str, torch.Tensor], None] | None


class RowAdam:
    """Adam with decoupled weight decay (as `nnlm.neural.run.optim.Adam`) that updates only the rows of
    C, W, U, b a batch touched (`loss.touched`: a sampled batch's rows, or a class-factored batch's
    context words and present classes) and the other parameters (H, d, the variants' deeper layers,
    gains and A, the class rows of a class-factored net) densely. Its checkpoint tensors are named
    like Adam's. A step costs the rows touched, never all |V| rows of C, W, U, b (the whole cost of a
    dense step at a large vocabulary). Two rules, stated densely (what each row of C, W, U, b does at
    step t, rate lr_t, weight decay lambda on C, W, U), which the row-wise update computes exactly:

    - `exact_decay=False` (the default; `--row-decay touched`): the "lazy" Adam of torch.optim.SparseAdam.
      A row touched at step t takes AdamW's step from its own moments m, v, which move only at the steps
      that touch it, with the shared step count t in the bias corrections 1 - beta^t, and its weight decay
      (1 - lr_t lambda). An untouched row stays bit for bit as it is. It differs from dense AdamW on every
      row not touched at every step; it trained as well where measured (sampled: README; class-factored:
      docs/experiments/class-output.md, "Row-wise Adam").
    - `exact_decay=True` (`--row-decay exact`): dense AdamW with the Adam step of an untouched row dropped.
      Every row, every step: p <- p (1 - lr_t lambda), m <- beta1 m + (1 - beta1) g, v <- beta2 v +
      (1 - beta2) g^2 (g = 0 for an untouched row); a touched row then also takes p <- p - lr_t m^ /
      (sqrt(v^) + eps). So weight decay and moments are dense AdamW's exactly, and a row touched at every
      step is dense AdamW's row. Applied lazily: a row remembers the step it was last brought up to date
      (`row_step`) and the running sum L_t = sum_s log(1 - lr_s lambda) then (`row_log`); when a batch
      touches it again k steps later, it first takes exp(L_{t-1} - L_then) on p, beta1^k on m and
      beta2^k on v in the same compiled pass as its update. `flush` brings every row up to date (before
      validating: the trainer calls it at each epoch's end); a checkpoint saves the rows as they are
      with their bookkeeping, so a resumed run computes what an uninterrupted one does, bit for bit.

    On the CPU the rows are updated in place by one compiled loop per parameter
    (`row_adam_kernel`); `fused=False` (or another device) takes the torch ops, gather-update-scatter."""

    def __init__(self, net: NPLM, loss: TouchesRows, lr: float, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, fused: bool = True,
                 exact_decay: bool = False) -> None:
        self.net, self.loss, self.lr, self.weight_decay, self.betas, self.eps = net, loss, lr, weight_decay, betas, eps
        self.fused, self.exact_decay = fused, exact_decay
        self.params = dict(net.named_parameters())
        self.decayed = {id(p) for p in net.decayed_parameters()}
        self.m = {k: torch.zeros_like(p) for k, p in self.params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in self.params.items()}
        self.t = 0
        self.log_decay = 0.0  # L_t (exact_decay): the log of the weight decay every row has owed since step 0
        rows = [k for k in (*ROWS, "v") if k in self.params and len(self.params[k]) == net.config.vocab_size
                and not (k == "v" and net.config.energy_shared_v)] if exact_decay else []  # (v: the energy net's)
        self.row_step = {k: torch.zeros(len(self.params[k]), dtype=torch.int64, device=self.params[k].device)
                         for k in rows}
        self.row_log = {k: torch.zeros(len(self.params[k]), dtype=torch.float64, device=self.params[k].device)
                        for k in rows}
        if exact_decay:
            loss.before_read = self.decay_rows

    @torch.no_grad()
    def decay_rows(self, name: str, rows: torch.Tensor) -> None:
        """Rows `rows` (distinct) of `name` take the weight decay they owe for the steps since they were last
        brought up to date (exact rule; called by the loss before it reads them). Their moments' decay waits
        for `step`, which reads them with the gradient in the same pass."""
        p = self.params[name]
        if id(p) not in self.decayed:
            return
        owed = (self.log_decay - self.row_log[name].index_select(0, rows)).exp_().to(p.dtype)
        p.index_copy_(0, rows, p.index_select(0, rows).mul_(owed.view((-1,) + (1,) * (p.dim() - 1))))
        self.row_log[name].index_fill_(0, rows, self.log_decay)

    def _update(self, name: str, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> None:
        b1, b2 = self.betas
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        if self.weight_decay and id(self.params[name]) in self.decayed:
            p.mul_(1 - self.lr * self.weight_decay)
        denom = v.sqrt().div_(math.sqrt(1 - b2 ** self.t)).add_(self.eps)
        p.addcdiv_(m, denom, value=-self.lr / (1 - b1 ** self.t))

    def _catch_up(self, name: str, rows: torch.Tensor, now: int, log_decay: float
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(on p, on m, on v) [R] float64: what `rows` of `name` owe for the steps after they were last
        brought up to date and up to step `now` (where the running log decay was `log_decay`)."""
        missed = (now - self.row_step[name].index_select(0, rows)).double()
        b1, b2 = self.betas
        on_m, on_v = torch.pow(b1, missed), torch.pow(b2, missed)
        if id(self.params[name]) in self.decayed:
            on_p = (log_decay - self.row_log[name].index_select(0, rows)).exp_()
        else:
            on_p = torch.ones_like(on_m)
        return on_p, on_m, on_v

    def _mark(self, name: str, rows: torch.Tensor) -> None:
        """`rows` of `name` are up to date at this step."""
        self.row_step[name].index_fill_(0, rows, self.t)
        self.row_log[name].index_fill_(0, rows, self.log_decay)

    def _fused_rows(self, name: str, rows: torch.Tensor, grad: torch.Tensor,
                    owed: tuple[torch.Tensor, ...] | None) -> bool:
        """The compiled in-place update of `rows` of parameter `name` (first multiplied by `owed`, the
        exact decay's catch-up, when given); False where it does not apply (not on the CPU, or a tensor
        that is not one contiguous block), for the torch ops to do it."""
        from nnlm.neural.net.row_adam_kernel import adam_rows, adam_rows_caught_up, as_rows

        p, m, v = self.params[name], self.m[name], self.v[name]
        if not all(t.device.type == "cpu" and t.is_contiguous() for t in (p, m, v)) or p.dtype != m.dtype:
            return False
        b1, b2 = self.betas
        decay = self.lr * self.weight_decay if id(p) in self.decayed else 0.0
        common = (self.lr, b1, b2, self.eps, decay, 1 - b1 ** self.t, 1 - b2 ** self.t)
        g = as_rows(grad.to(p.dtype).contiguous())
        if owed is None:
            adam_rows(as_rows(p), g, as_rows(m), as_rows(v), rows.numpy(), *common)
        else:
            adam_rows_caught_up(as_rows(p), g, as_rows(m), as_rows(v), rows.numpy(), *(o.numpy() for o in owed),
                                *common)
        return True

    @torch.no_grad()
    def step(self, examples_seen: int, batch: int) -> None:
        self.t += 1
        before = self.log_decay  # L_{t-1}
        if self.exact_decay:
            self.log_decay += math.log1p(-self.lr * self.weight_decay)
        for name, rows, leaf in self.loss.touched:
            owed = self._catch_up(name, rows, self.t - 1, before) if self.exact_decay else None
            if owed is not None:
                self._mark(name, rows)
            if self.fused and self._fused_rows(name, rows, leaf.grad, owed):
                continue
            p, m, v = self.params[name], self.m[name].index_select(0, rows), self.v[name].index_select(0, rows)
            value = p.index_select(0, rows)
            if owed is not None:
                shape = (-1,) + (1,) * (p.dim() - 1)
                for tensor, factor in zip((value, m, v), owed, strict=True):
                    tensor.mul_(factor.to(p.dtype).view(shape))
            self._update(name, value, leaf.grad, m, v)
            p.index_copy_(0, rows, value)
            self.m[name].index_copy_(0, rows, m)
            self.v[name].index_copy_(0, rows, v)
        for name, p in self.params.items():  # the dense ones: H, d, the deeper layers, gains, A
            if name not in ROWS and p.grad is not None:
                self._update(name, p, p.grad, self.m[name], self.v[name])

    @torch.no_grad()
    def flush(self) -> None:
        """Bring every row up to date (exact_decay: the weight decay and moment decay it owes; nothing to do
        otherwise): after it the weights are dense AdamW's rule's at this step. Costs every row once."""
        for name in self.row_step:
            p = self.params[name]
            every = torch.arange(len(p), device=p.device)
            owed = self._catch_up(name, every, self.t, self.log_decay)
            self._mark(name, every)
            shape = (-1,) + (1,) * (p.dim() - 1)
            for tensor, factor in zip((p, self.m[name], self.v[name]), owed, strict=True):
                tensor.mul_(factor.to(p.dtype).view(shape))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Adam's tensors; with exact_decay, each row's bookkeeping and the running log decay too."""
        tensors = adam_state_tensors(self.m, self.v, self.t)
        if self.exact_decay:
            tensors |= {f"optim.row_step.{k}": x for k, x in self.row_step.items()}
            tensors |= {f"optim.row_log.{k}": x for k, x in self.row_log.items()}
            tensors["optim.log_decay"] = torch.tensor(self.log_decay, dtype=torch.float64)
        return tensors

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        own = ("optim.row_step.", "optim.row_log.", "optim.log_decay")
        books = {k: x for k, x in tensors.items() if k.startswith(own)}
        expected = set(self.state_tensors()) - set(adam_state_tensors(self.m, self.v, 0))
        if set(books) != expected:
            raise NnlmError(f"the checkpoint's row bookkeeping has {sorted(books)}, this run needs {sorted(expected)}")
        self.t = load_adam_state(self.m, self.v, {k: x for k, x in tensors.items() if k not in books})
        for store, kind in ((self.row_step, "row_step"), (self.row_log, "row_log")):
            for k, live in store.items():
                saved = books[f"optim.{kind}.{k}"]
                if saved.shape != live.shape or saved.dtype != live.dtype:
                    raise NnlmError(f"the checkpoint's {kind} for {k} has shape {list(saved.shape)}, "
                                    f"the model needs {list(live.shape)}")
                live.copy_(saved)
        if self.exact_decay:
            self.log_decay = float(books["optim.log_decay"])


def log_partition_stats(lm, corpus, split: str = "valid") -> tuple[float, float]:
    """Mean and standard deviation of log Z over the positions of a split (contexts as `nnlm.lm` builds them):
    how far scoring without the softmax sum (the UNNORMALIZED Scoring, nnlm.neural.lm.scoring) is from exact."""
    from nnlm.lm import EVAL_CHUNK, contexts

    stream, start, n = corpus.stream(), corpus.split_offset(split), len(corpus.split(split))
    values = np.concatenate([lm.log_partition(contexts(stream, np.arange(start + lo, start + min(lo + EVAL_CHUNK, n)),
                                                       lm.context_size, corpus.pad_id))
                             for lo in range(0, n, EVAL_CHUNK)])
    return float(values.mean()), float(values.std())
