"""Speed of the energy-minimization network (paper section 5.1, nnlm.neural.net.energy) against MLP1, in one run:
training tokens/s (the trainer's own loss, backward and optimizer step) with the sampled loss and the full
softmax, and exact scoring tokens/s (normalized over all of V, fp32) on Brown's validation contexts.

The two nets are timed in interleaved rounds (median of the rounds), so a change of the machine's load
hits both; the ratio energy / MLP1 is the figure to read. Each net is built and trained the way `nnlm
train` would (`build_net`, `build_loss`, the recipe's optimizer; MLP1's full softmax in bf16 where the CPU
has bf16 units, as its recipe asks; the energy net always fp32). MLP1 is scored without its per-position
tables (`long_pass`), so both sides time their output layer.

    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/energy_speed.py             # ~3 min
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/energy_speed.py --presets mlp1,energy \\
        --rounds 3 --batches 20 --full-batches 3 --contexts 1024 --threads 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from host import cpu_name

from nnlm.data.corpus import load_corpus
from nnlm.lm import contexts
from nnlm.neural.net.nets import build_net, language_model
from nnlm.neural.net.presets import preset
from nnlm.neural.run.batches import batch_rows, epoch_order, padded_stream, update
from nnlm.neural.run.pipeline import build_loss
from nnlm.neural.run.recipes import RECIPES, default_recipe
from nnlm.neural.run.run_config import Run, bf16_is_fast


class Training:
    """`batches` training steps of one net and loss at a time, as the single-process trainer makes them."""

    def __init__(self, corpus, name: str, loss: str, samples: int, batch: int) -> None:
        torch.manual_seed(0)
        config = preset(name, len(corpus.vocab))
        recipe_name = default_recipe(loss, name)
        recipe = RECIPES[recipe_name]
        self.bf16 = recipe.bf16 and bf16_is_fast(torch.device("cpu")) and not config.energy
        run = Run(preset=name, loss=loss, samples=samples if loss != "full" else None, recipe=recipe_name,
                  batch_size=batch, bf16=self.bf16, model=config.to_dict())
        self.net = build_net(config, recipe.dropout_x, recipe.dropout_h)
        self.loss, self.optimizer = build_loss(run, self.net, corpus, torch.device("cpu"), recipe.lr)
        self.k, self.batch = config.order - 1, batch
        self.padded = padded_stream(corpus.train, self.k, corpus.pad_id, torch.device("cpu"))
        self.order = epoch_order(0, 0, len(corpus.train))
        self.window = torch.arange(self.k + 1)
        self.step = 0

    def tokens_per_second(self, batches: int) -> float:
        self.net.train()
        started = time.perf_counter()
        for _ in range(batches):
            rows = batch_rows(self.padded, self.order, self.step % (len(self.order) // self.batch), self.batch,
                              self.window)
            loss = self.loss(self.net, rows[:, :self.k], rows[:, self.k], self.bf16)
            update(self.net, self.optimizer, loss, self.step * self.batch, len(rows))
            self.step += 1
        return batches * self.batch / (time.perf_counter() - started)


def scoring_tokens_per_second(lm, ctx: np.ndarray, targets: np.ndarray) -> float:
    started = time.perf_counter()
    lm.log_prob(ctx, targets)
    return len(targets) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="mlp1,energy", help="comma-separated presets (default mlp1,energy)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is shown (default 3)")
    parser.add_argument("--batches", type=int, default=20, help="sampled-loss steps per round (default 20)")
    parser.add_argument("--full-batches", type=int, default=2, help="full-softmax steps per round (default 2)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--contexts", type=int, default=1024, help="validation contexts scored per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    names = [n.strip() for n in args.presets.split(",") if n.strip()]
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; torch threads {args.threads}; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    start = corpus.split_offset("valid")
    positions = np.arange(start, start + args.contexts)
    scoring_ctx = contexts(corpus.stream(), positions, 4, corpus.pad_id)
    scoring_targets = corpus.stream()[positions].astype(np.int64)
    trainers = {(n, loss): Training(corpus, n, loss, args.samples, args.batch_size)
                for n in names for loss in ("sampled", "full")}
    models = {n: language_model(build_net(preset(n, len(corpus.vocab))), corpus.vocab, corpus.pad_token)
              for n in names}
    for t in trainers.values():  # warm-up: first calls allocate
        t.tokens_per_second(1)
    for lm in models.values():
        lm.log_prob(scoring_ctx[:64], scoring_targets[:64])
    results: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for n in names:
            for loss, batches in (("sampled", args.batches), ("full", args.full_batches)):
                results.setdefault((n, f"train {loss}"), []).append(trainers[(n, loss)].tokens_per_second(batches))
            results.setdefault((n, "score exact"), []).append(
                scoring_tokens_per_second(models[n], scoring_ctx, scoring_targets))
        print(f"round {round_ + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\n{'net':<10} {'parameters':>11} {'train sampled':>14} {'train full':>11} {'score exact':>12}  (tokens/s)")
    for n in names:
        cells = [statistics.median(results[(n, what)]) for what in ("train sampled", "train full", "score exact")]
        full = f"{cells[1]:,.0f}" + (" bf16" if trainers[(n, "full")].bf16 else "")
        print(f"{n:<10} {preset(n, len(corpus.vocab)).parameter_count():>11,} {cells[0]:>14,.0f} "
              f"{full:>11} {cells[2]:>12,.0f}")
    if len(names) == 2:
        a, b = names
        ratios = [statistics.median(results[(b, w)]) / statistics.median(results[(a, w)])
                  for w in ("train sampled", "train full", "score exact")]
        print(f"{b} / {a}: train sampled {ratios[0]:.2f}x, train full {ratios[1]:.3f}x, score exact {ratios[2]:.3f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
