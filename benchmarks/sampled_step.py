"""The sampled training step's bookkeeping, before and after (issue 37): the torch-op row Adam,
torch.multinomial's draw and F.dropout against the compiled row Adam (nnlm.neural.net.row_adam_kernel),
the exponential-races draw (SampledLoss.draw) and the compiled dropout mask (nnlm.neural.net.dropout),
added one at a time, in the same process and interleaved rounds.

Each variant is the trainer's step (SampledLoss, backward, RowAdam.step) at a Table 1 shape with the
sampled recipe (dropout 0.05, K = 128, batch 256), from the same initial weights, on the same batches.
Ratios are of the medians over rounds of CPU seconds per step (one thread: what the step costs on an
idle core, nearly; wall time on a shared machine includes waiting for a core), so load from other
processes falls on every variant alike; the wall-clock medians are printed too.

    PYTHONPATH=src NLTK_DATA=... python benchmarks/sampled_step.py [--preset mlp1] [--threads 1]
        [--steps 150] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from nnlm.data.corpus import load_corpus
from nnlm.neural.net import dropout as dropout_module
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.sampled import RowAdam, SampledLoss, initial_bias, proposal
from nnlm.neural.run.config import RUN_DEFAULTS
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.run_config import model_config

VARIANTS = {  # name: (torch.multinomial's draw, compiled row Adam, compiled dropout mask)
    "before: multinomial, torch-op row Adam, F.dropout": (True, False, False),
    "compiled row Adam": (True, True, False),
    "compiled row Adam + races draw": (False, True, False),
    "all three (compiled dropout mask too)": (False, True, True),
}


class Variant:
    def __init__(self, corpus, run: dict, multinomial: bool, fused: bool, compiled_dropout: bool) -> None:
        torch.manual_seed(0)
        self.compiled_dropout = compiled_dropout
        recipe = RECIPES[run["recipe"]]
        self.net = NPLM(model_config(run, len(corpus.vocab)), dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
        with torch.no_grad():
            self.net.b.copy_(initial_bias(corpus.train, len(corpus.vocab)))
        self.loss = SampledLoss("sampled", proposal(corpus.train, len(corpus.vocab)), run["samples"],
                                multinomial=multinomial)
        self.optimizer = RowAdam(self.net, self.loss, recipe.lr, recipe.weight_decay, fused=fused)
        self.k, self.batch = self.net.config.order - 1, run["batch_size"]
        self.ids = torch.as_tensor(corpus.train.astype(np.int64))
        self.order = torch.from_numpy(np.random.default_rng(0).permutation(len(self.ids) - self.k)) + self.k
        self.window = torch.arange(-self.k, 1)
        self.position = 0

    def seconds_per_step(self, steps: int) -> tuple[float, float]:
        """(wall, CPU) seconds per step of this process."""
        self.net.train()
        dropout_module.COMPILED = self.compiled_dropout
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            i = self.position % (len(self.order) // self.batch)
            rows = self.ids[self.order[i * self.batch:(i + 1) * self.batch, None] + self.window]
            loss = self.loss(self.net, rows[:, :self.k], rows[:, self.k])
            self.net.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step(i * self.batch, self.batch)
            self.position += 1
        return (time.perf_counter() - started) / steps, (time.process_time() - cpu) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    run = dict(RUN_DEFAULTS) | {"preset": args.preset, "loss": "sampled", "recipe": "sampled", "samples": 128}
    variants = {name: Variant(corpus, run, *flags) for name, flags in VARIANTS.items()}
    for v in variants.values():
        v.seconds_per_step(10)  # warm-up (numba's cached compile, allocator)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, v in variants.items():
            times[name].append(v.seconds_per_step(args.steps))
    print(f"{args.preset} on Brown, sampled recipe (K = 128, batch {run['batch_size']}), {args.threads} thread(s), "
          f"{args.rounds} rounds x {args.steps} steps; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"  {'':52s} {'CPU ms/step':>11s} {'tokens/CPU-s':>12s} {'vs before':>9s} {'wall ms/step':>12s}")
    first = statistics.median(t[1] for t in next(iter(times.values())))
    for name, t in times.items():
        cpu, wall = statistics.median(x[1] for x in t) * 1e3, statistics.median(x[0] for x in t) * 1e3
        print(f"  {name:52s} {cpu:11.2f} {run['batch_size'] / cpu * 1e3:12,.0f} {first * 1e3 / cpu:8.2f}x {wall:12.2f}")


if __name__ == "__main__":
    main()
