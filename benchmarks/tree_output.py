"""The tree output layer against the full softmax and the class-factored layer, in one run: training and
exact-scoring speed at the MLP1 shape (n = 5, h = 50, m = 60, direct), on Brown (|V| = 17,907) or a text
directory (e.g. a generated corpus of >= 100k words, benchmarks/text_like_corpus.py).

1. Training tokens/s of the trainer's own step (nnlm.neural.run.pipeline.full_loss: the loss, backward and
   the adaptive recipe's optimizer, which is Adam for the full softmax and the row-wise Adam on the touched
   rows for the class-factored and tree layers), in interleaved rounds; the median of each.
2. Exact scoring tokens/s of a slice of valid (`split_log_probs`, as `nnlm eval` scores it; untrained
   weights, seed 0), in interleaved rounds.
The layers: `full`, `classes` (K = about sqrt(|V|)), `tree2` (binary tree) and `tree4` (at most 4 children a
node), each class or tree from CLUSTERING (exchange or frequency). Prints the CPU and the load beside the figures.

    PYTHONPATH=src NLTK_DATA=/work/shared/nltk_data python benchmarks/tree_output.py --corpus brown
    PYTHONPATH=src python benchmarks/tree_output.py --corpus /tmp/treeout/v100k --clustering frequency
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
from nnlm.data.provenance import corpus_options
from nnlm.lm import split_log_probs
from nnlm.neural.net.nets import build_net, language_model
from nnlm.neural.net.output_clustering import default_class_count, output_classes
from nnlm.neural.net.output_tree import word_tree
from nnlm.neural.run.pipeline import full_loss
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.run_config import model_config

LAYERS = ("full", "classes", "tree2", "tree4")


def build(corpus, layer: str, clustering: str, classes: np.ndarray | None, k: int):
    """A fresh MLP1-shaped net with this output layer (its classes or tree from train), seed 0."""
    torch.manual_seed(0)
    v = len(corpus.vocab)
    options = {"preset": "mlp1", "output_layer": "full"}
    if layer == "classes":
        options = {"preset": "mlp1", "output_layer": "classes", "output_classes": k}
    elif layer.startswith("tree"):
        options = {"preset": "mlp1", "output_layer": "tree", "tree_branching": int(layer[4:])}
    recipe = RECIPES["adaptive"]
    net = build_net(model_config(options, v), recipe.dropout_x, recipe.dropout_h)
    started = time.perf_counter()
    if layer == "classes":
        net.set_classes(classes)
    elif layer.startswith("tree"):
        net.set_tree(word_tree(clustering, corpus.train, v, int(layer[4:]), k))
        depth = np.diff(net.path_start.numpy())
        mean = float(np.bincount(corpus.train, minlength=v) @ depth) / len(corpus.train)
        print(f"  {layer}: {clustering} tree in {time.perf_counter() - started:.1f} s; path over train tokens "
              f"mean {mean:.2f} decisions, longest {depth.max()}")
    return net, recipe


class Stepper:
    """The trainer's steps (loss, backward, update) of one layer on random batches of train."""

    def __init__(self, corpus, net, recipe) -> None:
        self.net = net
        self.loss, self.optimizer = full_loss(net, recipe, recipe.lr, one_process=True)
        self.k = net.config.order - 1
        self.ids = torch.as_tensor(corpus.train.astype(np.int64))
        self.order = torch.from_numpy(np.random.default_rng(0).permutation(len(self.ids) - self.k)) + self.k
        self.window = torch.arange(-self.k, 1)
        self.position = 0

    def tokens_per_second(self, steps: int, batch: int) -> float:
        self.net.train()
        started = time.perf_counter()
        for _ in range(steps):
            i = self.position % (len(self.order) // batch)
            rows = self.ids[self.order[i * batch:(i + 1) * batch, None] + self.window]
            loss = self.loss(self.net, rows[:, :self.k], rows[:, self.k], False)
            self.net.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step(i * batch, batch)
            self.position += 1
        return steps * batch / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="brown")
    ap.add_argument("--clustering", default="exchange", choices=("exchange", "frequency"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each measurement (median)")
    ap.add_argument("--steps", type=int, default=20, help="training steps per round and layer (full: a quarter)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--score-tokens", type=int, default=20_000, help="valid tokens scored per round and layer")
    ap.add_argument("--layers", default=",".join(LAYERS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; load average at start {os.getloadavg()}")
    record = corpus_options(args.corpus)
    corpus = load_corpus(record["corpus"], min_count=record["min_count"])
    v = len(corpus.vocab)
    k = default_class_count(v)
    layers = args.layers.split(",")
    classes = None
    if "classes" in layers:
        started = time.perf_counter()
        classes = output_classes(args.clustering, corpus.train, v, k)
        print(f"|V| = {v:,}, {len(corpus.train):,} train tokens; K = {k} {args.clustering} classes in "
              f"{time.perf_counter() - started:.1f} s")
    nets = {layer: build(corpus, layer, args.clustering, classes, k) for layer in layers}

    valid = load_valid_slice(corpus, args.score_tokens)
    lms = {layer: language_model(net, corpus.vocab, corpus.pad_token) for layer, (net, _) in nets.items()}
    scoring: dict[str, list[float]] = {layer: [] for layer in layers}
    for _ in range(args.rounds):
        for layer, lm in lms.items():
            started = time.perf_counter()
            split_log_probs(lm, valid, "valid")
            scoring[layer].append(len(valid.split("valid")) / (time.perf_counter() - started))
    report("exact scoring of valid", scoring, len(valid.split("valid")))

    steppers = {layer: Stepper(corpus, net, recipe) for layer, (net, recipe) in nets.items()}
    for stepper in steppers.values():
        stepper.tokens_per_second(2, args.batch)  # warm-up
    training: dict[str, list[float]] = {layer: [] for layer in layers}
    for _ in range(args.rounds):
        for layer, stepper in steppers.items():
            steps = max(2, args.steps // 4) if layer == "full" else args.steps
            training[layer].append(stepper.tokens_per_second(steps, args.batch))
    report(f"training steps (batch {args.batch}, recipe adaptive)", training, None)


def load_valid_slice(corpus, tokens: int):
    """The corpus with its valid split cut to its first `tokens` tokens (scoring time, not the whole split)."""
    from dataclasses import replace

    return replace(corpus, valid=corpus.valid[:tokens], whole=None)


def report(what: str, rates: dict[str, list[float]], tokens: int | None) -> None:
    medians = {layer: statistics.median(r) for layer, r in rates.items()}
    base = medians.get("full")
    print(f"{what}{f' ({tokens:,} tokens)' if tokens else ''}, median of {len(next(iter(rates.values())))} "
          f"interleaved rounds; load average now {os.getloadavg()}:")
    for layer, rate in medians.items():
        print(f"  {layer:8s} {rate:12,.0f} tokens/s" + (f"  {rate / base:6.1f}x the full softmax" if base else ""))


if __name__ == "__main__":
    main()
