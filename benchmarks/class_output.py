"""The class-factored output layer against the full softmax, in one run: exact scoring and training speed.

1. Exact scoring of Brown valid + test (every token, as `nnlm eval` scores them: `split_log_probs`, with
   the full softmax's per-position direct tables where they pay) at the MLP1 shape, full softmax vs
   class-factored (K = about sqrt(|V|) exchange classes of train), in interleaved rounds; the ratio
   of the medians. Untrained weights (seed 0) unless `--full RUN --classes RUN` name trained runs.
2. Training tokens/s of the trainer's own step (loss, backward, optimizer step) for the full softmax
   (bf16 where the recipe's default takes it), the sampled softmax (`--loss sampled`, 128 samples), the
   class-factored layer, and the class-factored layer with every class padded to the largest (the
   measured alternative to grouping the tokens by class: `within_class_log_probs_padded`).

    PYTHONPATH=src NLTK_DATA=/work/shared/nltk_data python benchmarks/class_output.py
    PYTHONPATH=src NLTK_DATA=... python benchmarks/class_output.py --full runs/mlp1 --classes runs/mlp1-classes
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
from nnlm.lm import perplexity_from_log_probs, split_log_probs
from nnlm.neural.net.class_output import ClassNPLM, within_class_log_probs_padded
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.nets import build_net, language_model
from nnlm.neural.net.output_clustering import default_class_count, output_classes
from nnlm.neural.net.sampled import RowAdam, SampledLoss, initial_bias, proposal
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.config import DEFAULT_SAMPLES
from nnlm.neural.run.pipeline import build_optimizer
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.run_config import bf16_is_fast, model_config


def padded_class_loss(net: ClassNPLM, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool) -> torch.Tensor:
    """The class-factored loss with the within-class softmax padded to the largest class."""
    x = net.features(contexts)
    zs, _ = net.output_operands_from_features(x)
    class_lp = torch.log_softmax(net.class_logits(zs, len(x)), dim=1).gather(1, net.word_class[targets][:, None])
    return -(class_lp[:, 0] + within_class_log_probs_padded(net, zs, targets)).mean()


class Stepper:
    """Training steps of one output layer at MLP1's shape on Brown batches: the trainer's loss and optimizer."""

    def __init__(self, corpus, kind: str, classes: np.ndarray) -> None:
        torch.manual_seed(0)
        loss = "sampled" if kind == "sampled" else "full"
        recipe = RECIPES["sampled" if loss == "sampled" else "adaptive"]
        layer = "classes" if kind.startswith("classes") else "full"
        config = model_config({"preset": "mlp1", "output_layer": layer, "output_classes": int(classes.max()) + 1},
                              len(corpus.vocab))
        self.net = build_net(config, recipe.dropout_x, recipe.dropout_h)
        self.bf16 = kind == "full" and recipe.bf16 and bf16_is_fast(torch.device("cpu"))
        if kind == "sampled":
            self.loss = SampledLoss("sampled", proposal(corpus.train, len(corpus.vocab)), DEFAULT_SAMPLES)
            self.optimizer = RowAdam(self.net, self.loss, recipe.lr, recipe.weight_decay)
            with torch.no_grad():
                self.net.b.copy_(initial_bias(corpus.train, len(corpus.vocab)))
        else:
            self.loss = padded_class_loss if kind == "classes-padded" else batch_loss
            self.optimizer = build_optimizer(self.net, recipe, recipe.lr)
            if layer == "classes":
                self.net.set_classes(classes)
        self.k = config.order - 1
        self.ids = torch.as_tensor(corpus.train.astype(np.int64))
        self.order = torch.from_numpy(np.random.default_rng(0).permutation(len(self.ids) - self.k)) + self.k
        self.window = torch.arange(-self.k, 1)
        self.position = 0

    def seconds_per_step(self, steps: int, batch: int) -> float:
        self.net.train()
        started = time.perf_counter()
        for _ in range(steps):
            i = self.position % (len(self.order) // batch)
            rows = self.ids[self.order[i * batch:(i + 1) * batch, None] + self.window]
            loss = self.loss(self.net, rows[:, :self.k], rows[:, self.k], self.bf16)
            self.net.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step(i * batch, batch)
            self.position += 1
        return (time.perf_counter() - started) / steps


def scoring_models(corpus, classes: np.ndarray, full_run: str | None, classes_run: str | None):
    if full_run or classes_run:
        from nnlm.loading import load

        if not (full_run and classes_run):
            raise SystemExit("give both --full and --classes, or neither")
        return load(full_run), load(classes_run)
    torch.manual_seed(0)
    full = NPLM(model_config({"preset": "mlp1"}, len(corpus.vocab)))
    factored = build_net(model_config({"preset": "mlp1-classes", "output_classes": int(classes.max()) + 1},
                                      len(corpus.vocab)))
    factored.set_classes(classes)
    return (language_model(full, corpus.vocab, corpus.pad_token),
            language_model(factored, corpus.vocab, corpus.pad_token))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of each measurement (median)")
    ap.add_argument("--steps", type=int, default=40, help="training steps per round and output layer")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--full", help="a trained full-softmax run directory to score (else untrained MLP1)")
    ap.add_argument("--classes", help="a trained class-factored run directory to score")
    ap.add_argument("--skip-scoring", action="store_true")
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; load average at start {os.getloadavg()}")
    corpus = load_corpus("brown")
    v = len(corpus.vocab)
    started = time.perf_counter()
    classes = output_classes("exchange", corpus.train, v, default_class_count(v))
    print(f"|V| = {v}, K = {int(classes.max()) + 1} exchange classes of train in {time.perf_counter() - started:.1f} s "
          f"(largest {np.bincount(classes).max()} words)")

    if not args.skip_scoring:
        full, factored = scoring_models(corpus, classes, args.full, args.classes)
        times: dict[str, list[float]] = {"full softmax": [], "class-factored": []}
        tokens = len(corpus.split("valid")) + len(corpus.split("test"))
        for _ in range(args.rounds):
            for name, lm in (("full softmax", full), ("class-factored", factored)):
                started = time.perf_counter()
                log_probs = np.concatenate([split_log_probs(lm, corpus, split) for split in ("valid", "test")])
                times[name].append(time.perf_counter() - started)
                print(f"  scoring {name}: {times[name][-1]:.2f} s for {tokens} tokens, "
                      f"perplexity {perplexity_from_log_probs(log_probs):.2f}")
        full_s, class_s = statistics.median(times["full softmax"]), statistics.median(times["class-factored"])
        print(f"exact scoring of valid + test ({tokens} tokens), median of {args.rounds}: full softmax {full_s:.2f} s "
              f"({tokens / full_s:,.0f} tok/s), class-factored {class_s:.2f} s ({tokens / class_s:,.0f} tok/s): "
              f"{full_s / class_s:.1f}x faster; load average now {os.getloadavg()}")

    if not args.skip_training:
        kinds = ("full", "sampled", "classes", "classes-padded")
        steppers = {kind: Stepper(corpus, kind, classes) for kind in kinds}
        for stepper in steppers.values():
            stepper.seconds_per_step(3, args.batch)  # warm-up
        seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind, stepper in steppers.items():
                seconds[kind].append(stepper.seconds_per_step(args.steps, args.batch))
        full_step = statistics.median(seconds["full"])
        print(f"training, batch {args.batch}, median of {args.rounds} rounds of {args.steps} steps "
              f"(loss, backward, optimizer step):")
        for kind in kinds:
            step = statistics.median(seconds[kind])
            label = {"full": f"full softmax{' (bf16)' if steppers['full'].bf16 else ''}",
                     "sampled": f"sampled softmax ({DEFAULT_SAMPLES} samples)",
                     "classes": "class-factored (tokens grouped by class)",
                     "classes-padded": "class-factored, classes padded to the largest"}[kind]
            print(f"  {label:48s} {1e3 * step:7.1f} ms/step {args.batch / step:9,.0f} tok/s "
                  f"{full_step / step:5.2f}x the full softmax")
        print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
