"""Dense Adam against the row-wise (lazy) Adam for the class-factored output layer, in one run.

1. Training speed: the trainer's step (loss, backward, optimizer step) of the class-factored net with
   dense Adam (`batch_loss` and `optim.Adam`: every row of C, W, U, b each step) and with the row-wise
   Adam (`class_output.ClassRowLoss` and `sampled.RowAdam`: the context words' C rows and the present
   classes' word rows), the same batches, in interleaved rounds; the median of each and their ratio,
   with the time split into forward, backward and update, and the share of the |V| word rows the
   batches' classes cover.
2. Quality (`--epochs N` and/or `--minutes M`): `nnlm train` of the same run twice, row-wise (what it
   does) and dense (the benchmark swaps `pipeline.full_loss` back to `batch_loss` and dense Adam), N
   epochs or M minutes of training each: the validation perplexity after each epoch (and at the
   budget's end) and the training examples/s.

    PYTHONPATH=src NLTK_DATA=... python benchmarks/class_row_adam.py --corpus brown --epochs 2
    PYTHONPATH=src python benchmarks/class_row_adam.py --corpus /tmp/ap-natural --min-count 2 --preset apnews \\
        --clustering frequency
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from host import cpu_name

from nnlm.data.corpus import load_corpus
from nnlm.neural.net.nets import build_net
from nnlm.neural.net.output_clustering import default_class_count, output_classes
from nnlm.neural.run import pipeline
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.run_config import model_config
from nnlm.neural.run.train import train

KINDS = ("dense", "rows")


class Stepper:
    """Training steps of one optimizer on the class-factored net, on a fixed order of train's batches."""

    def __init__(self, corpus, kind: str, preset: str, classes: np.ndarray) -> None:
        torch.manual_seed(0)
        recipe = RECIPES["adaptive"]
        config = model_config({"preset": preset, "output_layer": "classes",
                               "output_classes": int(classes.max()) + 1}, len(corpus.vocab))
        self.net = build_net(config, recipe.dropout_x, recipe.dropout_h)
        self.net.set_classes(classes)
        self.loss, self.optimizer = (pipeline.full_loss(self.net, recipe, recipe.lr) if kind == "rows"
                                     else (batch_loss, pipeline.build_optimizer(self.net, recipe, recipe.lr)))
        self.k = config.order - 1
        self.ids = torch.as_tensor(corpus.train.astype(np.int64))
        self.order = torch.from_numpy(np.random.default_rng(0).permutation(len(self.ids) - self.k)) + self.k
        self.window = torch.arange(-self.k, 1)
        self.position = 0

    def run(self, steps: int, batch: int) -> np.ndarray:
        """Seconds of forward, backward and update, summed over `steps` steps."""
        self.net.train()
        spent = np.zeros(3)
        for _ in range(steps):
            i = self.position % (len(self.order) // batch)
            rows = self.ids[self.order[i * batch:(i + 1) * batch, None] + self.window]
            t0 = time.perf_counter()
            loss = self.loss(self.net, rows[:, :self.k], rows[:, self.k], False)
            t1 = time.perf_counter()
            self.net.zero_grad(set_to_none=True)
            loss.backward()
            t2 = time.perf_counter()
            self.optimizer.step(i * batch, batch)
            spent += (t1 - t0, t2 - t1, time.perf_counter() - t2)
            self.position += 1
        return spent


def row_share(corpus, classes: np.ndarray, batch: int, batches: int = 50) -> float:
    """The mean share of the |V| word rows in the classes of a batch's targets (what the row update touches)."""
    sizes = np.bincount(classes)
    order = np.random.default_rng(0).permutation(len(corpus.train))
    return float(np.mean([sizes[np.unique(classes[corpus.train[order[i * batch:(i + 1) * batch]]])].sum()
                          for i in range(batches)]) / len(classes))


def speed(corpus, args, classes: np.ndarray) -> None:
    steppers = {kind: Stepper(corpus, kind, args.preset, classes) for kind in KINDS}
    print(f"net: {args.preset} with {int(classes.max()) + 1} {args.clustering} classes, "
          f"{sum(p.numel() for p in steppers['dense'].net.parameters()):,} parameters; batch {args.batch}; "
          f"the batches' classes cover {100 * row_share(corpus, classes, args.batch):.1f}% of the word rows")
    for stepper in steppers.values():
        stepper.run(3, args.batch)  # warm-up (the row kernel's compilation is cached on disk)
    spent: dict[str, list[np.ndarray]] = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind, stepper in steppers.items():
            spent[kind].append(stepper.run(args.steps, args.batch) / args.steps)
    step = {kind: statistics.median(float(s.sum()) for s in spent[kind]) for kind in KINDS}
    print(f"training, median of {args.rounds} interleaved rounds of {args.steps} steps; load average now "
          f"{os.getloadavg()}")
    for kind in KINDS:
        parts = np.median(np.stack(spent[kind]), axis=0) * 1e3
        print(f"  {kind:6s} Adam {1e3 * step[kind]:7.1f} ms/step {args.batch / step[kind]:8,.0f} examples/s "
              f"(forward {parts[0]:.1f}, backward {parts[1]:.1f}, update {parts[2]:.1f} ms)")
    print(f"  row-wise / dense: {step['dense'] / step['rows']:.2f}x the examples/s")


def quality(args, work: Path) -> None:
    """`nnlm train` twice, row-wise and dense, args.epochs epochs or args.minutes minutes each: validation
    perplexity per epoch (and at the budget's end)."""
    requested = {"corpus": args.corpus, "preset": args.preset, "output_layer": "classes",
                 "output_clustering": args.clustering, "epochs": args.epochs or 1000, "threads": args.threads,
                 "batch_size": args.batch} | ({"min_count": args.min_count} if args.min_count else {}) \
        | ({"time_budget": args.minutes} if args.minutes else {})
    row_loss = pipeline.full_loss
    for kind in KINDS:
        pipeline.full_loss = row_loss if kind == "rows" else (
            lambda net, recipe, lr: (batch_loss, pipeline.build_optimizer(net, recipe, lr)))
        try:
            started = time.perf_counter()
            state = train(work / kind, requested, progress=False, log=lambda s: None)
        finally:
            pipeline.full_loss = row_loss
        ppl = ", ".join(f"{h['valid_ppl']:.2f}" for h in state["history"])
        print(f"  {kind:6s} Adam: valid perplexity after each epoch {ppl}; {state['examples']:,} examples in "
              f"{state['elapsed']:.0f} s of training ({state['examples'] / state['elapsed']:,.0f} examples/s, "
              f"validation included), {time.perf_counter() - started:.0f} s in all; load average now "
              f"{os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="brown")
    ap.add_argument("--min-count", type=int, help="for a text directory (ap-natural: 2)")
    ap.add_argument("--preset", default="mlp1-classes", help="mlp1-classes (Brown), apnews (with classes)")
    ap.add_argument("--clustering", default="exchange", help="exchange (nnlm train's default) or frequency "
                                                             "(what nnlm reproduce --table apnews trains)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="training steps per round and optimizer")
    ap.add_argument("--epochs", type=int, default=0, help="also train both N epochs with nnlm train (0: no)")
    ap.add_argument("--minutes", type=float, help="also train both with this time budget (minutes) each")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; load average at start {os.getloadavg()}")
    corpus = load_corpus(args.corpus, min_count=args.min_count) if args.corpus != "brown" else load_corpus("brown")
    v = len(corpus.vocab)
    started = time.perf_counter()
    classes = output_classes(args.clustering, corpus.train, v, default_class_count(v))
    print(f"{args.corpus}: |V| = {v:,}, {len(corpus.train):,} training tokens; K = {int(classes.max()) + 1} "
          f"{args.clustering} classes in {time.perf_counter() - started:.1f} s (largest {np.bincount(classes).max()} "
          "words)")
    if not args.skip_speed:
        speed(corpus, args, classes)
    if args.epochs or args.minutes:
        with tempfile.TemporaryDirectory() as work:
            quality(args, Path(work))
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
