"""Training speed of the NPLM at a Table 1 shape: tokens/s of nnlm's training step (loss, backward,
update), fp32 and with bf16 autocast, against a plain fp32 reference step measured in the same run.

    PYTHONPATH=src python benchmarks/neural_speed.py --preset mlp1 --batch-size 256 --threads 1
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nnlm.neural.model import NPLM
from nnlm.neural.optim import Adam, PaperSGD
from nnlm.neural.presets import preset
from nnlm.neural.train import batch_loss

BROWN_V = 17_907


def reference_step(params: dict[str, torch.Tensor], ctx: torch.Tensor, tgt: torch.Tensor, lr: float) -> None:
    """The textbook formulation: index C, concatenate, two linear layers, cross-entropy, SGD."""
    x = params["C"][ctx].reshape(len(ctx), -1)
    y = params["b"] + x @ params["W"].t() + torch.tanh(params["d"] + x @ params["H"].t()) @ params["U"].t()
    loss = F.cross_entropy(y, tgt)
    for p in params.values():
        p.grad = None
    loss.backward()
    with torch.no_grad():
        for p in params.values():
            p -= lr * p.grad


def tokens_per_second(step, batch: int, seconds: float) -> float:
    for _ in range(3):
        step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n * batch / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = preset(args.preset, BROWN_V)
    ctx = torch.randint(0, BROWN_V, (args.batch_size, cfg.order - 1))
    tgt = torch.randint(0, BROWN_V, (args.batch_size,))

    ref_net = NPLM(cfg)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in ref_net.named_parameters()}
    if "W" not in params:
        params["W"] = torch.zeros(BROWN_V, cfg.input_size)
    ref = tokens_per_second(lambda: reference_step(params, ctx, tgt, 0.1), args.batch_size, args.seconds)
    print(f"{args.preset} batch {args.batch_size}, {args.threads} thread(s)")
    print(f"  reference fp32 step          {ref:9,.0f} tokens/s  1.00x")
    for name, opt_cls, bf16 in (("paper fp32", PaperSGD, False), ("adam fp32", Adam, False), ("adam bf16 autocast", Adam, True)):
        net = NPLM(cfg)
        opt = opt_cls(net, 1e-3, 0.0, 0.0) if opt_cls is PaperSGD else Adam(net, 1e-3)

        def step() -> None:
            loss = batch_loss(net, ctx, tgt, bf16)
            net.zero_grad(set_to_none=True)
            loss.backward()
            opt.step(0, args.batch_size)

        tps = tokens_per_second(step, args.batch_size, args.seconds)
        print(f"  nnlm {name:<24}{tps:9,.0f} tokens/s  {tps / ref:.2f}x")


if __name__ == "__main__":
    main()
