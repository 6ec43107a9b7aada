"""Sampled output layers vs the full softmax: training speed and the perplexity they cost.

Default: times `--batches` training steps (in `--rounds` interleaved rounds, median) (loss, backward,
optimizer step -- the trainer's own
functions) of the full softmax and of each sampled loss at the same shape and batch, and prints
the projected epoch time and the speed-up. `--train-epochs N` also trains each loss for N epochs
through `nnlm.neural.run.train.train` (early stopping on) and prints epoch times and best validation
perplexities; `--full-metrics FILE` takes the full-softmax curve from an existing run's
metrics.jsonl instead of training it again.

    PYTHONPATH=src python benchmarks/sampled_softmax.py                      # step times, MLP1 on Brown
    PYTHONPATH=src python benchmarks/sampled_softmax.py --train-epochs 8 --losses sampled \\
        --full-metrics runs/mlp1/metrics.jsonl --out /tmp/sampled-runs
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from nnlm.data.corpus import load_corpus
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.sampled import RowAdam, SampledLoss, initial_bias, proposal
from nnlm.neural.run import train as tr
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.config import RUN_DEFAULTS
from nnlm.neural.run.pipeline import build_optimizer
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.run_config import bf16_is_fast, model_config


class Stepper:
    """One loss's training steps at `run`'s shape: the trainer's loss function and optimizer."""

    def __init__(self, corpus, run: dict) -> None:
        torch.manual_seed(0)
        config = model_config(run, len(corpus.vocab))
        recipe = RECIPES[run["recipe"]]
        self.net = NPLM(config, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
        if run["loss"] == "full":
            self.loss, self.optimizer = batch_loss, build_optimizer(self.net, recipe, recipe.lr)
        else:
            self.loss = SampledLoss(run["loss"], proposal(corpus.train, len(corpus.vocab)), run["samples"])
            self.optimizer = RowAdam(self.net, self.loss, recipe.lr, recipe.weight_decay)
            with torch.no_grad():
                self.net.b.copy_(initial_bias(corpus.train, len(corpus.vocab)))
        self.k, self.batch, self.bf16 = config.order - 1, run["batch_size"], run["bf16"]
        self.ids = torch.as_tensor(corpus.train.astype(np.int64))
        self.order = torch.from_numpy(np.random.default_rng(0).permutation(len(self.ids) - self.k)) + self.k
        self.window = torch.arange(-self.k, 1)
        self.position = 0

    def seconds_per_step(self, steps: int) -> float:
        self.net.train()
        started = time.perf_counter()
        for _ in range(steps):
            i = self.position % (len(self.order) // self.batch)
            rows = self.ids[self.order[i * self.batch:(i + 1) * self.batch, None] + self.window]
            loss = self.loss(self.net, rows[:, :self.k], rows[:, self.k], self.bf16)
            self.net.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step(i * self.batch, self.batch)
            self.position += 1
        return (time.perf_counter() - started) / steps


def train_curve(out: Path, requested: dict, epochs: int) -> list[dict]:
    state = tr.train(out, requested | {"epochs": epochs}, progress=False)
    return state["history"]


def summary(name: str, history: list[dict]) -> dict:
    """Per-epoch training seconds (validation excluded) and the best validation perplexity."""
    seconds, before = [], 0.0
    for h in history:
        if h.get("partial"):
            continue
        seconds.append(h["elapsed_seconds"] - before - h["valid_seconds"])
        before = h["elapsed_seconds"]
    best = min(history, key=lambda h: h["valid_ppl"])
    return {"loss": name, "epochs": len(seconds), "train_seconds_per_epoch": float(np.mean(seconds)),
            "valid_ppl": [round(h["valid_ppl"], 2) for h in history], "best_valid_ppl": best["valid_ppl"],
            "best_epoch": best["epoch"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="brown")
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--samples", type=int, default=128, help="K (default 128, as the trainer)")
    ap.add_argument("--losses", default="sampled,nce", help="sampled losses to compare with the full softmax")
    ap.add_argument("--batches", type=int, default=200, help="timed steps per loss (default 200; 0: no timing)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median taken; default 5)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train-epochs", type=int, default=0, help="also train each loss this many epochs")
    ap.add_argument("--full-metrics", help="metrics.jsonl of a full-softmax run at the same settings (not retrained)")
    ap.add_argument("--out", help="directory for the --train-epochs runs (default: a temporary one)")
    ap.add_argument("--metrics", nargs="*", default=[], metavar="NAME=FILE",
                    help="summarize finished runs' metrics.jsonl against --full-metrics instead of training")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus)
    losses = [s for s in args.losses.split(",") if s]
    base = RUN_DEFAULTS | {"corpus": args.corpus, "preset": args.preset, "batch_size": args.batch_size,
                              "recipe": "modern"}  # the same recipe for every loss: a step-time comparison
    base["bf16"] = RECIPES[base["recipe"]].bf16 and bf16_is_fast(torch.device("cpu"))
    n_batches = math.ceil(len(corpus.train) / args.batch_size)
    print(f"{args.preset} on {corpus.name} (|V| = {len(corpus.vocab):,}), batch {args.batch_size}, "
          f"K = {args.samples}, {args.threads} thread(s), bf16 (full softmax) {base['bf16']}")
    if args.batches > 0:
        steppers = {"full": Stepper(corpus, base)} | {
            name: Stepper(corpus, base | {"loss": name, "samples": args.samples}) for name in losses}
        times: dict[str, list[float]] = {name: [] for name in steppers}
        for stepper in steppers.values():
            stepper.seconds_per_step(10)  # warm-up
        for _ in range(args.rounds):  # interleaved, so a load change on a shared machine hits every loss alike
            for name, stepper in steppers.items():
                times[name].append(stepper.seconds_per_step(max(1, args.batches // args.rounds)))
        full = float(np.median(times["full"]))
        for name in steppers:
            sec = float(np.median(times[name]))
            print(f"  {name:8s} {sec * 1e3:8.2f} ms/step  epoch {sec * n_batches:7.1f} s"
                  + ("" if name == "full" else f"  speed-up x{full / sec:.2f}"))
    if args.metrics:
        if not args.full_metrics:
            ap.error("--metrics needs --full-metrics")
        report([read_metrics("full", args.full_metrics)]
               + [read_metrics(*item.split("=", 1)) for item in args.metrics], "from metrics files")
        return
    if args.train_epochs <= 0:
        return
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nnlm-sampled-"))
    requested = {"corpus": args.corpus, "preset": args.preset, "batch_size": args.batch_size,
                 "threads": args.threads}
    if args.full_metrics:
        reference = read_metrics("full", args.full_metrics)
    else:
        reference = summary("full", train_curve(root / "full", requested, args.train_epochs))
    rows = [reference] + [summary(name, train_curve(root / name, requested | {"loss": name, "samples": args.samples},
                                                    args.train_epochs)) for name in losses]
    report(rows, f"trained (runs in {root})")


def read_metrics(name: str, path: str) -> dict:
    return summary(name, [json.loads(line) for line in Path(path).read_text().splitlines()])


def report(rows: list[dict], where: str) -> None:
    reference = rows[0]
    print(f"{where}:")
    for r in rows:
        cost = 100.0 * (r["best_valid_ppl"] / reference["best_valid_ppl"] - 1.0)
        speed = reference["train_seconds_per_epoch"] / r["train_seconds_per_epoch"]
        print(f"  {r['loss']:10s} {r['train_seconds_per_epoch']:7.1f} s/epoch (x{speed:.2f})  best valid ppl "
              f"{r['best_valid_ppl']:.2f} (epoch {r['best_epoch']}, {cost:+.1f}% vs full)  valid per epoch "
              + ", ".join(f"{p:.1f}" for p in r["valid_ppl"]))


if __name__ == "__main__":
    main()
