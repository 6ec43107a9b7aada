"""Wall time to a target validation perplexity on Brown: nnlm's training against a plain PyTorch one.

Both train MLP1 (by default) on Brown's training split in the same shuffled batches:
- nnlm: the step `nnlm train` runs (`train_step`), its default recipe (`modern`: Adam with weight
  decay, dropout, learning rate x 0.7 per epoch, bf16 output layer where the CPU has bf16);
- the reference: the plain PyTorch model of train_speed.py, fp32, torch.optim.SGD at a constant
  learning rate (default 0.3, the best of 0.1 / 0.3 / 1.0 on a short probe; --reference-lr).
The target defaults to the Kneser-Ney 5-gram's validation perplexity, built here with the
project's builder. Validation perplexity is computed with the project's one perplexity function
(fp32 scoring) every --eval-tokens training tokens of each contender. The time counted is training
time only (evaluation is timed and reported separately); a contender is stopped at the target or
after --max-minutes of training. The contenders alternate segment by segment (train, evaluate,
switch), so load from other processes falls on both alike. The curve goes to a PNG.

    PYTHONPATH=src NLTK_DATA=... python benchmarks/time_to_perplexity.py [--threads 1] [--max-minutes 15]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from nnlm.data.corpus import Corpus, load_corpus
from nnlm.lm import perplexity
from nnlm.neural import train as tr
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM
from nnlm.neural.presets import preset
from nnlm.ngram.build import build_ngram
from train_speed import Reference

REPO = Path(__file__).resolve().parents[1]


class Contender:
    """A training run advanced segment by segment, with its curve of (training seconds, valid ppl)."""

    def __init__(self, name: str, corpus: Corpus, cfg: ModelConfig, batch: int, seed: int) -> None:
        self.name, self.corpus, self.cfg, self.batch, self.seed = name, corpus, cfg, batch, seed
        self.k = cfg.order - 1
        self.padded = tr.padded_stream(corpus.train, self.k, corpus.pad_id, torch.device("cpu"))
        self.epoch, self.tokens, self.train_seconds, self.eval_seconds = 0, 0, 0.0, 0.0
        self.curve: list[dict] = []
        self._batches = iter(())

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        for contexts, targets in self._batches:
            return contexts, targets
        if self.tokens:  # the epoch's batches are used up
            self.epoch += 1
        self.start_epoch(self.epoch)
        self._batches = tr.epoch_batches(self.padded, self.k, self.batch, self.seed, self.epoch)
        return next(self._batches)

    def train_tokens(self, tokens: int) -> None:
        self.train_mode()
        start, goal = time.perf_counter(), self.tokens + tokens
        while self.tokens < goal:
            contexts, targets = self._next_batch()
            self.step(contexts, targets)
            self.tokens += len(targets)
        self.train_seconds += time.perf_counter() - start

    def evaluate(self) -> float:
        start = time.perf_counter()
        ppl = perplexity(self.language_model(), self.corpus, "valid")
        self.eval_seconds += time.perf_counter() - start
        self.curve.append({"train_seconds": round(self.train_seconds, 1), "tokens": self.tokens,
                           "epochs": round(self.tokens / len(self.corpus.train), 3), "valid_ppl": round(ppl, 2)})
        return ppl

    def start_epoch(self, epoch: int) -> None: ...
    def train_mode(self) -> None: ...
    def step(self, contexts: torch.Tensor, targets: torch.Tensor) -> None: ...
    def language_model(self) -> NeuralLM: ...


class NnlmContender(Contender):
    def __init__(self, corpus: Corpus, cfg: ModelConfig, batch: int, seed: int, recipe: tr.Recipe, bf16: bool) -> None:
        super().__init__(f"nnlm ({recipe.name}{', bf16' if bf16 else ''})", corpus, cfg, batch, seed)
        torch.manual_seed(seed)
        self.recipe, self.bf16 = recipe, bf16
        self.net = NPLM(cfg, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
        self.optimizer = tr.build_optimizer(self.net, recipe, recipe.lr)

    def start_epoch(self, epoch: int) -> None:
        self.optimizer.lr = self.recipe.lr * self.recipe.lr_gamma ** epoch

    def train_mode(self) -> None:
        self.net.train()

    def step(self, contexts: torch.Tensor, targets: torch.Tensor) -> None:
        tr.train_step(self.net, self.optimizer, contexts, targets, self.bf16, self.tokens)

    def language_model(self) -> NeuralLM:
        return NeuralLM(self.net, self.corpus.vocab, self.corpus.pad_token)


class ReferenceContender(Contender):
    def __init__(self, corpus: Corpus, cfg: ModelConfig, batch: int, seed: int, lr: float) -> None:
        super().__init__(f"plain PyTorch (fp32, SGD lr {lr:g})", corpus, cfg, batch, seed)
        torch.manual_seed(seed)
        self.model = Reference(cfg)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)

    def train_mode(self) -> None:
        self.model.train()

    def step(self, contexts: torch.Tensor, targets: torch.Tensor) -> None:
        loss = F.cross_entropy(self.model(contexts), targets)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def language_model(self) -> NeuralLM:
        """The same function as an NPLM (C, W, b, H, d, U copied over), scored by nnlm's scorer."""
        m, net = self.model, NPLM(self.cfg)
        with torch.no_grad():
            net.C.copy_(m.embed.weight)
            if m.direct is not None:
                net.W.copy_(m.direct.weight)
                net.b.copy_(m.direct.bias)
            if m.hidden is not None:
                net.H.copy_(m.hidden.weight)
                net.d.copy_(m.hidden.bias)
                net.U.copy_(m.out.weight)
                if m.direct is None:
                    net.b.copy_(m.out.bias)
        return NeuralLM(net, self.corpus.vocab, self.corpus.pad_token)


def plot(contenders: list[Contender], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in contenders:
        ax.plot([p["train_seconds"] / 60 for p in c.curve], [p["valid_ppl"] for p in c.curve], "o-", ms=3, label=c.name)
    ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.2f} (KN5 valid)")
    ax.set_xlabel("training time (minutes; evaluation excluded)")
    ax.set_ylabel("validation perplexity")
    ax.set_yscale("log")
    ax.set_ylim(top=min(ax.get_ylim()[1], 2000))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(f"Brown, {torch.get_num_threads()} thread(s): time to the target validation perplexity")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recipe", default="modern", choices=sorted(tr.RECIPES))
    ap.add_argument("--reference-lr", type=float, default=0.3)
    ap.add_argument("--target", type=float, default=None, help="default: the KN5 validation perplexity")
    ap.add_argument("--max-minutes", type=float, default=15.0, help="training-time cap for each contender")
    ap.add_argument("--eval-tokens", type=int, default=200_000, help="training tokens between evaluations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png", type=Path, default=REPO / "docs" / "time_to_perplexity.png")
    ap.add_argument("--json", type=Path, default=None, help="also write the curves here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    target = args.target
    if target is None:
        start = time.perf_counter()
        target = perplexity(build_ngram("kn", corpus, 5), corpus, "valid")
        print(f"target: KN5 validation perplexity {target:.2f} (built and scored in {time.perf_counter() - start:.1f} s)")
    cfg = preset(args.preset, len(corpus.vocab))
    recipe = tr.RECIPES[args.recipe]
    bf16 = recipe.bf16 and tr.bf16_is_fast(torch.device("cpu"))
    contenders: list[Contender] = [NnlmContender(corpus, cfg, args.batch_size, args.seed, recipe, bf16),
                                   ReferenceContender(corpus, cfg, args.batch_size, args.seed, args.reference_lr)]
    print(f"{args.preset}, batch {args.batch_size}, {args.threads} thread(s), evaluation every {args.eval_tokens:,} "
          f"tokens, cap {args.max_minutes:g} min of training each; load average {os.getloadavg()[0]:.2f}")
    reached: dict[str, float | None] = {c.name: None for c in contenders}
    active = list(contenders)
    while active:
        for c in list(active):
            c.train_tokens(args.eval_tokens)
            ppl = c.evaluate()
            print(f"  {c.name:<34} {c.tokens / len(corpus.train):5.2f} epochs  {c.train_seconds / 60:5.2f} min  "
                  f"valid ppl {ppl:8.2f}  ({c.tokens / c.train_seconds:,.0f} tokens/s; load {os.getloadavg()[0]:.1f})",
                  flush=True)
            if ppl <= target:
                reached[c.name] = c.train_seconds
                active.remove(c)
            elif c.train_seconds >= 60 * args.max_minutes or not math.isfinite(ppl):
                active.remove(c)
    print(f"target {target:.2f}:")
    for c in contenders:
        when = reached[c.name]
        said = f"reached in {when / 60:.2f} min" if when is not None else f"not reached in {c.train_seconds / 60:.2f} min"
        print(f"  {c.name:<34} {said} of training ({c.tokens / c.train_seconds:,.0f} tokens/s; "
              f"{c.eval_seconds / 60:.1f} min of evaluation besides)")
    mine, ref = (reached[c.name] for c in contenders)
    if mine is not None:
        if ref is not None:
            print(f"nnlm reaches it {ref / mine:.1f}x sooner than the plain reference")
        else:
            print(f"nnlm reaches it more than {contenders[1].train_seconds / mine:.1f}x sooner than the plain "
                  "reference (which did not reach it within its cap: a lower bound)")
    plot(contenders, target, args.png)
    print(f"curve: {args.png}")
    if args.json:
        args.json.write_text(json.dumps({"target": target, "threads": args.threads,
                                         "curves": {c.name: c.curve for c in contenders}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
