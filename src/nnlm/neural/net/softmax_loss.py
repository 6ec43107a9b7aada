"""The output layer and its softmax cross-entropy as one autograd step, for fast training.

Training spends most of its time in the output layer: logits y = b + z w^T over the whole
vocabulary, with z = [x, a] (the features, and the hidden layer's output) and w = [W, U] side by
side, so the layer is one [B, K] x [K, |V|] matrix product instead of two. In bf16 the CPU
multiplies 4-5x faster than in fp32 (AVX-512 BF16), and what is left around the products is
memory traffic over [B, |V|] tensors. This function keeps that traffic to a minimum:

- forward: the logits in the compute dtype, then softmax in place (the kernel works in fp32
  internally and rounds once); the loss of an example is -log p(target), computed in fp32 from
  that probability (bf16 keeps fp32's exponent range, so the rounding moves a loss by at most
  ~0.002 nats, never to infinity);
- backward: the gradient of the logits, (p - onehot(target)) / B, is p with one entry per row
  changed -- no second pass over [B, |V|], no fp32 copy of the logits, no log-softmax buffers.
  The 1/B scale is applied to the small [B, K] operands, not to the [B, |V|] one.

In float32 or float64 it is exact autograd of F.cross_entropy(b + z w^T) (see the tests); in
bf16 it matches the autocast formulation up to bf16 rounding of the same quantities.
"""
from __future__ import annotations

import torch


def mean_nll(probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """mean_i -log probs[i, targets[i]], computed in fp32 or wider from the (possibly bf16) probabilities."""
    picked = probs.gather(1, targets[:, None])[:, 0]
    return -picked.to(torch.promote_types(picked.dtype, torch.float32)).log().mean()


def logit_gradient_(probs: torch.Tensor, targets: torch.Tensor, grad_loss: torch.Tensor) -> torch.Tensor:
    """Turn softmax probabilities [B, |V|] into the gradient of the summed loss w.r.t. the logits, in place
    (p - onehot(target): one entry per row changed); returns the scale grad_loss / B, in probs' dtype, that
    the caller applies to the small [B, K] operands rather than to this [B, |V|] one."""
    probs[torch.arange(len(targets), device=targets.device), targets] -= 1
    return (grad_loss / len(targets)).to(probs.dtype)


class _SoftmaxCrossEntropy(torch.autograd.Function):
    """mean_i -log softmax(b + z w^T)_i[t_i]; z [B, K] and w [|V|, K] in the compute dtype, b [|V|]
    in its own (cast inside, so its gradient comes back in b's dtype)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, w: torch.Tensor, b: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        probs = torch.addmm(b.to(z.dtype), z, w.t())
        torch.softmax(probs, dim=1, out=probs)  # in place: the same values, one [B, |V|] tensor instead of two
        ctx.save_for_backward(z, w, probs, targets)
        ctx.b_dtype = b.dtype
        return mean_nll(probs, targets)

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        z, w, probs, targets = ctx.saved_tensors
        scale = logit_gradient_(probs, targets, grad_loss)  # (reusing p's memory)
        grad_z = (probs @ w).mul_(scale)
        grad_w = probs.t() @ (z * scale)
        grad_b = probs.sum(dim=0).mul_(scale).to(ctx.b_dtype)  # summed with fp32 accumulation, rounded once
        return grad_z, grad_w, grad_b, None


class _SideBySide(torch.autograd.Function):
    """[ws[0], ws[1], ...] side by side in `dtype`, written once (not each cast, then concatenated: that
    copied the |V| x K weights twice a step); each gradient comes back in its weight's own dtype."""

    @staticmethod
    def forward(ctx, dtype: torch.dtype, *ws: torch.Tensor) -> torch.Tensor:
        out = torch.empty(ws[0].shape[0], sum(w.shape[1] for w in ws), dtype=dtype, device=ws[0].device)
        lo = 0
        for w in ws:
            out[:, lo:lo + w.shape[1]].copy_(w)
            lo += w.shape[1]
        ctx.widths, ctx.dtypes = [w.shape[1] for w in ws], [w.dtype for w in ws]
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grads, lo = [], 0
        for width, dtype in zip(ctx.widths, ctx.dtypes, strict=True):
            grads.append(grad[:, lo:lo + width].to(dtype))
            lo += width
        return (None, *grads)


def softmax_cross_entropy(zs: list[torch.Tensor], ws: list[torch.Tensor], b: torch.Tensor, targets: torch.Tensor,
                          dtype: torch.dtype | None = None) -> torch.Tensor:
    """Mean -log softmax(b + sum_j zs[j] ws[j]^T)[target] in `dtype` (default: b's); a
    scalar in float32 or wider.

    zs[j] is [B, K_j] and ws[j] [|V|, K_j]: the zs are cast to `dtype` and put side by side, the ws
    written side by side into one `dtype` buffer (one copy); gradients flow back to every input in its
    own dtype."""
    dtype = dtype or b.dtype
    z = torch.cat([zi.to(dtype) for zi in zs], dim=1)
    same = all(wi.dtype == dtype for wi in ws)
    w = torch.cat(ws, dim=1) if same else _SideBySide.apply(dtype, *ws)
    return _SoftmaxCrossEntropy.apply(z, w, b, targets)
