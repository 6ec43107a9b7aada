"""The energy-minimization network of the paper's section 5.1: the output word is an input too.

    x = [C(w_{t-n+1}), ..., C(w_{t-1})]                      (the n-1 context words, oldest first)
    E(w, context) = v_w . tanh(d + H x + H_0 C(w)) + b_w      (+ W_w . x with direct connections)
    P(w_t = w | context) = exp(-E(w, context)) / sum_j exp(-E(j, context))

H_0 is the block of the paper's H that multiplies the candidate word's own feature vector C(w). Since
d + H x + H_0 C(w) = a(context) + g(w), the |V| x h table g = C H_0^T is computed once per parameter
update (training) or per scoring call, and one context then costs |V| x h tanh units: the order of
the first model's output layer, but in tanh units instead of multiply-adds. v is indexed by the
output word (`v_w`, |V| x h), so the parameter count is the first model's (plus H_0's h m); `energy_shared_v`
(`--energy-shared-v`) shares one v of h numbers between all words. The logits the rest of nnlm sees
are y = -E, so every loss and scorer that works on logits works here.

Why a kernel of its own (`hidden_sums`): the tanh argument is [N, |V|, h] -- 3.6 MB per context for
MLP1's shape on Brown. It is never built whole: a block of a few rows is summed one hidden unit at a
time into [rows, |V|] (the buffer stays in the core's cache), and the backward pass recomputes the tanh
instead of keeping it, so memory is O(N |V|) in training and O(EVAL_ROWS |V|) in scoring. The sampled and
NCE losses (`EnergySampledLoss`) reuse nnlm.neural.net.sampled's draws, inclusion probabilities, objective
and row-wise Adam; they need tanh units only at the batch's targets and the K sampled words.
`EnergyLM` is the LanguageModel adapter (nnlm.neural.net.nets picks the net and adapter from the config):
exact fp32 scoring (a bf16 Scoring is refused: the cost is tanh, not a product), the unnormalized one, the
paper's feature vector for unknown words; stateful stepping uses LanguageModel's default (recomputing
each context), and the direct connections' per-position tables are not built (their saving is a small
part of this net's cost).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nnlm import threads
from nnlm.errors import NnlmError
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import EVAL_ROWS, Scoring, target_scores
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.sampled import SampledLoss

__all__ = ["EnergyLM", "EnergyNPLM", "EnergySampledLoss", "hidden_sums"]

BLOCK_BYTES = 1 << 19  # one [rows, |V|] tanh buffer of the kernel: within a core's L2 cache


def block_rows(vocab_size: int, itemsize: int = 4) -> int:
    """Rows of one block of `hidden_sums` (at least 1)."""
    return max(1, BLOCK_BYTES // (itemsize * vocab_size))


def hidden_sums(a: torch.Tensor, gt: torch.Tensor, vt: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """s[n, w] = sum_j keep[n, j] vt[j, w] tanh(a[n, j] + gt[j, w]), [N, |V|], without the [N, |V|, h] tensor.

    a [N, h] (d + H x of each context), gt [h, |V|] (H_0 C^T), vt [h, |V|] (v^T, or one v broadcast),
    keep [N, h] (the dropout mask, scaled) or None. No autograd: see `_HiddenSums`."""
    n, (h, v) = len(a), gt.shape
    out = a.new_zeros(n, v)
    rows = block_rows(v, a.element_size())
    z = a.new_empty(min(rows, n) * v)
    for lo in range(0, n, rows):
        block = out[lo:lo + rows]
        tanh = z[:len(block) * v].view(len(block), v)
        for j in range(h):
            torch.add(gt[j], a[lo:lo + rows, j:j + 1], out=tanh).tanh_()
            if keep is not None:
                tanh.mul_(keep[lo:lo + rows, j:j + 1])
            block.addcmul_(tanh, vt[j])
    return out


def hidden_sums_backward(a: torch.Tensor, gt: torch.Tensor, vt: torch.Tensor, keep: torch.Tensor | None,
                         grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of sum(grad * hidden_sums(a, gt, vt, keep)) with respect to a, gt and vt, the tanh
    recomputed block by block (never kept from the forward pass)."""
    n, (h, v) = len(a), gt.shape
    grad_a, grad_gt, grad_vt = torch.zeros_like(a), torch.zeros_like(gt), a.new_zeros(h, v)
    rows = block_rows(v, a.element_size())
    z = a.new_empty(min(rows, n) * v)
    for lo in range(0, n, rows):
        g = grad[lo:lo + rows]
        tanh = z[:len(g) * v].view(len(g), v)
        for j in range(h):
            torch.add(gt[j], a[lo:lo + rows, j:j + 1], out=tanh).tanh_()
            kept = g if keep is None else g * keep[lo:lo + rows, j:j + 1]
            grad_vt[j].add_((kept * tanh).sum(0))
            pre = tanh.square_().neg_().add_(1).mul_(kept).mul_(vt[j])  # d s / d (a + g): vt keep (1 - tanh^2)
            grad_a[lo:lo + rows, j] = pre.sum(1)
            grad_gt[j].add_(pre.sum(0))
    return grad_a, grad_gt, grad_vt


class _HiddenSums(torch.autograd.Function):
    """`hidden_sums` with its gradient (recomputing the tanh in backward)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, gt: torch.Tensor, vt: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(a, gt, vt, keep)
        return hidden_sums(a, gt, vt, keep)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, gt, vt, keep = ctx.saved_tensors
        grad_a, grad_gt, grad_vt = hidden_sums_backward(a, gt, vt, keep, grad.contiguous())
        return grad_a, grad_gt, grad_vt, None


class EnergyNPLM(nn.Module):
    """The section 5.1 network: parameters C, b, H, H0, d, v (and W with direct connections);
    forward gives the logits y = -E [N, |V|] of contexts [N, n-1]."""

    def __init__(self, config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        super().__init__()
        if not config.energy:
            raise NnlmError("EnergyNPLM needs a config with energy = true")
        self.config, self.dropout_x, self.dropout_h = config, dropout_x, dropout_h
        v, h, m, k = config.vocab_size, config.hidden, config.features, config.input_size
        self.C = nn.Parameter(torch.empty(v, m))
        self.b = nn.Parameter(torch.empty(v))
        self.W = nn.Parameter(torch.empty(v, k)) if config.direct else None
        self.H = nn.Parameter(torch.empty(h, k))   # the context words' block of the paper's H
        self.H0 = nn.Parameter(torch.empty(h, m))  # the output word's block
        self.d = nn.Parameter(torch.empty(h))
        self.v = nn.Parameter(torch.empty(h) if config.energy_shared_v else torch.empty(v, h))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As the NPLM's: small uniform C, U(-1/sqrt(fan_in), +) weights (H and H0 as the two blocks of
        one matrix over n m inputs), zero biases."""
        with torch.no_grad():
            self.C.uniform_(-0.1, 0.1)
            self.b.zero_()
            self.d.zero_()
            bound = 1.0 / math.sqrt(self.config.input_size + self.config.features)
            self.H.uniform_(-bound, bound)
            self.H0.uniform_(-bound, bound)
            bound = 1.0 / math.sqrt(self.config.hidden)
            self.v.uniform_(-bound, bound)
            if self.W is not None:
                bound = 1.0 / math.sqrt(self.W.shape[1])
                self.W.uniform_(-bound, bound)

    def decayed_parameters(self) -> list[nn.Parameter]:
        """The weights and C (the paper's weight decay), not the biases b and d."""
        return [p for p in (self.C, self.W, self.H, self.H0, self.v) if p is not None]

    def bias_parameters(self) -> list[nn.Parameter]:
        return [self.b, self.d]

    def embed(self, contexts: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """x [N, (n-1) m] from the rows of `table` (C, or C with unknown words' features) for contexts [N, n-1]."""
        return F.embedding(contexts, table).flatten(1)

    def features(self, contexts: torch.Tensor) -> torch.Tensor:
        return self.embed(contexts, self.C)

    def word_terms(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(g^T, v^T), each [h, |V|]: g = C H_0^T, every word's term of the hidden pre-activation, and
        the output vectors (one shared v broadcast). Computed once per update or scoring call."""
        gt = self.H0 @ self.C.t()
        vt = self.v[:, None].expand_as(gt) if self.config.energy_shared_v else self.v.t().contiguous()
        return gt, vt

    def _keep(self, rows: int, like: torch.Tensor) -> torch.Tensor | None:
        """The hidden layer's dropout mask [rows, h] (training with dropout_h > 0), else None."""
        if not (self.training and self.dropout_h > 0):
            return None
        return F.dropout(like.new_ones(rows, self.config.hidden), self.dropout_h, training=True)

    def logits_from_features(self, x: torch.Tensor, terms: tuple[torch.Tensor, torch.Tensor] | None = None
                             ) -> torch.Tensor:
        """y = -E [N, |V|] for context features x; `terms` = word_terms() when the caller reuses them."""
        if self.training and self.dropout_x > 0:
            x = F.dropout(x, self.dropout_x, training=True)
        gt, vt = self.word_terms() if terms is None else terms
        a = torch.addmm(self.d, x, self.H.t())
        energy = _HiddenSums.apply(a, gt, vt, self._keep(len(x), x)) + self.b
        if self.W is not None:
            energy = torch.addmm(energy, x, self.W.t())
        return energy.neg_() if not energy.requires_grad else -energy

    def forward(self, contexts: torch.Tensor) -> torch.Tensor:
        return self.logits_from_features(self.features(contexts))

    def target_logits(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """y[i, targets[i]] = -E(targets[i], context i) [N]: h tanh units per row, no |V|-wide work (eval mode)."""
        a = torch.addmm(self.d, x, self.H.t()) + self.C[targets] @ self.H0.t()
        v = self.v if self.config.energy_shared_v else self.v[targets]
        energy = (torch.tanh(a) * v).sum(1) + self.b[targets]
        if self.W is not None:
            energy = energy + (x * self.W[targets]).sum(1)
        return -energy

    def expected_features(self, contexts: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i C(i) P(i | context), [N, m]: the paper's feature vector for a word outside V."""
        logits = self.logits_from_features(self.features(contexts) if x is None else x)
        return torch.softmax(logits.double(), dim=1).to(self.C.dtype) @ self.C


class EnergyLM(NeuralLM):
    """An EnergyNPLM behind the LanguageModel interface: exact scoring in fp32 (float64 out), blocks of
    EVAL_ROWS contexts with the word terms computed once per call; an unnormalized scoring reads -E(target)
    alone (h tanh units a token). States step through LanguageModel's default path."""

    def check_scoring(self, scoring: Scoring) -> None:
        super().check_scoring(scoring)
        if scoring.precision == "bf16":
            raise NnlmError("bf16 scoring is for the MLP's output product; the energy network scores in fp32 "
                            "(its cost is tanh units)")

    output_is_one_product = False  # states step through log_prob; no per-position tables

    def _blocks(self, ctx: torch.Tensor, table: torch.Tensor):
        """(lo, y = -E [rows, |V|]) for each block of contexts, the word terms computed once."""
        self.net.eval()
        terms = self.net.word_terms()
        for lo in range(0, len(ctx), EVAL_ROWS):
            threads.check()
            yield lo, self.net.logits_from_features(self.net.embed(ctx[lo:lo + EVAL_ROWS], table), terms)

    @torch.no_grad()
    def _score_ids(self, ctx: torch.Tensor, targets: torch.Tensor, table: torch.Tensor
                   ) -> tuple[np.ndarray, np.ndarray | None]:
        """(log P, log Z) exactly, or (-E(target), None) unnormalized."""
        if not self.scoring.normalized:
            self.net.eval()
            return target_scores(self.net, ctx, targets, table, EVAL_ROWS), None
        out = np.empty(len(targets), dtype=np.float64)
        log_z = np.empty(len(targets), dtype=np.float64)
        for lo, y in self._blocks(ctx, table):
            lse = torch.logsumexp(y, dim=1)
            picked = y.gather(1, targets[lo:lo + len(y), None])[:, 0]
            out[lo:lo + len(y)] = (picked - lse).double().cpu().numpy()
            log_z[lo:lo + len(y)] = lse.double().cpu().numpy()  # log Z comes free with log P
        return out, log_z

    @torch.no_grad()
    def log_partition(self, contexts: np.ndarray) -> np.ndarray:
        """log Z = log sum_w exp(-E(w, context)), float64 [N]."""
        ctx = self._check(contexts)
        out = np.empty(len(ctx), dtype=np.float64)
        for lo, y in self._blocks(ctx, self.net.C.detach()):
            out[lo:lo + len(y)] = torch.logsumexp(y, dim=1).double().cpu().numpy()
        return out

    @torch.no_grad()
    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        ctx = self._check(contexts)
        out = np.empty((len(ctx), len(self.vocab)), dtype=np.float64)
        for lo, y in self._blocks(ctx, self.net.C.detach()):
            out[lo:lo + len(y)] = torch.softmax(y.double(), dim=1).cpu().numpy()
        return out


class EnergySampledLoss(SampledLoss):
    """`SampledLoss` (sampled softmax or NCE, the same draws and objective) for the energy network: the
    energies of each row's target and of the K drawn words only; the rows of C (context, target and
    drawn words), v, W and b they touch are gathered as leaves for `RowAdam`."""

    def __call__(self, net: EnergyNPLM, contexts: torch.Tensor, targets: torch.Tensor,  # type: ignore[override]
                 bf16: bool = False) -> torch.Tensor:
        self.touched = []
        sample = self.draw()
        out_ids, out_where = torch.unique(torch.cat([targets, sample]), return_inverse=True)
        t_at, s_at = out_where[:len(targets)], out_where[len(targets):]
        words, where = torch.unique(torch.cat([contexts.flatten(), out_ids]), return_inverse=True)
        vectors = self._rows(net, "C", words).index_select(0, where)
        x = vectors[:contexts.numel()].view(len(contexts), -1)
        if net.training and net.dropout_x > 0:
            x = F.dropout(x, net.dropout_x, training=True)
        a = torch.addmm(net.d, x, net.H.t())                           # [B, h]
        g = vectors[contexts.numel():] @ net.H0.t()                    # [U, h], U = the targets and samples
        keep = net._keep(len(x), x)
        v = net.v if net.config.energy_shared_v else self._rows(net, "v", out_ids)
        v_t, v_s = (v, v) if net.config.energy_shared_v else (v.index_select(0, t_at), v.index_select(0, s_at))
        hidden_t = torch.tanh(a + g.index_select(0, t_at))            # [B, h]
        if keep is not None:
            hidden_t = hidden_t * keep
        b = self._rows(net, "b", out_ids)
        e_t = (hidden_t * v_t).sum(1) + b.index_select(0, t_at)
        # the samples' [B, K] sums over the hidden units, through the kernel (no [B, K, h] autograd graph)
        gt_s = g.index_select(0, s_at).t().contiguous()
        vt_s = v_s[:, None].expand_as(gt_s) if net.config.energy_shared_v else v_s.t().contiguous()
        e_s = _HiddenSums.apply(a, gt_s, vt_s, keep) + b.index_select(0, s_at)[None]
        if net.W is not None:
            w = self._rows(net, "W", out_ids)
            e_t = e_t + (x * w.index_select(0, t_at)).sum(1)
            e_s = torch.addmm(e_s, x, w.index_select(0, s_at).t())
        return self.objective(-e_t, -e_s, self.log_p[targets], self.log_p[sample], targets[:, None] == sample[None, :])
