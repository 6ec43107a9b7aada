"""The exact scoring pass's product by torch (MKL) and by numpy (its OpenBLAS) on this host, at the pass's shapes:
which BLAS would score a net's validation faster here, and how far apart their numbers are.

The exact pass (`nnlm.neural.lm.scoring.exact_block`) multiplies slices of V_SLICE output rows of [W, U, b]
([|V|, K + 1]) by a block of contexts' operands, exponentiates each slice in place and sums it into log Z. This
times that loop with each library's product (the exp and the sums by torch in both), and the products alone, one
thread each (set OPENBLAS_NUM_THREADS=1 for numpy's), interleaved rounds, best round reported; then the largest
relative difference of the two passes' log Z. The defaults are Brown MLP1's shapes (|V| = 17,907, K = 290 + 1,
937 contexts a block: `scoring.score_rows`).

    OPENBLAS_NUM_THREADS=1 python benchmarks/blas_products.py [--vocab 17907] [--k 291] [--rows 937] [--rounds 4]
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from host import cpu_name

from nnlm.neural.lm.scoring import V_SLICE


def passes(weights: torch.Tensor, z: torch.Tensor) -> dict[str, Callable[[], torch.Tensor | None]]:
    """The four timed loops over V's slices: each library's product with exp and sum, and its product alone."""
    flat = torch.empty(V_SLICE * len(z))
    w_np, zt_np = weights.numpy(), z.t().numpy()

    def torch_mm(lo: int, hi: int, y: torch.Tensor) -> None:
        torch.mm(weights[lo:hi], z.t(), out=y)

    def numpy_mm(lo: int, hi: int, y: torch.Tensor) -> None:
        np.matmul(w_np[lo:hi], zt_np, out=y.numpy())

    def loop(product, with_exp: bool) -> Callable[[], torch.Tensor | None]:
        def run() -> torch.Tensor | None:
            lse = torch.zeros(len(z))
            for lo in range(0, len(weights), V_SLICE):
                hi = min(lo + V_SLICE, len(weights))
                y = flat[:(hi - lo) * len(z)].view(hi - lo, len(z))
                product(lo, hi, y)
                if with_exp:
                    lse += y.exp_().sum(0)
            return lse.log_() if with_exp else None
        return run

    return {"torch (MKL) pass": loop(torch_mm, True), "numpy (OpenBLAS) pass": loop(numpy_mm, True),
            "torch (MKL) product": loop(torch_mm, False), "numpy (OpenBLAS) product": loop(numpy_mm, False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=17_907)
    ap.add_argument("--k", type=int, default=291)
    ap.add_argument("--rows", type=int, default=937)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    weights = torch.randn(args.vocab, args.k, generator=gen) * 0.1
    z = torch.randn(args.rows, args.k, generator=gen)
    runs = passes(weights, z)
    best = {name: float("inf") for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - t0)
    flop = 2 * args.vocab * args.k * args.rows / 1e9
    print(f"|V| = {args.vocab:,}, K = {args.k}, {args.rows} contexts a block, one thread; {cpu_name()}")
    for name, seconds in best.items():
        print(f"  {name:26s} {seconds * 1e3:7.1f} ms  {flop / seconds:6.1f} GFLOP/s  "
              f"{args.rows / seconds:8,.0f} tokens/s")
    ratio = best["torch (MKL) pass"] / best["numpy (OpenBLAS) pass"]
    a, b = runs["torch (MKL) pass"](), runs["numpy (OpenBLAS) pass"]()
    print(f"  OpenBLAS pass / MKL pass speed: {ratio:.3f}x; largest relative log Z difference "
          f"{float(((a - b).abs() / a.abs()).max()):.1e}")


if __name__ == "__main__":
    main()
