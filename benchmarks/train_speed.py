"""Training speed of the full-softmax NPLM: nnlm's step against a plain PyTorch step and the roofline.

In one run, on real Brown batches at a Table 1 shape (MLP1 by default, batch 256):
  (a) the CPU's matrix-multiply rate in fp32 and bf16 at the output layer's shape -- the forward
      product [B, K] x [K, |V|] and the two of the backward pass, K = h + (n-1)m -- and from it
      the roofline in tokens/s, at 6 |V| K FLOPs per token (the output layer is all but all of them);
  (b) a plain PyTorch reference, written as a user would: nn.Embedding, nn.Linear,
      F.cross_entropy, torch.optim.SGD, fp32 (and the same with bf16 autocast, for information);
  (c) nnlm's training, the very code `nnlm train` runs: a run set up by nnlm.neural.run.pipeline and
      its single-process trainer's `run_batches` (training_path.py; recipe `modern` by default).
The contenders are measured in interleaved rounds (reference, nnlm, reference, nnlm, ...), so
load from other processes falls on all of them alike; ratios are of the totals.

    PYTHONPATH=src NLTK_DATA=... python benchmarks/train_speed.py [--preset mlp1] [--batch-size 256]
        [--threads 1] [--seconds 60] [--recipe modern] [--bf16 | --fp32]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from training_path import TrainingPath

from nnlm.data.corpus import load_corpus
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.presets import preset
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.run_config import bf16_is_fast


class Reference(nn.Module):
    """The NPLM as a PyTorch user writes it: y = direct(x) + out(tanh(hidden(x)))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.features)
        self.direct = nn.Linear(cfg.input_size, cfg.vocab_size) if cfg.direct else None
        self.hidden = nn.Linear(cfg.input_size, cfg.hidden) if cfg.hidden else None
        self.out = nn.Linear(cfg.hidden, cfg.vocab_size, bias=not cfg.direct) if cfg.hidden else None

    def forward(self, contexts: torch.Tensor) -> torch.Tensor:
        x = self.embed(contexts).flatten(1)
        y = self.direct(x) if self.direct is not None else 0
        if self.hidden is not None:
            y = y + self.out(torch.tanh(self.hidden(x)))
        return y


def output_width(cfg: ModelConfig) -> int:
    """K: the inner dimension of the output layer's product (x for W, the hidden layer for U)."""
    return (cfg.input_size if cfg.direct else 0) + cfg.hidden


def matmul_rates(batch: int, k: int, v: int, dtype: torch.dtype, seconds: float) -> dict[str, float]:
    """FLOP/s of the three output-layer products in `dtype`."""
    z, w, g = torch.randn(batch, k).to(dtype), torch.randn(v, k).to(dtype), torch.randn(batch, v).to(dtype)
    products = {"forward z w^T": lambda: z @ w.t(), "grad w = g^T z": lambda: g.t() @ z, "grad z = g w": lambda: g @ w}
    rates = {}
    for name, product in products.items():
        product()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            product()
            n += 1
        rates[name] = 2.0 * batch * k * v * n / (time.perf_counter() - start)
    return rates


def optimizer_seconds(path: TrainingPath, seconds: float) -> float:
    """Seconds per step of nnlm's own optimizer alone (the run's, on its net, gradients present): the part of
    a step that streams every parameter through memory, which the products' roofline leaves out."""
    optimizer = path.trainer.optimizer
    kept = getattr(optimizer, "kept", None)  # the kept output layer (--recipe paper, one process): its own gradient
    for p in path.trainer.net.parameters():
        if p.grad is None and not (kept and kept.owns(p)):
            p.grad = torch.zeros_like(p)

    if kept:  # what the last backward pass hands the kept layer's update (nnlm.neural.net.kept_output.take_gradient)
        batch, width = path.trainer.batch, kept.copy.shape[1]
        pending = (torch.zeros(batch, len(kept.copy), dtype=kept.dtype), torch.zeros(batch, width, dtype=kept.dtype))

    def step() -> None:
        if kept:  # (bf16: the buffer holds the last gradient; fp32: the update is the grad-w product itself)
            kept.pending = pending
        optimizer.step(0, 1)
    step()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return (time.perf_counter() - start) / n


def reference_trainer(cfg: ModelConfig, autocast: bool, data) -> Callable[[float], int]:
    """Train the reference for about `seconds` on the next batches of `data`; returns the tokens."""
    model = Reference(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(contexts: torch.Tensor, targets: torch.Tensor) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(contexts)
        loss = F.cross_entropy(logits.float(), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def train_for(seconds: float) -> int:
        tokens, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            contexts, targets = next(data)
            step(contexts, targets)
            tokens += len(targets)
        return tokens
    return train_for


def batches(train: np.ndarray, k: int, pad_id: int, batch: int, seed: int = 0):
    """Endless shuffled (contexts, targets) batches of the training split, built as `nnlm train` does."""
    padded = torch.cat([torch.full((k,), pad_id, dtype=torch.int64), torch.as_tensor(train.astype(np.int64))])
    window = torch.arange(k + 1)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(train)))
    b = 0
    while True:
        if (b + 1) * batch > len(order):
            b = 0
        rows = padded[order[b * batch:(b + 1) * batch, None] + window]
        b += 1
        yield rows[:, :k], rows[:, k]


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60.0, help="per contender, split over the rounds")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--recipe", default="modern", choices=sorted(RECIPES))
    ap.add_argument("--no-autocast-reference", action="store_true", help="skip the bf16-autocast reference")
    precision = ap.add_mutually_exclusive_group()
    precision.add_argument("--bf16", action="store_true",
                           help="train nnlm's output layer in bf16 whatever the recipe says (`nnlm train --bf16`)")
    precision.add_argument("--fp32", action="store_true",
                           help="train it in fp32 whatever the recipe says (as on a CPU without bf16 units)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    corpus = load_corpus("brown")
    cfg = preset(args.preset, len(corpus.vocab))
    v, k, batch = cfg.vocab_size, output_width(cfg), args.batch_size
    work = tempfile.TemporaryDirectory()
    path = TrainingPath.new(Path(work.name) / "run", {"corpus": "brown", "preset": args.preset, "recipe": args.recipe,
                                                  "batch_size": batch, "threads": args.threads}
                              | ({"bf16": True} if args.bf16 else {"bf16": False} if args.fp32 else {}))
    bf16 = path.run.bf16
    flops_per_token = 6.0 * v * k
    print(f"{args.preset} on Brown (|V| = {v:,}, n = {cfg.order}, h = {cfg.hidden}, m = {cfg.features}, "
          f"direct = {cfg.direct}), batch {batch}, {args.threads} thread(s); {load()}")

    dtypes = [torch.float32] + ([torch.bfloat16] if bf16_is_fast(torch.device("cpu")) else [])
    data = batches(corpus.train, cfg.order - 1, corpus.pad_id, batch)
    contenders = {"reference fp32 (SGD)": reference_trainer(cfg, False, data)}
    if not args.no_autocast_reference and bf16:
        contenders["reference bf16 autocast (SGD)"] = reference_trainer(cfg, True, data)
    nnlm_name = f"nnlm train ({args.recipe}{', bf16' if bf16 else ', fp32'})"
    contenders[nnlm_name] = lambda seconds: path.advance(seconds=seconds)
    for name, train_for in contenders.items():  # warm up: allocations, kernels' first calls
        if name == nnlm_name:
            path.advance(examples=3 * batch)
        else:
            train_for(0.5)
    tokens = {name: 0 for name in contenders}
    seconds = {name: 0.0 for name in contenders}
    flop_seconds = {dtype: {} for dtype in dtypes}  # dtype -> product -> [seconds per FLOP, summed over rounds]
    optimizer_total = 0.0
    per_round = args.seconds / args.rounds
    print(f"{args.rounds} interleaved rounds: matmul rates, then {per_round:.0f} s of each contender; {load()}")
    for _ in range(args.rounds):
        for dtype in dtypes:
            for name, r in matmul_rates(batch, k, v, dtype, 0.5).items():
                flop_seconds[dtype][name] = flop_seconds[dtype].get(name, 0.0) + 1.0 / r
        optimizer_total += optimizer_seconds(path, 0.5)
        for name, train_for in contenders.items():
            start = time.perf_counter()
            tokens[name] += train_for(per_round)
            seconds[name] += time.perf_counter() - start

    print(f"(a) matmul rate at the output layer's shape [{batch}, {k}] x [{k}, {v:,}] (forward; grad w; grad z); "
          f"roofline at 6 |V| K = {flops_per_token / 1e6:.1f} MFLOP/token")
    roofline = {}
    for dtype in dtypes:
        rates = {name: args.rounds / inv for name, inv in flop_seconds[dtype].items()}
        mean_rate = 3.0 / sum(1.0 / r for r in rates.values())  # the three products take equal FLOPs
        roofline[dtype] = mean_rate / flops_per_token
        detail = "; ".join(f"{r / 1e9:.0f}" for r in rates.values())
        print(f"    {str(dtype).removeprefix('torch.'):<9} {mean_rate / 1e9:6.0f} GFLOP/s ({detail}) "
              f"-> roofline {roofline[dtype]:7,.0f} tokens/s")
    step_products = batch / top_rate if (top_rate := roofline[torch.bfloat16 if bf16 else torch.float32]) else 0.0
    optimizer_step = optimizer_total / args.rounds
    bound = step_products / (step_products + optimizer_step)
    parameters = sum(p.numel() for p in path.trainer.net.parameters())
    fused = getattr(path.trainer.optimizer, "kept", None) is not None and not bf16
    print(f"    the optimizer alone ({args.recipe}: {type(path.trainer.optimizer).__name__}, "
          f"{parameters:,} parameters{'; the grad-w product included: it is fused in' if fused else ''}): "
          f"{optimizer_step * 1e3:.2f} ms a step "
          f"against the products' {step_products * 1e3:.2f} ms at the roofline: a step that does both at full speed "
          f"and nothing else reaches {bound:.0%} of the roofline")
    print("(b, c) training steps")
    rate = {name: tokens[name] / seconds[name] for name in contenders}
    ref = rate["reference fp32 (SGD)"]
    for name in contenders:
        print(f"    {name:<34} {rate[name]:8,.0f} tokens/s  {rate[name] / ref:5.2f}x reference")
    nnlm_rate = rate[nnlm_name]
    top = roofline[torch.bfloat16 if bf16 else torch.float32]
    print(f"nnlm / reference fp32: {nnlm_rate / ref:.2f}x;  nnlm / roofline ({'bf16' if bf16 else 'fp32'}): "
          f"{nnlm_rate / top:.0%};  reference / roofline (fp32): {ref / roofline[torch.float32]:.0%};  {load()}")


if __name__ == "__main__":
    main()
