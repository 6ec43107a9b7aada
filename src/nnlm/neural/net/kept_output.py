"""The paper's SGD in one CPU process with the output layer kept side by side (`--loss full --recipe paper`;
also in Hogwild workers, on one copy in shared memory: `share_kept_layout`).

Why: a full-softmax step is three [B, K] x [K, |V|] products and the passes over [B, |V|] and over the
|V| x K output weights around them; with bf16 products (AMX, AVX-512 BF16) the products are no longer
what the step waits on. The plain paths cast the fp32 W and U to bf16 for every forward product (bf16)
or multiply them one by one and add b (fp32), cast the gradients back, update each weight in two
passes (decay, then the step), sum [B, |V|] for b's gradient, fill and add a dense |V| x m gradient of
C, and allocate their [B, |V|] tensors afresh each step: MLP1's bf16 step ran at 30% of the bf16
roofline on the AMX host (the plain path measured before this layer was written). Here:

- `KeptOutput` holds [W, U, b] side by side in the compute dtype (bf16, or fp32) for as long as
  training runs, padded to a width the matrix units like; the products read it directly (no cast, no
  copy), and b rides in the product as the column that multiplies a 1 (no bias add, no sum over [B, |V|]);
- the logits (softmax in place, then their gradient in place) and z's gradient go to buffers kept
  across steps; in bf16 the gradient of [W, U, b] too;
- bf16: `sgd_keep_bf16` applies the paper's update to the fp32 masters from the product's bf16 gradient
  and writes the new copy in the same pass (12 bytes a weight); fp32: W, U and b become views into the
  copy, and the update happens inside the gradient's product (a GEMM with beta, in place on the copy):
  no pass of its own at all;
- C's gradient is the rows the batch touched (`NPLM.embed(..., sparse=True)`), which PaperSGD adds
  after decaying C;
- a run whose rows are pulled towards their classes (--init-features exchange) has W's and U's pull
  folded into the update (`pull_towards`): the masters are moved by step / shrink x the pull's gradient
  just before the update, which then decays and steps them -- the plain path's arithmetic up to rounding,
  with no pass over the copy of its own (`PaperSGD` does the same for C).

The arithmetic is the plain path's up to rounding: b's gradient comes out of the product (in bf16 it is
rounded like W's, where the plain path summed it in fp32), C's rows are added one by one, and the loss is
-log of the softmax rather than log-softmax. The masters are decayed, then stepped, in fp32; a bf16 copy
is the master rounded to nearest-even, as a cast would round it. In bf16 a change to a master made by
anything else (a checkpoint loaded, a test that edits a weight) bumps the tensor's version counter, and
the next forward pass copies the masters again (the kernel writes through NumPy views, which do not); in
fp32 such a change is a change to the copy, whose columns the parameters are.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numba
import numpy as np
import torch

from nnlm.neural.net.model import NPLM
from nnlm.neural.net.softmax_loss import logit_gradient_, mean_nll

if TYPE_CHECKING:  # (a type only)
    from nnlm.neural.net.feature_init import ClassPull


@numba.njit(cache=True, nogil=True, error_model="numpy")
def sgd_keep_bf16(p, g16, w16, first, shrink, step):
    """p <- p shrink + step g (fp32; g the bf16 gradient, as uint16 bits) and w16 <- bf16(p), rounded to
    nearest-even (a NaN stays a quiet NaN), for every cell of p [R, D] and of columns first .. first + D
    of g16, w16 [R, K]. The inner loop runs over one row's contiguous slices, in SIMD lanes: on column
    views of g16, w16 (or with 2-D indexing) it did not, and took 4x as long."""
    rows, cols = p.shape
    for i in range(rows):
        pr, gr, wr = p[i], g16[i, first:first + cols], w16[i, first:first + cols]
        for j in range(cols):
            grad = np.uint32(np.uint32(gr[j]) << np.uint32(16)).view(np.float32)
            x = np.float32(np.float32(pr[j] * shrink) + np.float32(step * grad))
            pr[j] = x
            bits = x.view(np.uint32)
            rounded = np.uint32(bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            wr[j] = np.uint16(0x7FC0) if x != x else np.uint16(rounded)


def _bits(t: torch.Tensor) -> np.ndarray:
    """A bf16 CPU tensor's cells as their uint16 bits, a NumPy view of the same memory."""
    return t.view(torch.int16).numpy().view(np.uint16)


# the kept layer's width is a multiple of this: AMX multiplies bf16 in tiles 32 wide (MLP1's three
# products: 7.6 ms at width 320, 9.2 ms at its 290); fp32 products run best at a multiple of 8 (41.5 ms at
# 296; 45.9 at 320) -- AMX host, one thread
TILE = {torch.bfloat16: 32, torch.float32: 8}


class KeptOutput:
    """[W, U, b] side by side in `dtype` (b as one more column, zeros after it up to a multiple of TILE),
    kept in step with the fp32 master weights (in fp32, *as* them: the parameters become its columns).

    With z' = [z, 1, 0 ...] the logits are z' copy^T: one product, the bias inside it, and b's gradient
    the column of the backward product that multiplies the 1s (no sum over [B, |V|]). The padding costs
    no result (zeros times zeros) and buys speed (TILE).

    `weights()` is the [|V|, width] operand of the loss's products, current whatever else changed a
    master; `take_gradient` receives the backward pass's factors of the copy's gradient; `step` is the
    paper's update (decay on W and U, not on b): bf16, a pass over the masters that writes the copy too;
    fp32, the gradient's product itself, accumulated into the copy."""

    def __init__(self, decayed: list[torch.Tensor], bias: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> None:
        masters = [*decayed, bias]
        if any(m.device.type != "cpu" or m.dtype != torch.float32 for m in masters):
            raise ValueError("KeptOutput keeps fp32 CPU weights")
        self.decayed, self.bias, self.masters = decayed, bias, masters
        self.inputs = sum(m.shape[1] for m in decayed)  # K: the width of z
        if dtype not in TILE:
            raise ValueError("KeptOutput keeps a bf16 or an fp32 copy")
        rows, width = bias.shape[0], -(-(self.inputs + 1) // TILE[dtype]) * TILE[dtype]
        self.dtype = dtype
        self.first, lo = [], 0
        for m in decayed:
            self.first.append(lo)
            lo += m.shape[1]
        self.first.append(lo)  # b's column
        self.copy = torch.zeros(rows, width, dtype=dtype)
        # bf16: the backward product's gradient, for the kernel; fp32: the product's operands, for the step's
        # fused product (see `take_gradient`)
        self.grad = torch.zeros(rows, width, dtype=dtype) if dtype == torch.bfloat16 else None
        self.pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self.versions: list[int] | None = None
        self.class_pull: ClassPull | None = None  # W's and U's rows pulled towards their classes (`pull_towards`)
        self.pulled: list[torch.Tensor] = []
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # logits [B, |V|] and grad z' [B, width]

    @classmethod
    def of(cls, net: NPLM, dtype: torch.dtype) -> KeptOutput:
        """The kept layer of `net`'s word output layer: its W and U (those it has) and b."""
        return cls([w for w in (net.W, net.U) if w is not None], net.b, dtype)

    def adopt(self, shared: torch.Tensor) -> None:
        """Take `shared` as the copy: the one a Hogwild parent laid out in shared memory (`share_kept_layout`),
        which every worker then updates in place, lock-free (bf16: with the fp32 masters, also shared; fp32:
        the masters must already be its columns, as the parent made them). Before the first step."""
        if shared.shape != self.copy.shape or shared.dtype != self.dtype:
            raise ValueError(f"KeptOutput.adopt: a {tuple(shared.shape)} {shared.dtype} copy for a "
                             f"{tuple(self.copy.shape)} {self.dtype} layer")
        self.copy, self.versions = shared, None
        if self.dtype == torch.float32 and not all(self._is_copy(m, first)
                                                   for m, first in zip(self.masters, self.first, strict=True)):
            raise ValueError("KeptOutput.adopt: the fp32 masters are not the shared copy's columns")

    def batch_buffers(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's [batch, |V|] logits (softmax in place, then the logits' gradient in place) and its
        [batch, width] gradient of z', allocated once: a fresh 9 MB tensor a step is fresh pages a step,
        which the kernel then faults in; in MLP1's step that doubled the time of the products and the softmax."""
        if self.buffers is None or len(self.buffers[0]) < batch:
            self.buffers = (torch.empty(batch, len(self.copy), dtype=self.dtype),
                            torch.empty(batch, self.copy.shape[1], dtype=self.dtype))
        return self.buffers[0][:batch], self.buffers[1][:batch]

    @staticmethod
    def _matrix(m: torch.Tensor) -> torch.Tensor:
        return m.detach().reshape(len(m), -1)  # (b as one column)

    def _column_view(self, m: torch.Tensor, first: int) -> torch.Tensor:
        """m's place in the copy, shaped as m."""
        view = self.copy[:, first:first + self._matrix(m).shape[1]]
        return view[:, 0] if m.dim() == 1 else view

    def _is_copy(self, m: torch.Tensor, first: int) -> bool:
        view = self._column_view(m, first)
        return m.data_ptr() == view.data_ptr() and m.stride() == view.stride()

    def weights(self) -> torch.Tensor:
        """The copy, current: bf16, copied again from the masters if something else changed one (their version
        counters moved); fp32, the masters *are* columns of the copy (each parameter's data a view into it,
        so no pass copies them back after an update), re-pointed if something replaced a parameter's data."""
        if self.dtype == torch.float32:
            with torch.no_grad():
                for m, first in zip(self.masters, self.first, strict=True):
                    if not self._is_copy(m, first):
                        view = self._column_view(m, first)
                        view.copy_(m.detach())
                        m.data = view
            return self.copy
        if self.versions != [m._version for m in self.masters]:
            with torch.no_grad():
                for m, first in zip(self.masters, self.first, strict=True):
                    self._column_view(m, first).copy_(m.detach())
            self.versions = [m._version for m in self.masters]
        return self.copy

    def extended(self, z: torch.Tensor) -> torch.Tensor:
        """z' = [z, 1, 0 ...] [B, width]: the operand that multiplies the copy (z is [B, K] in its dtype)."""
        out = torch.zeros(len(z), self.copy.shape[1], dtype=z.dtype)
        out[:, :self.inputs] = z
        out[:, self.inputs] = 1
        return out

    def pull_towards(self, class_pull: ClassPull, rows: list[torch.Tensor]) -> None:
        """Add `class_pull`'s gradient of those of W and U that are among `rows` (taken at the weights the
        batch's loss saw) to every update."""
        self.class_pull = class_pull
        self.pulled = [m for m in self.decayed if any(m is r for r in rows)]

    def owns(self, p: torch.Tensor) -> bool:
        return any(p is m for m in self.masters)

    def take_gradient(self, grad_logits: torch.Tensor, extended: torch.Tensor) -> None:
        """The gradient of the loss w.r.t. the copy is grad_logits^T z' (both scaled already). bf16: computed
        here, into `grad`. fp32: left to `step`, which multiplies it into the copy in the same product (a
        GEMM with beta: copy <- shrink copy + step grad_logits^T z', one pass over the copy, no gradient
        written or read back; the update pass it replaces took 6.3 ms of MLP1's 57 ms step)."""
        if self.dtype == torch.bfloat16:
            torch.mm(grad_logits.t(), extended, out=self.grad)
        self.pending = (grad_logits, extended)

    @torch.no_grad()
    def step(self, shrink: float, step: float) -> None:
        """The paper's update of every master from the last backward pass's gradient, the copy with it: W, U
        decayed by `shrink` then stepped, b stepped."""
        if self.pending is None:
            raise RuntimeError("KeptOutput.step: no gradient since the last step (backward did not run)")
        self.weights()  # (the copy is current before the update writes it)
        late = self._pull(shrink, step)
        if self.dtype == torch.bfloat16:
            grad, copy = _bits(self.grad), _bits(self.copy)
            for m, first in zip(self.masters, self.first, strict=True):
                decay = shrink if m is not self.bias else 1.0
                sgd_keep_bf16(self._matrix(m).numpy(), grad, copy, first, np.float32(decay), np.float32(step))
            if late is None:  # (the pull moved masters before the kernel, which wrote the copy from them)
                self.versions = [m._version for m in self.masters]
        else:  # (the masters are views into the copy: updating it updates them)
            grad_logits, extended = self.pending
            column = self.copy[:, self.first[-1]]
            b = column.clone()
            self.copy.addmm_(grad_logits.t(), extended, beta=shrink, alpha=step)
            column.add_(b, alpha=1.0 - shrink)  # b is not decayed: give back what beta took
        for m, pull in late or ():
            self._matrix(m).add_(pull, alpha=step)  # (bf16: the moved versions make the next pass copy again)
        self.pending = None

    def _pull(self, shrink: float, step: float) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Fold the class pull into the update about to run (`ClassPull.fold_into_update`): the pulled masters
        moved now, which the update then decays and steps; or, where shrink is not positive, the pull's
        gradients to add after the update. None when nothing is left to add."""
        if self.class_pull is None or not self.pulled:
            return None
        late = [(m, self.class_pull.fold_into_update(self._matrix(m), shrink, step)) for m in self.pulled]
        return [(m, g) for m, g in late if g is not None] or None


class _KeptSoftmaxCrossEntropy(torch.autograd.Function):
    """`softmax_loss._SoftmaxCrossEntropy` on the weights of a `KeptOutput` (b among them): the gradient
    of W, U and b is written into the KeptOutput's buffer, for its own update, not returned to autograd."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, targets: torch.Tensor, kept: KeptOutput) -> torch.Tensor:
        extended = kept.extended(z)
        probs, _ = kept.batch_buffers(len(z))
        torch.softmax(torch.mm(extended, kept.weights().t(), out=probs), dim=1, out=probs)
        ctx.save_for_backward(extended, probs, targets)
        ctx.kept = kept
        return mean_nll(probs, targets)

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        extended, probs, targets = ctx.saved_tensors
        kept = ctx.kept
        scale = logit_gradient_(probs, targets, grad_loss)
        _, grad_extended = kept.batch_buffers(len(targets))
        grad_z = torch.mm(probs, kept.copy, out=grad_extended)[:, :kept.inputs].mul(scale)
        kept.take_gradient(probs, extended.mul_(scale))
        return grad_z, None, None


class KeptLoss:
    """The batch loss of a `--loss full` run with the paper's SGD in one CPU process: the output layer's
    products on the kept [W, U, b] (`kept`, which `PaperSGD` then updates), in bf16 or fp32."""

    def __init__(self, net: NPLM, dtype: torch.dtype = torch.bfloat16) -> None:
        self.kept = KeptOutput.of(net, dtype)

    def __call__(self, net: NPLM, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool = True) -> torch.Tensor:
        x = net.embed(contexts, net.C, sparse=True)  # (C's gradient: its touched rows; PaperSGD adds them)
        zs, ws = net.output_operands_from_features(x)
        if len(ws) != len(self.kept.decayed) or any(w is not m for w, m in zip(ws, self.kept.decayed, strict=False)):
            raise RuntimeError("KeptLoss: the net's output weights are not the ones kept")
        z = torch.cat([zi.to(self.kept.dtype) for zi in zs], dim=1)
        return _KeptSoftmaxCrossEntropy.apply(z, targets, self.kept)


def share_kept_layout(net: NPLM, dtype: torch.dtype) -> torch.Tensor:
    """The kept copy of [W, U, b] in shared memory, made before a Hogwild parent hands the net to its workers,
    which each `adopt` it: every worker's update then lands in the shared weights, lock-free as the plain
    path's updates are. fp32: W, U and b become its columns (the update is the grad-w product with beta,
    in place); bf16: it is the masters rounded, and each worker's kernel writes it with the (shared) masters."""
    kept = KeptOutput.of(net, dtype)
    kept.weights()  # (fp32: the parameters become its columns; bf16: the masters copied in)
    return kept.copy.share_memory_()


def keeps_output(net: NPLM, optimizer: str, one_process: bool) -> bool:
    """Whether a full-softmax run takes the kept path: the paper's SGD, one CPU process, a word output
    layer with a product (W or U) of its own (not tied: U = C is also the input's, which autograd updates)."""
    return (one_process and optimizer == "paper-sgd" and not net.config.output_classes
            and not net.config.output_tree and not net.config.energy and not net.config.tied
            and (net.W is not None or net.U is not None) and net.b.device.type == "cpu")
