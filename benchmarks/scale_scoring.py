"""Exact scoring speed of the AP News net (n = 6, h = 60, m = 100, direct) on a large corpus's valid
split, against the CPU's fp32 matrix-product rate measured in the same run with the same threads.

Exact scoring is NeuralLM.log_prob, the path `nnlm eval` takes: per token one output product of
2 K |V| FLOPs (K = (n-1) m + h = 560), the softmax over |V| and the target's score. So
tokens/s x 2 K |V| / (the rate of a 2048^3 fp32 product) is the fraction of the machine's matmul
speed it reaches, a figure the load of a shared machine moves much less than the seconds; the
reference is measured before and after, and the mean taken. The net is untrained (the speed does
not depend on the weights), or a trained run's (`--run DIR`, which also gives the corpus).

`--precision fp32,bf16` scores the same tokens both ways: fp32 is the exact path above; bf16 is the
one product y = b + [x, a] [W, U]^T in bf16 with fp32 accumulation and log-sum-exp, still normalized
over all of V (`nnlm eval --precision bf16`, and training's per-epoch validation). The script prints
each one's seconds, its perplexity and the relative difference to fp32. `tables` is fp32 from the
direct connections' per-position tables (nnlm.neural.lm.direct_tables, what `nnlm eval` uses on passes of
at least 16 |V| tokens; here built whatever the length, and its seconds include building them).

    PYTHONPATH=src python benchmarks/scale_scoring.py --corpus /work/scale-data/zipf-14M \
        [--run DIR] [--tokens 1000000] [--threads 1] [--precision fp32,tables,bf16]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

import numpy as np
import torch

from nnlm.data.corpus import load_corpus
from nnlm.lm import contexts
from nnlm.neural.lm import direct_tables
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import BF16
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig

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
    ap.add_argument("--corpus", help="corpus directory (default: the --run's own)")
    ap.add_argument("--run", help="a trained run directory of this shape (default: an untrained AP net)")
    ap.add_argument("--tokens", type=int, default=1_000_000, help="valid tokens scored (from the start)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="fp32", help="comma-separated: fp32, tables, bf16 (default fp32)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.run:
        from nnlm.neural.run.checkpoint import load_neural, read_run

        model = load_neural(args.run)
        corpus = load_corpus(args.corpus or read_run(Path(args.run))[0]["corpus"])
        config = model.net.config
    else:
        corpus = load_corpus(args.corpus)
        torch.manual_seed(0)
        config = ModelConfig(vocab_size=len(corpus.vocab), **AP_NET)
        model = NeuralLM(NPLM(config), corpus.vocab, corpus.pad_token)
    n = min(args.tokens, len(corpus.valid))
    positions = corpus.split_offset("valid") + np.arange(n)
    ctx = contexts(corpus.stream(), positions, model.context_size, corpus.pad_id)
    targets = np.asarray(corpus.stream()[positions], dtype=np.int64)
    k = (config.order - 1) * config.features + config.hidden
    flops = 2.0 * k * len(corpus.vocab) * n
    load = os.getloadavg()[0]
    before = gemm_rate()
    timed = {}
    direct_tables.TOKENS_PER_TABLE_ROW = 0  # "tables": built for any length
    for precision in args.precision.split(","):
        scorer = model.with_scoring(BF16) if precision == "bf16" else model  # (shares the net's weights)
        start = time.perf_counter()
        with scorer.long_pass(n) if precision == "tables" else contextlib.nullcontext():
            if precision == "tables" and scorer._tables is None:
                raise SystemExit("tables: not built (no direct connections, or too little free memory)")
            built = time.perf_counter() - start
            log_probs = scorer.log_prob(ctx, targets)
        if precision == "tables":
            print(f"  tables built in {built:.1f} s")
        timed[precision] = (time.perf_counter() - start, float(np.exp(-log_probs.mean())),
                            bool(np.isfinite(log_probs).all()))
    after = gemm_rate()
    rate = (before + after) / 2
    print(f"AP net (K = {k}, |V| = {len(corpus.vocab):,}{', trained' if args.run else ''}), {n:,} valid tokens, "
          f"{args.threads} thread(s), load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"  2048^3 fp32 product: {before / 1e9:.1f} GFLOP/s before, {after / 1e9:.1f} after")
    reference = timed.get("fp32")
    for precision, (seconds, ppl, finite) in timed.items():
        fraction = flops / seconds / rate
        versus = "" if reference is None or precision == "fp32" else (
            f"; {reference[0] / seconds:.2f}x fp32's speed, perplexity {ppl / reference[1] - 1:+.2e} relative to fp32")
        print(f"  {precision}: {seconds:.1f} s, {n / seconds:,.0f} tokens/s, perplexity {ppl:.3f} (finite: {finite}), "
              f"{fraction:.2f} of the fp32 product's rate{versus}")
        needed = flops * 1e6 / n / 60  # FLOP/s of scoring for 1M tokens in 60 s
        print(f"    1M tokens at this speed: {1e6 / (n / seconds):.0f} s; in 60 s they need {needed / 1e9:.0f} "
              f"GFLOP/s of scoring, {needed / fraction / 1e9:.0f} GFLOP/s of product rate at this fraction")


if __name__ == "__main__":
    main()
