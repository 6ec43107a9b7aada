"""How a neural language model scores a word: a Scoring chosen once, when the model is loaded or built.

    Scoring()                      exact: log softmax(y)[w] over all of V in fp32 (every reported figure)
    Scoring(precision="bf16")      the |V|-wide product in bf16 (fp32 accumulation and log-sum-exp): still
                                   normalized over V, ~1e-4 from fp32, several times faster on bf16 units
    Scoring(normalized=False)      y[w] itself, no softmax sum: for self-normalized nets (--loss sampled, nce)

The bf16 product (fp32 accumulation, its log-sum-exp read straight into fp32) was 3x faster than the older fp32
path on CPUs with bf16 units (the exact fp32 path of today is as fast on the AMX host: benchmarks/exact_scoring.py)
and within ~1e-4 of the fp32 perplexity on Brown (MLP1 after one epoch: valid 360.367 in 11.2 s, against 360.339
in 37.5 s in fp32). Training uses it for its per-epoch validation, which otherwise
costs as much as a sampled-softmax epoch, when the hardware has bf16 units (`run_config.bf16_is_fast`;
without them the bf16 product is several times slower than fp32). `nnlm eval` and every reported figure
stay fp32 unless `--precision bf16` is asked. Unnormalized scores are approximate, meant for self-normalized
nets (log Z near 0: `NeuralLM.log_partition`): those "probabilities" do not sum to 1 exactly.

An adapter (NeuralLM, ClassNeuralLM, EnergyLM) takes its Scoring in its constructor (`load_neural(...,
scoring=)`, `language_model(..., scoring=)`) and keeps it for its life; `lm.with_scoring(s)` gives another
adapter over the same net (the weights shared, not copied) that scores the other way. An adapter refuses a
Scoring it has no meaning for (EnergyLM bf16, ClassNeuralLM unnormalized). Whatever the Scoring, a long pass
(`long_pass`) may score a normalized request exactly from the direct connections' per-position tables
(nnlm.neural.lm.direct_tables): a pass-level speed-up, not a choice of numbers. `log_prob_and_log_z` returns
log Z beside log P when the pass computed it exactly anyway (the fp32 path, the tables), so `nnlm eval`
reads valid's log Z from its perplexity pass instead of a second one.

Below are the NPLM output layer's kernels, each over contexts in blocks (memory bounded however long the
text, the thread governor re-checked per block), float64 out: `exact_scores` (fp32, one product per slice
of V), `softmax_scores` (bf16 product, or fp32 for a net whose y is b alone) and `target_scores` (y[target]).
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from nnlm import threads
from nnlm.errors import NnlmError

__all__ = ["BF16", "EVAL_ROWS", "EXACT", "MIN_SLICED_ROWS", "PRECISIONS", "SCORE_BYTES", "UNNORMALIZED", "Scoring",
           "exact_scores", "score_rows", "softmax_scores", "target_scores"]

PRECISIONS = ("fp32", "bf16")
EVAL_ROWS = 256  # contexts per forward pass of the bf16, unnormalized and distribution paths
SCORE_BYTES = 64 << 20  # exact fp32 scoring of a |V| of one slice: the reused [rows, |V|] buffer (SCORE_BYTES / 4|V|):
# larger blocks keep the output product near the CPU's large-matrix rate; one buffer for the whole call costs
# no page faults (a fresh 73 MB tensor per block was mmap'd and faulted anew every time)


MIN_SLICED_ROWS = 512  # a |V| of more than one slice: at least this many contexts a block (the slices' buffer is
# V_SLICE x rows, 1 MB, whatever |V|): at |V| = 104k, K = 291, SCORE_BYTES' 161 rows ran the pass at 1,275 (one
# thread) and 1,814 tokens/s (two), 512 rows at 1,461 and 2,648 (benchmarks/blas_products.py, numpy's products)


def score_rows(vocab_size: int) -> int:
    """Rows per block of exact scoring: a [rows, |V|] fp32 buffer fills SCORE_BYTES (at least 16 rows), and a |V|
    of more than one slice, whose buffer is V_SLICE x rows, takes at least MIN_SLICED_ROWS (a narrow block keeps
    the product below the CPU's large-matrix rate; up to |V| = 32,768 the first rule gives more)."""
    rows = max(16, SCORE_BYTES // (4 * vocab_size))
    return max(rows, MIN_SLICED_ROWS) if vocab_size > V_SLICE else rows



@dataclass(frozen=True)
class Scoring:
    """How log P(w | context) is computed (module docstring). `precision` is that of the softmax's |V|-wide
    product; an unnormalized Scoring reads y[w] from the target's own rows whatever its precision."""

    precision: str = "fp32"
    normalized: bool = True

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise NnlmError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")

    @property
    def exact(self) -> bool:
        """Normalized over V in fp32: the numbers every reported figure uses."""
        return self.normalized and self.precision == "fp32"


EXACT = Scoring()
BF16 = Scoring(precision="bf16")
UNNORMALIZED = Scoring(normalized=False)

SHIFT_EVERY_COLUMN = False  # True: the exact path subtracts each column's max before exp (the older path,
# kept for benchmarks/exact_scoring.py), instead of only in the columns whose sum leaves SAFE_SUM
V_SLICE = 512  # exact path: output rows per product, so that exp and the sum read a slice still in the cache
# (512 x ~900 contexts x 4 bytes = 1.8 MB) instead of a 64 MB block from memory twice; >= |V|: all at once.
# Brown MLP1, one thread, tokens per CPU-second: 256 rows 13.1k, 512 12.6k, 1024 12.5k, 4096 11.4k, all 10.6k


def exact_scores(net, weights: torch.Tensor, ctx: torch.Tensor, targets: torch.Tensor | None, table: torch.Tensor,
                 rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(log P(target | context), log Z), float64 [N] each, by the exact fp32 path; targets=None gives
    (log Z, None). `weights` = [W, U, b] as one [|V|, K + 1] matrix, `rows` contexts per block.

    y^T = [W, U, b] [x, tanh(d + Hx), 1]^T as one product per V_SLICE output rows, slice x rows -- the
    orientation in which the CPU's GEMM runs at its large-matrix rate (rows x |V| ran ~1/3 slower at
    MLP1's K = 290), b folded in as a column so no pass copies it into the buffer first -- into one buffer
    reused for every block; each slice is exponentiated in place and summed into log Z while it is still
    in the cache, as direct_tables.scores does without the max: columns whose sum leaves SAFE_SUM (a logit
    above ~69, or all below ~-69) are computed again with the max subtracted; elsewhere every term is
    accurate to fp32 rounding. The target's logit is its own dot product. (The whole |V| x rows product
    then max, subtract, exp and sum from memory, `SHIFT_EVERY_COLUMN`, scored a Brown MLP1 pass 1.5x
    slower: docs/performance.md, "Scoring: neural nets, exact".) The same formula as `logits_from_features`, its
    products summed in one (fp32 rounding)."""
    def operands(lo: int, hi: int) -> list[torch.Tensor]:
        return net.output_operands_from_features(net.embed(ctx[lo:hi], table))[0]

    return exact_pass(weights, operands, len(ctx), targets, rows)


def exact_pass(weights: torch.Tensor, operands: Callable[[int, int], list[torch.Tensor]], n: int,
               targets: torch.Tensor | None, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    """`exact_scores`' pass over n positions, `rows` a block: operands(lo, hi) gives the block's zs (y = b + sum_j
    zs[j] ws[j]^T, `weights` = [ws..., b] side by side); each block scored by `exact_block`. Every net whose
    output is such a product scores its exact fp32 pass here: the feed-forward nets from their contexts, the
    recurrent net from its cell's outputs."""
    v = len(weights)
    out = torch.empty(n, dtype=torch.float64)
    log_z = None if targets is None else torch.empty(n, dtype=torch.float64)
    width = v if v <= V_SLICE or SHIFT_EVERY_COLUMN else V_SLICE  # the rows of y a block holds at once
    flat = torch.empty(width * min(rows, n), dtype=weights.dtype, device=weights.device)
    ones = torch.ones(min(rows, n), 1, dtype=weights.dtype, device=weights.device)
    sums = nullcontext()  # a |V| of one slice: exact_block's single product
    if n > 0 and v > V_SLICE and not SHIFT_EVERY_COLUMN:  # (imported here: a small |V| never needs it)
        from nnlm.neural.lm import exact_product

        sums = exact_product.slice_sums(weights, rows, V_SLICE, flat)
    with sums as slice_sums:
        for lo in range(0, n, rows):
            threads.check()
            zs = operands(lo, lo + rows)
            z = torch.cat([*zs, ones[:len(zs[0])]], dim=1)
            scores, lse = exact_block(weights, z, None if targets is None else targets[lo:lo + rows], flat,
                                      slice_sums)
            out[lo:lo + len(z)] = scores.double().cpu()
            if log_z is not None:  # log Z comes free with log P
                log_z[lo:lo + len(z)] = lse.double().cpu()
    return out.numpy(), None if log_z is None else log_z.numpy()


def exact_block(weights: torch.Tensor, z: torch.Tensor, targets: torch.Tensor | None, flat: torch.Tensor,
                slice_sums: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log P(targets), log Z) [rows] of one block of output operands z [rows, K + 1] (a column of ones last,
    for b) against `weights` [|V|, K + 1], by `exact_scores`' rule; with targets None, (log Z, log Z). `flat`:
    a buffer of at least |V| x rows (or V_SLICE x rows) values, reused across blocks (`exact_pass`).
    `slice_sums(weights, z)`: sum_v exp(y) a slice of V at a time, by the library `exact_product` chose for this
    host and shape (`exact_product.slice_sums`; None where |V| is one slice)."""
    from nnlm.neural.lm.direct_tables import SAFE_SUM

    v, n = len(weights), len(z)
    picked = None
    if SHIFT_EVERY_COLUMN or v <= V_SLICE:
        y = flat[:v * n].view(v, n)  # contiguous whatever the block's length
        torch.mm(weights, z.t(), out=y)
        picked = None if targets is None else y.gather(0, targets[None, :])[0]
    if SHIFT_EVERY_COLUMN:
        top = y.amax(dim=0, keepdim=True)
        lse = y.sub_(top).exp_().sum(dim=0).log_().add_(top[0])
    else:
        if v <= V_SLICE:
            lse = y.exp_().sum(dim=0)
        else:  # the product a slice of V at a time, each slice exponentiated and summed while cached
            picked = None if targets is None else (weights[targets] * z).sum(dim=1)
            lse = slice_sums(weights, z)
        redo = ~((lse > SAFE_SUM[0]) & (lse < SAFE_SUM[1]))  # (NaN included)
        lse.log_()
        if bool(redo.any()):
            again = weights @ z[redo].t()
            top = again.amax(dim=0, keepdim=True)
            lse[redo] = again.sub_(top).exp_().sum(dim=0).log_().add_(top[0])
    return (lse if picked is None else picked - lse), lse


def softmax_scores(net, ctx: torch.Tensor, targets: torch.Tensor, table: torch.Tensor, rows: int,
                   bf16: bool) -> np.ndarray:
    """log softmax(y)[target], float64 [N], `rows` contexts per block. `bf16`: y = b + [x, a] [W, U]^T as one
    bf16 product (fp32 accumulation), its log-sum-exp read straight into fp32 (no fp32 copy of the logits);
    otherwise y = logits_from_features(x) in the net's dtype (a net whose y is b alone has no product)."""
    out = np.empty(len(targets), dtype=np.float64)
    weights16 = None
    for lo in range(0, len(targets), rows):
        threads.check()
        x = net.embed(ctx[lo:lo + rows], table)
        if bf16:
            zs, ws = net.output_operands_from_features(x)
            if weights16 is None:  # cast once per call, not per block
                weights16 = torch.cat(ws, dim=1).to(torch.bfloat16), net.b.to(torch.bfloat16)
            y = torch.addmm(weights16[1], torch.cat(zs, dim=1).to(torch.bfloat16), weights16[0].t())
            lse = torch.empty(len(y), dtype=torch.float32, device=y.device)
            torch.logsumexp(y, dim=1, out=lse)
        else:
            y = net.logits_from_features(x)
            lse = torch.logsumexp(y, dim=1)
        picked = y.gather(1, targets[lo:lo + rows, None])[:, 0].to(lse.dtype)
        out[lo:lo + len(picked)] = (picked - lse).double().cpu().numpy()
    return out


def target_scores(net, ctx: torch.Tensor, targets: torch.Tensor, table: torch.Tensor, rows: int) -> np.ndarray:
    """y[target] itself, float64 [N], from the target's rows only (`net.target_logits`: no |V|-wide work, no
    softmax sum), `rows` contexts per block: the unnormalized Scoring of every net that has one score per word."""
    out = np.empty(len(targets), dtype=np.float64)
    for lo in range(0, len(targets), rows):
        threads.check()
        x = net.embed(ctx[lo:lo + rows], table)
        out[lo:lo + len(x)] = net.target_logits(x, targets[lo:lo + rows]).double().cpu().numpy()
    return out
