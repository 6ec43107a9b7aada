"""The class-factored output layer: the NPLM with P(w | h) = P(class(w) | h) * P(w | class(w), h).

Each factor is an exact softmax with the paper's structure over the same x and hidden output a:

    class scores  y_c = b'_c + W'_c x + U'_c a          (K rows: class_b, class_W, class_U)
    word scores   y_w = b_w + W_w x + U_w a             (|V| rows: b, W, U)
    P(w | h) = softmax_K(y')[class(w)] * softmax over the words of class(w) of y [w]

so a word costs K + |class(w)| rows instead of |V| (about 2 sqrt(|V|) with K = sqrt(|V|)). The word
rows b, W, U are stored class by class (row r holds the word `word_of_row[r]`): the words of a class
are a contiguous block, used as a view with no gather. The class map `word_class` is a buffer of the
net, so it is saved in model.safetensors and checkpoints with the weights and loaded with them.

Training and exact scoring group the tokens of a batch by class (one sort) and run one product per
class present -- a loop over classes, never over tokens; padding every class to the largest one was
measured slower (benchmarks/class_output.py). `forward` returns log P over all of V in word-id order
(the whole distribution, used by `distribution` and the paper's feature vector for unknown words):
softmax(forward(.)) is the model's distribution, and log Z = 0.
"""
from __future__ import annotations

from itertools import accumulate

import numpy as np
import torch
from torch import nn

from nnlm.errors import NnlmError
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.normalized_output import NormalizedOutput


class ClassNPLM(NormalizedOutput, NPLM):
    """The NPLM with a class-factored output layer (module docstring). Its classes start as
    contiguous blocks of ids, until `set_classes` puts the run's clustering in (before training)."""

    layer_name = "a class-factored output layer"

    def __init__(self, config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        if not config.output_classes:
            raise NnlmError("ClassNPLM needs a config with output_classes > 0")
        super().__init__(config, dropout_x, dropout_h)
        k = config.output_classes
        self.class_b = nn.Parameter(torch.zeros(k))
        self.class_W = nn.Parameter(torch.empty(k, config.input_size)) if config.direct else None
        self.class_U = nn.Parameter(torch.empty(k, config.hidden)) if config.hidden > 0 else None
        self._reset_class_parameters()
        self.register_buffer("word_class", torch.zeros(config.vocab_size, dtype=torch.int64))
        self.register_buffer("row_of_word", torch.zeros(config.vocab_size, dtype=torch.int64), persistent=False)
        self.register_buffer("class_of_row", torch.zeros(config.vocab_size, dtype=torch.int64), persistent=False)
        self.register_buffer("class_start", torch.zeros(k + 1, dtype=torch.int64), persistent=False)
        self.bounds: list[int] = []  # class_start as Python ints, for the per-class loop
        self.register_load_state_dict_post_hook(_layout_after_load)
        self.set_classes(torch.arange(config.vocab_size) * k // config.vocab_size)

    def _reset_class_parameters(self) -> None:
        with torch.no_grad():
            self.class_b.zero_()
            for weight in (self.class_W, self.class_U):
                if weight is not None:
                    bound = 1.0 / np.sqrt(weight.shape[1])
                    weight.uniform_(-bound, bound)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if hasattr(self, "class_b"):  # (NPLM.__init__ calls this before the class rows exist)
            self._reset_class_parameters()

    def decayed_parameters(self) -> list[nn.Parameter]:
        return super().decayed_parameters() + [p for p in (self.class_W, self.class_U) if p is not None]

    def bias_parameters(self) -> list[nn.Parameter]:
        return super().bias_parameters() + [self.class_b]

    # --- the class map ---------------------------------------------------------------------------

    @torch.no_grad()
    def set_classes(self, classes: np.ndarray | torch.Tensor) -> None:
        """Put in the class of every word (a fresh net's: the word rows are re-labelled, not moved)."""
        self.word_class.copy_(torch.as_tensor(np.asarray(classes), dtype=torch.int64))
        self._refresh_layout()

    @torch.no_grad()
    def _refresh_layout(self) -> None:
        """The row layout from `word_class`: words grouped by class, by id within a class."""
        v, k = self.config.vocab_size, self.config.output_classes
        classes = self.word_class
        if classes.device.type == "meta":
            return
        if len(classes) != v or int(classes.min()) < 0 or int(classes.max()) >= k:
            raise NnlmError(f"the model's word classes must be {v} class ids from 0 to {k - 1}")
        sizes = torch.bincount(classes, minlength=k)
        if int(sizes.min()) == 0:
            raise NnlmError(f"the model's word classes leave {int((sizes == 0).sum())} of its {k} classes empty")
        word_of_row = torch.argsort(classes, stable=True)
        self.row_of_word[word_of_row] = torch.arange(v, device=classes.device)
        self.class_of_row.copy_(classes[word_of_row])
        self.class_start[1:] = torch.cumsum(sizes, 0)
        self.bounds = self.class_start.tolist()

    # --- the two factors -------------------------------------------------------------------------

    def class_logits(self, zs: list[torch.Tensor], n: int) -> torch.Tensor:
        """y' = class_b + class_W x + class_U a, [n, K], from the operands [x if W, a if H]."""
        y = self.class_b.expand(n, -1)
        for z, w in zip(zs, self.class_weights(), strict=True):
            y = torch.addmm(y, z, w.t())
        return y

    def class_weights(self) -> list[torch.Tensor]:
        return [w for w in (self.class_W, self.class_U) if w is not None]

    def word_weights(self) -> list[torch.Tensor]:
        return [w for w in (self.W, self.U) if w is not None]

    def within_class_log_probs(self, zs: list[torch.Tensor], targets: torch.Tensor,
                               rows_only: ClassRowLoss | None = None) -> torch.Tensor:
        """log P(target | class(target), h), [N] in the tokens' order: the tokens sorted by class, one
        product [n_c, K_in] x [K_in, |class c|] per class present (`_WithinClass`).

        `rows_only` (a `ClassRowLoss`): b, W, U take no gradient through autograd; instead (name, rows,
        holder) is appended to its `touched` for each, rows the word rows of the classes present, and
        backward leaves the gradient of just those rows in holder.grad ([rows, ...], for RowAdam):
        a dense |V|-row gradient would cost as much as the dense update it spares."""
        n = len(targets)
        if n == 0:
            return torch.zeros(0, dtype=self.b.dtype, device=self.b.device)
        classes = self.word_class[targets]
        order = torch.argsort(classes, stable=True)
        present, counts = torch.unique_consecutive(classes[order], return_counts=True)
        grouped = [z.index_select(0, order) for z in zs]
        local = self.row_of_word[targets[order]] - self.class_start[classes[order]]
        groups = [(self.bounds[c], self.bounds[c + 1], count) for c, count in zip(present.tolist(), counts.tolist(),
                                                                                   strict=True)]
        b, weights, sink = self.b, self.word_weights(), None
        if rows_only is not None:
            b, weights = b.detach(), [w.detach() for w in weights]
            rows = self.class_rows(present)
            names = ["b"] + [name for name in ("W", "U") if getattr(self, name) is not None]
            if rows_only.before_read is not None:
                for name in names:
                    rows_only.before_read(name, rows)
            sink = [rows_only.holder(name) for name in names]
            rows_only.touched.extend((name, rows, holder) for name, holder in zip(names, sink, strict=True))
        operands = [t for pair in zip(grouped, weights, strict=True) for t in pair]
        sorted_log_probs = _WithinClass.apply(groups, local, sink, b, *operands)
        in_order = torch.empty_like(order)
        in_order[order] = torch.arange(n, device=order.device)
        return sorted_log_probs.index_select(0, in_order)

    def class_rows(self, classes: torch.Tensor) -> torch.Tensor:
        """The word rows of `classes` (ascending class ids), block after block: [sum of their sizes]."""
        starts, ends = self.class_start[classes], self.class_start[classes + 1]
        sizes = ends - starts
        before = torch.cumsum(sizes, 0) - sizes  # where each block begins in the result
        return torch.arange(int(sizes.sum()), device=classes.device) + torch.repeat_interleave(starts - before, sizes)

    def target_log_probs_from_features(self, x: torch.Tensor, targets: torch.Tensor,
                                       rows_only: ClassRowLoss | None = None) -> torch.Tensor:
        """log P(target | h) [N] (dropout when training): the class factor plus the within-class one
        (`rows_only`: see `within_class_log_probs`)."""
        zs, _ = self.output_operands_from_features(x)
        class_lp = torch.log_softmax(self.class_logits(zs, len(x)), dim=1)
        picked = class_lp.gather(1, self.word_class[targets][:, None])[:, 0]
        return picked + self.within_class_log_probs(zs, targets, rows_only)

    def log_probs_from_features(self, x: torch.Tensor) -> torch.Tensor:
        """log P(w | h) for every word, [N, |V|] in word-id order: the |V| word scores, a log-sum-exp
        per class (scatter over the class of each row), the class log-probabilities added."""
        zs, _ = self.output_operands_from_features(x)
        y = self.b.expand(len(x), -1)
        for z, w in zip(zs, self.word_weights(), strict=True):
            y = torch.addmm(y, z, w.t())
        n, k = len(x), self.config.output_classes
        segments = self.class_of_row.expand(n, -1)
        top = torch.full((n, k), -torch.inf, dtype=y.dtype, device=y.device)
        top = top.scatter_reduce(1, segments, y.detach(), "amax").index_select(1, self.class_of_row)
        sums = torch.zeros((n, k), dtype=y.dtype, device=y.device).scatter_add(1, segments, (y - top).exp())
        class_lp = torch.log_softmax(self.class_logits(zs, n), dim=1) - sums.log()
        log_probs = y - top + class_lp.index_select(1, self.class_of_row)
        return log_probs.index_select(1, self.row_of_word)


def _layout_after_load(net: ClassNPLM, _keys) -> None:
    """After load_state_dict: the row layout of the class map just loaded (a function, so the net pickles)."""
    net._refresh_layout()


def class_output_loss(net: ClassNPLM, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean -log P(target | context) of a batch: both exact softmaxes, fp32 (their products are small)."""
    return -net.target_log_probs_from_features(net.features(contexts), targets).mean()


def within_class_log_probs_padded(net: ClassNPLM, zs: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """`ClassNPLM.within_class_log_probs` with every class padded to the largest: one batched product
    [N, 1, K_in] x [N, K_in, S_max] over each token's gathered class rows, the padding masked. No loop,
    but S_max / (mean class size) times the work and a [N, S_max, K_in] gather; the benchmark compares."""
    classes = net.word_class[targets]
    sizes = net.class_start[1:] - net.class_start[:-1]
    widest = int(sizes.max())
    offsets = torch.arange(widest, device=targets.device)
    rows = (net.class_start[classes][:, None] + offsets).clamp_(max=net.config.vocab_size - 1)
    y = net.b[rows]
    for z, w in zip(zs, net.word_weights(), strict=True):
        y = y + torch.bmm(w[rows], z[:, :, None])[:, :, 0]
    y = y.masked_fill(offsets >= sizes[classes][:, None], -torch.inf)
    picked = y.gather(1, (net.row_of_word[targets] - net.class_start[classes])[:, None])[:, 0]
    return picked - torch.logsumexp(y, dim=1)


class RowGrad:
    """Where `_WithinClass`'s backward leaves the gradient of a parameter's touched rows: `.grad`, read
    by RowAdam as it reads a gathered leaf's (nnlm.neural.net.sampled). Its storage, as large as the
    parameter, is kept from batch to batch (`take`): a fresh [rows, K_in] tensor per step cost more in
    page faults (the kernel zeroing new pages, ~35 ms of an AP-net step) than the products filling it."""

    __slots__ = ("grad", "_store")

    def __init__(self) -> None:
        self.grad: torch.Tensor | None = None
        self._store: torch.Tensor | None = None

    def take(self, rows: int, like: torch.Tensor) -> torch.Tensor:
        """`.grad` set to an uninitialized [rows, ...] tensor in the kept storage (made like the parameter
        `like` when missing or of another shape, dtype or device), and returned."""
        store = self._store
        if store is None or store.shape != like.shape or store.dtype != like.dtype or store.device != like.device:
            store = self._store = torch.empty_like(like, memory_format=torch.contiguous_format)
        self.grad = store[:rows]
        return self.grad


class ClassRowLoss:
    """`class_output_loss` for RowAdam (the row-wise, lazy Adam of nnlm.neural.net.sampled): the same loss,
    but its gradient reaches only the rows the batch touched, recorded in `touched` as (parameter,
    rows, holder of their gradient) like SampledLoss's -- the C rows of the context words (gathered
    as a leaf) and the b, W, U rows of the classes among the targets (`within_class_log_probs`) -- so
    that neither backward nor the update costs |V| rows. The class rows and H, d get their gradient
    through autograd, for RowAdam's dense part."""

    def __init__(self) -> None:
        self.touched: list[tuple[str, torch.Tensor, object]] = []
        self.holders: dict[str, RowGrad] = {}  # b, W, U: their storage is reused by every batch
        self.before_read = None  # set by RowAdam's exact rule (nnlm.neural.net.sampled.TouchesRows)

    def holder(self, name: str) -> RowGrad:
        """The gradient holder of word-row parameter `name` (b, W or U), the same for every batch."""
        return self.holders.setdefault(name, RowGrad())

    def __call__(self, net: ClassNPLM, contexts: torch.Tensor, targets: torch.Tensor,
                 bf16: bool = False) -> torch.Tensor:
        """Mean -log P(target | context) of the batch (bf16 is ignored: the class-factored loss is fp32)."""
        self.touched = []
        words, where = torch.unique(contexts, return_inverse=True)
        if self.before_read is not None:
            self.before_read("C", words)
        leaf = net.C.detach().index_select(0, words).requires_grad_()
        self.touched.append(("C", words, leaf))
        x = net.context_input(leaf.index_select(0, where.flatten()).view(*contexts.shape, -1))
        return -net.target_log_probs_from_features(x, targets, self).mean()


class _WithinClass(torch.autograd.Function):
    """log softmax over each token's class block, at its target: tokens sorted by class, `groups` the
    (first row, end row, tokens) of each class present, `local` each target's row within its block,
    operands (z_1, w_1, z_2, w_2, ...) with the scores y = b + sum_j z_j w_j^T.

    Written out rather than left to autograd: per class, autograd's backward of a block of w (a slice,
    or a split) and of the target's gather each fill a zero tensor; here the gradient of each weight
    matrix is one zero tensor that the blocks write into, and a block's score gradient is its softmax
    with 1 subtracted at the target, as in nnlm.neural.net.softmax_loss.

    `sink` (RowGrad holders for b, w_1, w_2, ..., or None): the gradients of b and the w_j go there,
    holding the rows of the present classes only, block after block (`ClassNPLM.class_rows`' order),
    instead of back to autograd as |V|-row tensors."""

    @staticmethod
    def forward(ctx, groups: list[tuple[int, int, int]], local: torch.Tensor, sink: list[RowGrad] | None,
                b: torch.Tensor, *operands: torch.Tensor) -> torch.Tensor:
        zs, ws = operands[0::2], operands[1::2]
        out = torch.empty(len(local), dtype=b.dtype, device=b.device)
        probs, start = [], 0
        for lo, hi, count in groups:
            y = b[lo:hi].expand(count, -1)
            for z, w in zip(zs, ws, strict=True):
                y = torch.addmm(y, z[start:start + count], w[lo:hi].t())
            log_p = torch.log_softmax(y, dim=1)
            out[start:start + count] = log_p.gather(1, local[start:start + count, None])[:, 0]
            probs.append(log_p.exp_())
            start += count
        ctx.groups, ctx.probs, ctx.sink = groups, probs, sink
        ctx.save_for_backward(local, b, *operands)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        local, b, *operands = ctx.saved_tensors
        zs, ws = operands[0::2], operands[1::2]
        grad_zs = [torch.empty_like(z) if ctx.needs_input_grad[4 + 2 * j] else None for j, z in enumerate(zs)]
        (grad_b, *grad_ws), places = _WithinClass.weight_grads(ctx, b, ws)
        start = 0
        for (lo, hi, count), p, at in zip(ctx.groups, ctx.probs, places, strict=True):
            mine, block = slice(start, start + count), slice(at, at + hi - lo)
            g = p * -grad_out[mine, None]  # d out / d y = onehot(target) - p, times the incoming gradient
            g[torch.arange(count, device=g.device), local[mine]] += grad_out[mine]
            if grad_b is not None:
                grad_b[block] = g.sum(0)
            for j, (z, w) in enumerate(zip(zs, ws, strict=True)):
                if grad_zs[j] is not None:
                    torch.mm(g, w[lo:hi], out=grad_zs[j][mine])
                if grad_ws[j] is not None:
                    torch.mm(g.t(), z[mine], out=grad_ws[j][block])
            start += count
        if ctx.sink is not None:  # (the holders have them)
            grad_b, grad_ws = None, [None] * len(ws)
        grads = [t for pair in zip(grad_zs, grad_ws, strict=True) for t in pair]
        return None, None, None, grad_b, *grads

    @staticmethod
    def weight_grads(ctx, b: torch.Tensor, ws: list[torch.Tensor]) -> tuple[list, list[int]]:
        """The tensors backward writes the gradients of b and the w_j into (None where not wanted), and
        the row where each class block goes in them: |V|-row tensors, zero in the rows of the classes no
        token of the batch is in (for autograd), or the sink's compact rows, block after block."""
        if ctx.sink is not None:
            places = list(accumulate((hi - lo for lo, hi, _ in ctx.groups), initial=0))
            return [holder.take(places[-1], t) for holder, t in zip(ctx.sink, (b, *ws), strict=True)], places[:-1]
        need = ctx.needs_input_grad
        wanted = [need[3], *(need[5 + 2 * j] for j in range(len(ws)))]
        grads = [torch.empty_like(t) if want else None for t, want in zip((b, *ws), wanted, strict=True)]
        for grad in grads:
            if grad is not None:
                for lo, hi in _gaps(ctx.groups, len(b)):
                    grad[lo:hi] = 0
        return grads, [lo for lo, _, _ in ctx.groups]


def _gaps(groups: list[tuple[int, int, int]], rows: int) -> list[tuple[int, int]]:
    """The row ranges outside the (first row, end row, tokens) blocks of `groups` (in row order)."""
    gaps, end = [], 0
    for lo, hi, _ in groups:
        if lo > end:
            gaps.append((end, lo))
        end = hi
    return gaps + ([(end, rows)] if end < rows else [])
