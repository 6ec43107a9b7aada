"""Sampled output layers vs the full softmax: training speed and the perplexity they cost.

Default: times `--batches` training steps (loss, backward, optimizer step -- the trainer's own
functions) of the full softmax and of each sampled loss at the same shape and batch, and prints
the projected epoch time and the speed-up. `--train-epochs N` also trains each loss for N epochs
through `nnlm.neural.train.train` (early stopping on) and prints epoch times and best validation
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
from nnlm.neural import train as tr
from nnlm.neural.model import NPLM
from nnlm.neural.sampled import RowAdam, SampledLoss, initial_bias, proposal


def step_seconds(corpus, run: dict, batches: int, warmup: int = 20) -> float:
    """Seconds per training step of `run`'s loss at its shape (the trainer's loss and optimizer)."""
    torch.manual_seed(0)
    config = tr.model_config(run, len(corpus.vocab))
    recipe = tr.RECIPES[run["recipe"]]
    net = NPLM(config, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
    if run["loss"] == "full":
        loss_fn, optimizer = tr.batch_loss, tr.build_optimizer(net, recipe, recipe.lr)
    else:
        loss_fn = SampledLoss(run["loss"], proposal(corpus.train, len(corpus.vocab)), run["samples"])
        optimizer = RowAdam(net, loss_fn, recipe.lr, recipe.weight_decay)
        with torch.no_grad():
            net.b.copy_(initial_bias(corpus.train, len(corpus.vocab)))
    k, batch = config.order - 1, run["batch_size"]
    ids = torch.as_tensor(corpus.train.astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(0).permutation(len(ids) - k)) + k
    window = torch.arange(-k, 1)
    net.train()
    started = 0.0
    for i in range(warmup + batches):
        if i == warmup:
            started = time.perf_counter()
        rows = ids[order[i * batch:(i + 1) * batch, None] + window]
        loss = loss_fn(net, rows[:, :k], rows[:, k], run["bf16"])
        net.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step(i * batch, batch)
    return (time.perf_counter() - started) / batches


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
    ap.add_argument("--samples", type=int, default=512, help="K (default 512)")
    ap.add_argument("--losses", default="sampled,nce", help="sampled losses to compare with the full softmax")
    ap.add_argument("--batches", type=int, default=200, help="timed steps per loss (default 200)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train-epochs", type=int, default=0, help="also train each loss this many epochs")
    ap.add_argument("--full-metrics", help="metrics.jsonl of a full-softmax run at the same settings (not retrained)")
    ap.add_argument("--out", help="directory for the --train-epochs runs (default: a temporary one)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus)
    losses = [s for s in args.losses.split(",") if s]
    base = tr.RUN_DEFAULTS | {"corpus": args.corpus, "preset": args.preset, "batch_size": args.batch_size}
    base["bf16"] = tr.RECIPES[base["recipe"]].bf16 and tr.bf16_is_fast(torch.device("cpu"))
    n_batches = math.ceil(len(corpus.train) / args.batch_size)
    print(f"{args.preset} on {corpus.name} (|V| = {len(corpus.vocab):,}), batch {args.batch_size}, "
          f"K = {args.samples}, {args.threads} thread(s), bf16 (full softmax) {base['bf16']}")
    full = step_seconds(corpus, base, args.batches)
    print(f"  full     {full * 1e3:8.2f} ms/step  epoch {full * n_batches:7.1f} s")
    for name in losses:
        sec = step_seconds(corpus, base | {"loss": name, "samples": args.samples}, args.batches)
        print(f"  {name:8s} {sec * 1e3:8.2f} ms/step  epoch {sec * n_batches:7.1f} s  speed-up x{full / sec:.2f}")
    if args.train_epochs <= 0:
        return
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nnlm-sampled-"))
    requested = {"corpus": args.corpus, "preset": args.preset, "batch_size": args.batch_size,
                 "threads": args.threads}
    if args.full_metrics:
        reference = summary("full", [json.loads(line) for line in Path(args.full_metrics).read_text().splitlines()])
    else:
        reference = summary("full", train_curve(root / "full", requested, args.train_epochs))
    rows = [reference] + [summary(name, train_curve(root / name, requested | {"loss": name, "samples": args.samples},
                                                    args.train_epochs)) for name in losses]
    print(f"trained (runs in {root}):")
    for r in rows:
        cost = 100.0 * (r["best_valid_ppl"] / reference["best_valid_ppl"] - 1.0)
        speed = reference["train_seconds_per_epoch"] / r["train_seconds_per_epoch"]
        print(f"  {r['loss']:8s} {r['train_seconds_per_epoch']:7.1f} s/epoch (x{speed:.2f})  best valid ppl "
              f"{r['best_valid_ppl']:.2f} (epoch {r['best_epoch']}, {cost:+.1f}% vs full)  valid per epoch "
              + ", ".join(f"{p:.1f}" for p in r["valid_ppl"]))


if __name__ == "__main__":
    main()
