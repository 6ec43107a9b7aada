"""The paper's parameter-parallel output layer (today: a vocabulary-parallel softmax).

Rank r of R owns the rows of b, W, U for its slice [lo_r, hi_r) of the vocabulary; C, H, d are
replicated. Every rank computes x and the hidden layer a = tanh(d + H x) itself, then only its
slice of the scores, y_r = b_r + W_r x + U_r a. The softmax needs two all-reduces per batch (the
max of y over V, then the sum of exp(y - max)), and the target's score is taken from the rank
owning it by a third (a sum where every other rank contributes 0). The loss is then the same
number on every rank.

Gradients follow from two conjugate operations (the "f" and "g" of tensor-parallel training):
- `_shared_input`: x and a enter the rank-local layer as identities, and on the way back each
  rank's partial gradient is all-reduced (summed), since x and a feed every rank's slice;
- `_sum_over_ranks`: an all-reduce sum whose backward is the identity (the loss that consumes
  it is replicated, not summed over ranks).
So after backward() the gradients of C, H, d are the full ones (equal on every rank), and those
of b_r, W_r, U_r are the slice of the full ones: each rank's optimizer steps its own tensors and
the replicas stay identical without any parameter traffic.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.neural.lm.scoring import EVAL_ROWS
from nnlm.neural.net.model import NPLM, NPLMParameters
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.parallel.distributed import all_gather_rows

SLICED = ("b", "W", "U")  # the output layer's parameters, split by rows (words)


class CommTimer:
    """Seconds spent inside collectives, for the benchmark's communication fraction."""

    seconds = 0.0

    @classmethod
    def all_reduce(cls, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        start = time.perf_counter()
        dist.all_reduce(tensor, op=op)
        cls.seconds += time.perf_counter() - start
        return tensor

    @classmethod
    def all_gather(cls, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor`, stacked: [world, *tensor.shape]."""
        start = time.perf_counter()
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        cls.seconds += time.perf_counter() - start
        return torch.stack(parts)


def vocab_slices(vocab_size: int, world: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) per rank, sizes differing by at most one (uneven |V| / R is fine)."""
    if world > vocab_size:
        raise NnlmError(f"--parallel vocab: {world} processes for {vocab_size} words leaves rank {vocab_size} "
                        "no words; use fewer processes")
    base, extra = divmod(vocab_size, world)
    bounds = [0]
    for r in range(world):
        bounds.append(bounds[-1] + base + (1 if r < extra else 0))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


class _SharedInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return CommTimer.all_reduce(grad.contiguous())


class _SumOverRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        return CommTimer.all_reduce(tensor.clone())

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class VocabParallelNPLM(NPLMParameters):
    """One rank's share of an NPLM: full C, H, d; the rows [lo, hi) of b, W, U (filled by `from_full`).

    Parameter names are the NPLM's, so the optimizers (which ask for `decayed_parameters`,
    `bias_parameters`, `named_parameters`) work on it unchanged."""

    def __init__(self, config: ModelConfig, lo: int, hi: int, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        super().__init__(config, hi - lo, dropout_x, dropout_h)
        self.lo, self.hi = lo, hi

    @classmethod
    def from_full(cls, tensors: dict[str, torch.Tensor], config: ModelConfig, rank: int, world: int,
                  dropout_x: float = 0.0, dropout_h: float = 0.0) -> VocabParallelNPLM:
        """This rank's share of a whole model's tensors (an NPLM state_dict or a checkpoint's)."""
        lo, hi = vocab_slices(config.vocab_size, world)[rank]
        net = cls(config, lo, hi, dropout_x, dropout_h)
        net.load_slices(tensors)
        return net

    def load_slices(self, tensors: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, p in self.named_parameters():
                full = tensors[name]
                p.copy_(full[self.lo:self.hi] if name in SLICED else full)

    def local_logits(self, contexts: torch.Tensor) -> torch.Tensor:
        """y restricted to this rank's words, [N, hi - lo]: the NPLM's formula over its rows (dropout
        masks match across ranks, which share one RNG state)."""
        return self.logits_from_features(self.features(contexts), shared=_SharedInput.apply)

    def log_prob(self, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log P(target | context), [N], identical on every rank; differentiable."""
        y = self.local_logits(contexts)
        if y.dtype in (torch.bfloat16, torch.float16):  # bf16 autocast: the softmax in fp32, as single-process
            y = y.float()
        with torch.no_grad():  # the max only stabilizes exp(); its gradient contribution cancels
            peak = CommTimer.all_reduce(y.max(dim=1).values, dist.ReduceOp.MAX)
        total = _SumOverRanks.apply(torch.exp(y - peak[:, None]).sum(dim=1))
        mine = (targets >= self.lo) & (targets < self.hi)
        local_index = torch.where(mine, targets - self.lo, torch.zeros_like(targets))
        picked_here = torch.where(mine, y.gather(1, local_index[:, None])[:, 0], torch.zeros_like(peak))
        picked = _SumOverRanks.apply(picked_here)
        return picked - peak - torch.log(total)

    def loss(self, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        """Mean negative log-likelihood of the batch (replicated on every rank). bf16: this rank's
        slice of the output layer and its share of the softmax as one fused step
        (`vocab_softmax_cross_entropy`), as the single-process trainer's `softmax_loss`."""
        if not bf16 or (self.W is None and self.H is None):  # (y = b alone has no product to fuse)
            return -self.log_prob(contexts, targets).mean()
        zs, ws = self.output_operands_from_features(self.features(contexts))
        return vocab_softmax_cross_entropy(zs, ws, self.b, targets, self.lo, torch.bfloat16)


def _vocab_log_probs(z: torch.Tensor, w: torch.Tensor, b: torch.Tensor, targets: torch.Tensor, lo: int):
    """The forward of a vocabulary-parallel softmax, one collective: (this rank's logits y_r, their
    log-sum-exp lse_r, the global LSE, log P(target) [B], which targets this rank owns, their local
    index). z, w in the compute dtype; the log-sum-exps and log P in fp32 or wider."""
    y = torch.addmm(b.to(w.dtype), z, w.t())
    wide = torch.promote_types(y.dtype, torch.float32)
    local_lse = torch.empty(len(y), dtype=wide, device=y.device)
    torch.logsumexp(y, dim=1, out=local_lse)  # fp32 (or wider) out of the low-precision logits
    rows = torch.arange(len(targets), device=targets.device)
    mine = (targets >= lo) & (targets < lo + len(b))
    local_index = torch.where(mine, targets - lo, torch.zeros_like(targets))
    picked_here = torch.where(mine, y[rows, local_index].to(wide), torch.zeros_like(local_lse))
    every = CommTimer.all_gather(torch.stack([local_lse, picked_here]))  # [world, 2, B]
    lse = torch.logsumexp(every[:, 0], dim=0)
    return y, local_lse, lse, every[:, 1].sum(dim=0) - lse, mine, local_index


class _VocabSoftmaxCrossEntropy(torch.autograd.Function):
    """mean_i -log softmax(b + z w^T)_i[t_i] where this rank holds the rows [lo, lo + len(b)) of w
    and b, and the softmax runs over every rank's rows. z [B, K] comes in fp32 (its gradient is
    summed over the ranks in fp32); w [rows, K] comes in the compute dtype.

    Forward: the local logits y_r in the compute dtype; their log-sum-exp lse_r in fp32 and the
    target's logit (from the rank that owns it) go to every rank in one all-gather of [2, B], which
    gives the global LSE and the loss, LSE - y_target; the softmax of y_r over the local words
    (fp32 inside, one rounding) times exp(lse_r - LSE) is this rank's share of the global
    probabilities. Backward: the gradient of the logits is those probabilities with the owned
    targets' entries lowered by 1, as in `softmax_loss`; grad z is all-reduced. Two collectives a
    step in all, against five for the autograd of `log_prob`."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, w: torch.Tensor, b: torch.Tensor, targets: torch.Tensor,
                lo: int) -> torch.Tensor:
        zc = z.to(w.dtype)
        y, local_lse, lse, log_probs, mine, local_index = _vocab_log_probs(zc, w, b, targets, lo)
        probs = y.softmax(dim=1)  # a new tensor: the logits are freed
        del y
        probs.mul_(torch.exp(local_lse - lse).to(probs.dtype)[:, None])
        ctx.save_for_backward(zc, w, probs, local_index, mine)
        ctx.dtypes = (z.dtype, b.dtype)
        return -log_probs.mean()

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        zc, w, probs, local_index, mine = ctx.saved_tensors
        z_dtype, b_dtype = ctx.dtypes
        rows = torch.arange(len(local_index), device=local_index.device)[mine]
        probs[rows, local_index[mine]] -= 1  # the gradient of the summed loss w.r.t. this rank's logits
        scale = grad_loss / len(local_index)  # fp32 (or wider), cast where it is used
        grad_z = CommTimer.all_reduce((probs @ w).to(z_dtype).mul_(scale.to(z_dtype)))
        grad_w = probs.t() @ (zc * scale.to(zc.dtype))
        grad_b = probs.sum(dim=0).mul_(scale.to(probs.dtype)).to(b_dtype)
        return grad_z, grad_w, grad_b, None, None


def vocab_softmax_cross_entropy(zs: list[torch.Tensor], ws: list[torch.Tensor], b: torch.Tensor,
                                targets: torch.Tensor, lo: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`softmax_loss.softmax_cross_entropy` for a rank holding the rows [lo, lo + len(b)) of the
    output layer: mean -log softmax(b + sum_j zs[j] ws[j]^T)[target] over all ranks' words, the
    same scalar on every rank. zs are the replicated inputs (x, the hidden layer); in float64 this
    is exactly the autograd of `VocabParallelNPLM.log_prob` (tested)."""
    dtype = dtype or b.dtype
    z = torch.cat(zs, dim=1)
    w = torch.cat([wi.to(dtype) for wi in ws], dim=1)
    return _VocabSoftmaxCrossEntropy.apply(z, w, b, targets, lo)


def gather_rows(local: torch.Tensor, vocab_size: int, world: int) -> torch.Tensor:
    """Reassemble a tensor split by rows with `vocab_slices` (uneven slices padded for the collective)."""
    return all_gather_rows(local, [hi - lo for lo, hi in vocab_slices(vocab_size, world)])


def full_tensors(net: VocabParallelNPLM, extra: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The whole model's parameters (NPLM names) plus any per-parameter tensors in `extra`
    (keys ending in '.b', '.W', '.U' are gathered like those parameters). A collective: every rank calls it."""
    world, v = dist.get_world_size(), net.config.vocab_size
    out = {}
    for name, p in list(net.named_parameters()) + list((extra or {}).items()):
        is_sliced = name.rsplit(".", 1)[-1] in SLICED
        out[name] = gather_rows(p.detach(), v, world) if is_sliced else p.detach().clone()
    return out


def assemble_nplm(tensors: dict[str, torch.Tensor], config: ModelConfig) -> NPLM:
    """An NPLM holding `tensors`; the global RNG is left as it was (all ranks share its state)."""
    with torch.random.fork_rng(devices=[]):
        net = NPLM(config)
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(tensors[name])
    return net


class VocabParallelLM(LanguageModel):
    """A vocabulary-parallel NPLM as a LanguageModel, for scoring with every rank's share of the
    work: all ranks call `log_prob` with the same arguments (it is a collective) and each gets the
    whole answer, computing only its slice of the output layer. The per-epoch validation of
    `--parallel vocab` uses it, so no rank scores the whole model alone. `bf16` as in NeuralLM:
    bf16 products, fp32 log-sum-exp; otherwise fp32 throughout."""

    def __init__(self, net: VocabParallelNPLM, vocab: Vocabulary, bf16: bool = False) -> None:
        self.net, self.vocab, self.order, self.bf16 = net, vocab, net.config.order, bf16

    def parameter_count(self) -> int:
        return self.net.config.parameter_count()

    @torch.no_grad()
    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        self.net.eval()
        device = self.net.C.device
        ctx = torch.as_tensor(np.ascontiguousarray(contexts, dtype=np.int64), device=device)
        tgt = torch.as_tensor(np.ascontiguousarray(targets, dtype=np.int64), device=device)
        dtype = torch.bfloat16 if self.bf16 else self.net.C.dtype
        out = np.empty(len(tgt), dtype=np.float64)
        w = None
        for lo in range(0, len(tgt), EVAL_ROWS):
            zs, ws = self.net.output_operands_from_features(self.net.features(ctx[lo:lo + EVAL_ROWS]))
            w = torch.cat(ws, dim=1).to(dtype) if w is None else w  # cast once per call, not per chunk
            log_probs = _vocab_log_probs(torch.cat(zs, dim=1).to(dtype), w, self.net.b, tgt[lo:lo + EVAL_ROWS],
                                         self.net.lo)[3]
            out[lo:lo + len(log_probs)] = log_probs.double().cpu().numpy()
        return out

    @torch.no_grad()
    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        self.net.eval()
        ctx = torch.as_tensor(np.ascontiguousarray(contexts, dtype=np.int64), device=self.net.C.device)
        y = gather_rows(self.net.local_logits(ctx).t().contiguous(), self.net.config.vocab_size,
                        dist.get_world_size()).t()
        return torch.softmax(y.double(), dim=1).cpu().numpy()
