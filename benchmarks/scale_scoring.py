"""Exact scoring speed of the AP News net (n = 6, h = 60, m = 100, direct) on a large corpus's valid
split, against the CPU's fp32 matrix-product rate measured in the same run with the same threads.

Exact scoring is NeuralLM.log_prob, the path `nnlm eval` takes: per token one output product of
2 K |V| FLOPs (K = (n-1) m + h = 560), the softmax over |V| and the target's score. So
tokens/s x 2 K |V| / (the rate of a 2048^3 fp32 product) is the fraction of the machine's matmul
speed it reaches, a figure the load of a shared machine moves much less than the seconds; the
reference is measured before and after, and the mean taken. The net is untrained (the speed does
not depend on the weights).

    PYTHONPATH=src python benchmarks/scale_scoring.py --corpus /work/scale-data/zipf-14M \
        [--tokens 1000000] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from nnlm.data.corpus import load_corpus
from nnlm.lm import contexts
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM

AP_NET = {"order": 6, "hidden": 60, "features": 100, "direct": True}


def gemm_rate(seconds: float = 5.0) -> float:
    """FLOP/s of repeated 2048^3 fp32 products for about `seconds`."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        done += 1
    return done * 2 * 2048**3 / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokens", type=int, default=1_000_000, help="valid tokens scored (from the start)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=len(corpus.vocab), **AP_NET)
    model = NeuralLM(NPLM(config), corpus.vocab, corpus.pad_token)
    n = min(args.tokens, len(corpus.valid))
    positions = corpus.split_offset("valid") + np.arange(n)
    ctx = contexts(corpus.stream(), positions, model.context_size, corpus.pad_id)
    targets = np.asarray(corpus.stream()[positions], dtype=np.int64)
    load = os.getloadavg()[0]
    before = gemm_rate()
    start = time.perf_counter()
    log_probs = model.log_prob(ctx, targets)
    seconds = time.perf_counter() - start
    after = gemm_rate()
    rate = (before + after) / 2
    k = (config.order - 1) * config.features + config.hidden
    flops = 2.0 * k * len(corpus.vocab) * n
    print(f"AP net (K = {k}, |V| = {len(corpus.vocab):,}), {n:,} valid tokens, {args.threads} thread(s), "
          f"load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"  exact scoring: {seconds:.1f} s, {n / seconds:,.0f} tokens/s, {flops / seconds / 1e9:.1f} GFLOP/s "
          f"(finite: {bool(np.isfinite(log_probs).all())})")
    print(f"  2048^3 fp32 product: {before / 1e9:.1f} GFLOP/s before, {after / 1e9:.1f} after")
    print(f"  scoring reaches {flops / seconds / rate:.2f} of the product's rate; at that fraction, 1M tokens "
          f"need {2.0 * k * len(corpus.vocab) * 1e6 / (flops / seconds / rate) / rate:.0f} s at the measured "
          f"rate, and 60 s need {2.0 * k * len(corpus.vocab) * 1e6 / 60 / (flops / seconds / rate) / 1e9:.0f} "
          "GFLOP/s of product rate")


if __name__ == "__main__":
    main()
