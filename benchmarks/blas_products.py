"""The exact scoring pass's slices by torch (MKL) and by numpy (its OpenBLAS, at one BLAS thread, the block's
contexts split between worker threads), as `nnlm.neural.lm.exact_product` runs them, at one and two threads: which
library this host's passes would take, and how far apart their numbers are.

The exact pass (`nnlm.neural.lm.scoring.exact_block`) multiplies slices of V_SLICE output rows of [W, U, b]
([|V|, K + 1]) by a block of contexts' operands, exponentiates each slice in place and sums it into log Z. This
times the shipped loops of both libraries over the whole |V| (`exact_product.torch_log_z`, `numpy_products`),
interleaved rounds, best round reported, then the largest relative difference of their log Z. The defaults are
Brown MLP1's shapes (|V| = 17,907, K = 290 + 1, 937 contexts a block: `scoring.score_rows`); MLP3's K is 240 + 1.

    python benchmarks/blas_products.py [--vocab 17907] [--k 291] [--rows 937] [--rounds 5]
"""
from __future__ import annotations

import argparse
import time

import torch
from host import cpu_name

from nnlm.neural.lm import exact_product
from nnlm.neural.lm.scoring import V_SLICE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=17_907)
    ap.add_argument("--k", type=int, default=291)
    ap.add_argument("--rows", type=int, default=937)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    weights = torch.randn(args.vocab, args.k, generator=gen) * 0.05
    z = torch.randn(args.rows, args.k, generator=gen) * 0.5
    flat = torch.empty(V_SLICE * args.rows)
    counts = (1, 2)
    best = {(lib, n): float("inf") for lib in exact_product.LIBRARIES for n in counts}
    before = torch.get_num_threads()
    with exact_product.numpy_products(V_SLICE) as numpy_pass:
        runs = {"torch": lambda n: exact_product.torch_log_z(weights, z, flat, V_SLICE),
                "numpy": lambda n: numpy_pass(weights, z, n)}
        for round_ in range(args.rounds + 1):
            for n in counts:
                torch.set_num_threads(n)
                for lib, run in runs.items():
                    t0 = time.perf_counter()
                    run(n)
                    if round_:
                        best[lib, n] = min(best[lib, n], time.perf_counter() - t0)
        a, b = runs["torch"](1).double(), runs["numpy"](1).double()
    torch.set_num_threads(before)
    flop = 2 * args.vocab * args.k * args.rows / 1e9
    print(f"|V| = {args.vocab:,}, K = {args.k}, {args.rows} contexts a block; {cpu_name()}")
    for (lib, n), seconds in best.items():
        print(f"  {lib:5s} {n} thread{'s' if n > 1 else ' '}  {seconds * 1e3:7.1f} ms  {flop / seconds:6.1f} GFLOP/s  "
              f"{args.rows / seconds:8,.0f} tokens/s")
    ratios = {n: best["torch", n] / best["numpy", n] for n in counts}
    taken = "numpy" if all(r >= exact_product.GAIN for r in ratios.values()) else "torch"
    print("  numpy / torch speed: " + ", ".join(f"{r:.3f}x at {n}" for n, r in ratios.items())
          + f"; exact_product's rule (>= {exact_product.GAIN}x at each) takes {taken}; largest relative "
          f"sum-of-exp difference {float(((a - b).abs() / a).max()):.1e}")


if __name__ == "__main__":
    main()
