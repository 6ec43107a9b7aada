"""Exact scoring of a split by a Table 1 net, path by path, in the same process (issue 37, item 2):
the plain fp32 path with the max subtracted in every column (before), the plain path with two passes
(`nnlm.neural.lm.scoring.SHIFT_EVERY_COLUMN = False`), the same a slice of V at a time (`V_SLICE`, now), the
per-position tables (their build included,
as a long pass pays it once; nnlm.neural.lm.direct_tables) and the bf16 product (for information: it
moves a trained net's perplexity by more than the 0.05% issue 37 allows).

A trained run (`--run DIR`, e.g. report/runs/mlp1-...) is scored on the first `--tokens` tokens of its
training split; without one, an untrained net of `--preset`'s shape. Times are CPU seconds of this
process (wall time on a shared machine includes waiting for a core) and the fastest of `--rounds`
interleaved rounds; each perplexity is compared with the before path's.

    PYTHONPATH=src NLTK_DATA=... python benchmarks/exact_scoring.py [--run DIR | --preset mlp1]
        [--tokens 40000] [--threads 1] [--rounds 2] [--no-tables]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from nnlm.data.corpus import load_corpus
from nnlm.lm import contexts
from nnlm.neural.lm import scoring as scoring_module
from nnlm.neural.lm.scoring import BF16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", help="a trained run directory (its corpus must be brown)")
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--tokens", type=int, default=40_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-tables", action="store_true", help="skip the per-position tables (5 GB for MLP1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    if args.run:
        from nnlm.neural.run.checkpoint import load_neural

        lm, what = load_neural(args.run, device="cpu"), f"trained run {args.run}"
    else:
        from nnlm.neural.lm.neural_lm import NeuralLM
        from nnlm.neural.net.model import NPLM
        from nnlm.neural.run.run_config import model_config

        torch.manual_seed(0)
        lm = NeuralLM(NPLM(model_config({"preset": args.preset}, len(corpus.vocab))), corpus.vocab, corpus.pad_token)
        what = f"untrained {args.preset}"
    n = min(args.tokens, len(corpus.train))
    ctx = contexts(corpus.stream(), np.arange(n), lm.context_size, corpus.pad_id)
    targets = corpus.train[:n].astype(np.int64)
    train_tokens = len(corpus.train)

    def plain(shift: bool, v_slice: int = scoring_module.V_SLICE):
        def score():
            scoring_module.SHIFT_EVERY_COLUMN, scoring_module.V_SLICE = shift, v_slice
            return lm.log_prob(ctx, targets)
        return score

    low = lm.with_scoring(BF16)  # the same net, scored by the bf16 product

    def bf16():
        return low.log_prob(ctx, targets)

    default_slice = scoring_module.V_SLICE

    def tables():
        scoring_module.SHIFT_EVERY_COLUMN, scoring_module.V_SLICE = False, default_slice
        with lm.long_pass(train_tokens):  # builds them as a pass over the whole train split would
            return lm.log_prob(ctx, targets)

    whole = len(corpus.vocab)
    paths = {"before: plain fp32, max shift in every column": plain(True, whole),
             "plain fp32, two passes": plain(False, whole),
             f"plain fp32, two passes, V in slices of {scoring_module.V_SLICE}": plain(False),
             "bf16 product (information)": bf16}
    if not args.no_tables:
        paths["per-position tables (build included)"] = tables
    lm.log_prob(ctx[:256], targets[:256])  # warm-up
    best: dict[str, float] = {}
    ppl: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, score in paths.items():
            cpu = time.process_time()
            lp = score()
            best[name] = min(best.get(name, np.inf), time.process_time() - cpu)
            ppl[name] = float(np.exp(-lp.mean()))
    scoring_module.SHIFT_EVERY_COLUMN, scoring_module.V_SLICE = False, default_slice
    print(f"{what}: {n:,} train tokens, {args.threads} thread(s), best of {args.rounds} rounds, CPU seconds; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    first = next(iter(paths))
    for name in paths:
        rate = n / best[name]
        print(f"  {name:52s} {best[name]:7.2f} s  {rate:9,.0f} tokens/CPU-s  {best[first] / best[name]:5.2f}x  "
              f"ppl {ppl[name]:.4f} ({ppl[name] / ppl[first] - 1:+.2e})")
    if not args.no_tables:  # the build is paid once per pass: what a whole train split would cost
        print(f"  (tables: their build is spread over these {n:,} tokens; a train-split pass spreads it over "
              f"{train_tokens:,})")


if __name__ == "__main__":
    main()
