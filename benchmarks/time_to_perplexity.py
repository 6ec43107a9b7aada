"""Wall time to a target validation perplexity on Brown: nnlm's training against a plain PyTorch one.

Both train MLP1 (by default) on Brown's training split in the same shuffled batches:
- nnlm: `nnlm train`'s own code (a run set up by nnlm.neural.run.pipeline, its trainer's `run_batches`;
  training_path.py) with its default recipe for that loss (`adaptive` for the full softmax, whose
  learning rate stays constant here, since no epoch-end validation steers it; `sampled` for the
  sampled losses; --recipe forces one),
  once per output layer in --loss: the full softmax (`nnlm train`'s default) and the sampled softmax
  (`--loss sampled`, K = 128);
- the reference: the plain PyTorch model of train_speed.py, fp32, torch.optim.SGD at a constant
  learning rate (default 1.0, the best of 0.1 / 0.3 / 1.0 / 3.0 on a short probe; --reference-lr).
The target defaults to the Kneser-Ney 5-gram's validation perplexity, built here with the
project's builder. Validation perplexity is computed with the project's one perplexity function
(fp32 scoring) every --eval-tokens training tokens of each contender. The time counted is training
time only (evaluation is timed and reported separately); a contender is stopped at the target or
after --max-minutes of training. The contenders alternate segment by segment (train, evaluate,
switch), so load from other processes falls on both alike. The curve goes to a PNG.

    PYTHONPATH=src NLTK_DATA=... python benchmarks/time_to_perplexity.py [--threads 1] [--max-minutes 15]

Also timed: each contender's CPU time (time.process_time), which with one thread is close to the
wall time an idle machine would take -- the figure to read when other jobs share the CPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from train_speed import Reference
from training_path import TrainingPath

from nnlm.data.corpus import Corpus, load_corpus
from nnlm.lm import perplexity
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.presets import preset
from nnlm.neural.run.batches import epoch_batches, padded_stream
from nnlm.neural.run.recipes import RECIPES
from nnlm.ngram.build import build_ngram

REPO = Path(__file__).resolve().parents[1]


class Contender:
    """A training run advanced segment by segment, with its curve of (training seconds, valid ppl)."""

    def __init__(self, name: str, corpus: Corpus, cfg: ModelConfig, batch: int, seed: int) -> None:
        self.name, self.corpus, self.cfg, self.batch, self.seed = name, corpus, cfg, batch, seed
        self.k = cfg.order - 1
        self.padded = padded_stream(corpus.train, self.k, corpus.pad_id, torch.device("cpu"))
        self.epoch, self.tokens, self.train_seconds, self.eval_seconds, self.cpu_seconds = 0, 0, 0.0, 0.0, 0.0
        self.curve: list[dict] = []
        self._batches = iter(())

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        for contexts, targets in self._batches:
            return contexts, targets
        if self.tokens:  # the epoch's batches are used up
            self.epoch += 1
        self.start_epoch(self.epoch)
        self._batches = epoch_batches(self.padded, self.k, self.batch, self.seed, self.epoch)
        return next(self._batches)

    def train_tokens(self, tokens: int) -> None:
        self.train_mode()
        start, cpu_start, goal = time.perf_counter(), time.process_time(), self.tokens + tokens
        while self.tokens < goal:
            contexts, targets = self._next_batch()
            self.step(contexts, targets)
            self.tokens += len(targets)
        self.train_seconds += time.perf_counter() - start
        self.cpu_seconds += time.process_time() - cpu_start

    def evaluate(self) -> float:
        start = time.perf_counter()
        ppl = perplexity(self.language_model(), self.corpus, "valid")
        self.eval_seconds += time.perf_counter() - start
        self.curve.append({"train_seconds": round(self.train_seconds, 1), "cpu_seconds": round(self.cpu_seconds, 1),
                           "load": round(os.getloadavg()[0], 2), "tokens": self.tokens,
                           "epochs": round(self.tokens / len(self.corpus.train), 3), "valid_ppl": round(ppl, 2)})
        return ppl

    def start_epoch(self, epoch: int) -> None: ...
    def train_mode(self) -> None: ...
    def step(self, contexts: torch.Tensor, targets: torch.Tensor) -> None: ...
    def language_model(self) -> NeuralLM: ...


class NnlmContender(Contender):
    """`nnlm train` itself: a run set up by nnlm.neural.run.pipeline, trained by its single-process trainer's
    `run_batches` (training_path.py) with the run's loss (full softmax, or sampled / nce) and recipe."""

    def __init__(self, corpus: Corpus, cfg: ModelConfig, batch: int, seed: int, options: dict) -> None:
        self.work = tempfile.TemporaryDirectory()
        self.path = TrainingPath.new(Path(self.work.name) / "run", {"corpus": "brown", "batch_size": batch,
                                                                "seed": seed} | options)
        run = self.path.run
        what = f", {run.loss} softmax K={run.samples}" if run.loss != "full" else ", bf16 output layer" \
            if run.bf16 else ""
        super().__init__(f"nnlm ({run.recipe}{what})", corpus, cfg, batch, seed)

    def train_tokens(self, tokens: int) -> None:
        start, cpu_start = time.perf_counter(), time.process_time()
        self.tokens += self.path.advance(examples=tokens)
        self.train_seconds += time.perf_counter() - start
        self.cpu_seconds += time.process_time() - cpu_start

    def language_model(self) -> NeuralLM:
        return NeuralLM(self.path.trainer.net, self.corpus.vocab, self.corpus.pad_token)


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


def plot(results: dict[str, dict], target: float, threads: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in results.items():
        ax.plot([p["train_seconds"] / 60 for p in r["curve"]], [p["valid_ppl"] for p in r["curve"]], "o-", ms=3,
                label=name)
    ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.2f} (KN5 valid)")
    ax.set_xlabel("training wall time (minutes; evaluation excluded)")
    ax.set_ylabel("validation perplexity")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(f"MLP1 on Brown, {threads} thread(s): time to the target validation perplexity", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(c: Contender, reached: float | None, reached_cpu: float | None) -> dict:
    return {"curve": c.curve, "reached_seconds": reached, "reached_cpu_seconds": reached_cpu,
            "train_seconds": round(c.train_seconds, 1), "cpu_seconds": round(c.cpu_seconds, 1),
            "eval_seconds": round(c.eval_seconds, 1), "tokens_per_second": round(c.tokens / c.train_seconds)}


def report(results: dict[str, dict], target: float, threads: int, png: Path) -> None:
    """Each contender's time to the target, nnlm's ratio to the reference, and the curve."""
    print(f"target {target:.2f}:")
    for name, r in results.items():
        said = (f"reached in {r['reached_seconds'] / 60:.2f} min" if r["reached_seconds"] is not None
                else f"not reached in {r['train_seconds'] / 60:.2f} min")
        print(f"  {name:<36} {said} of training wall time (CPU time {r['cpu_seconds'] / 60:.2f} min to "
              f"{r['curve'][-1]['epochs']} epochs; {r['tokens_per_second']:,} tokens/s; "
              f"{r['eval_seconds'] / 60:.1f} min of evaluation besides)")
    ref = next((r for name, r in results.items() if not name.startswith("nnlm")), None)
    for name, mine in results.items():
        if not name.startswith("nnlm") or ref is None or mine["reached_seconds"] is None:
            continue
        if ref["reached_seconds"] is not None:
            print(f"{name} reaches it {ref['reached_seconds'] / mine['reached_seconds']:.1f}x sooner than the plain "
                  f"reference (in CPU time: {ref['reached_cpu_seconds'] / mine['reached_cpu_seconds']:.1f}x)")
        else:
            print(f"{name} reaches it more than {ref['train_seconds'] / mine['reached_seconds']:.1f}x sooner than "
                  "the plain reference (in CPU time: more than "
                  f"{ref['cpu_seconds'] / mine['reached_cpu_seconds']:.1f}x;"
                  " the reference did not reach it within its cap, so these are lower bounds)")
    plot(results, target, threads, png)
    print(f"curve: {png}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recipe", default=None, choices=sorted(RECIPES),
                    help="default: nnlm train's default for each loss (adaptive for full, sampled otherwise)")
    ap.add_argument("--loss", default="full,sampled",
                    help="nnlm contenders by output layer (full, sampled, nce), comma-separated (default full,sampled)")
    ap.add_argument("--samples", type=int, default=128, help="K for the sampled / nce contenders")
    ap.add_argument("--reference-lr", type=float, default=1.0)
    ap.add_argument("--target", type=float, default=None, help="default: the KN5 validation perplexity")
    ap.add_argument("--max-minutes", type=float, default=15.0, help="training-time cap for each contender")
    ap.add_argument("--cap-clock", choices=("wall", "cpu"), default="wall",
                    help="what --max-minutes counts: training wall time, or its CPU time (for a loaded machine)")
    ap.add_argument("--eval-tokens", type=int, default=200_000, help="training tokens between evaluations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--contender", choices=("both", "nnlm", "reference"), default="both",
                    help="train only one (e.g. two processes side by side, each with --json; then --merge)")
    ap.add_argument("--png", type=Path, default=REPO / "docs" / "time_to_perplexity.png")
    ap.add_argument("--json", type=Path, default=None, help="also write the curves here")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, help="only report and plot these --json files")
    args = ap.parse_args()
    if args.merge:
        loaded = [json.loads(p.read_text()) for p in args.merge]
        report({k: v for d in loaded for k, v in d["results"].items()}, loaded[0]["target"], loaded[0]["threads"],
               args.png)
        return
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    target = args.target
    if target is None:
        start = time.perf_counter()
        target = perplexity(build_ngram("kn", corpus, 5), corpus, "valid")
        print(f"target: KN5 validation perplexity {target:.2f} "
              f"(built and scored in {time.perf_counter() - start:.1f} s)")
    cfg = preset(args.preset, len(corpus.vocab))
    contenders: list[Contender] = []
    if args.contender in ("both", "nnlm"):
        for loss in (name.strip() for name in args.loss.split(",") if name.strip()):
            options = {"preset": args.preset, "loss": loss} | ({} if loss == "full" else {"samples": args.samples}) \
                | ({"recipe": args.recipe} if args.recipe else {})
            contenders.append(NnlmContender(corpus, cfg, args.batch_size, args.seed, options))
    if args.contender in ("both", "reference"):
        contenders.append(ReferenceContender(corpus, cfg, args.batch_size, args.seed, args.reference_lr))
    print(f"{args.preset}, batch {args.batch_size}, {args.threads} thread(s), evaluation every {args.eval_tokens:,} "
          f"tokens, cap {args.max_minutes:g} min of training each; load average {os.getloadavg()[0]:.2f}")
    reached: dict[str, tuple[float, float] | None] = {c.name: None for c in contenders}
    active = list(contenders)
    while active:
        for c in list(active):
            c.train_tokens(args.eval_tokens)
            ppl = c.evaluate()
            print(f"  {c.name:<36} {c.tokens / len(corpus.train):5.2f} epochs  {c.train_seconds / 60:5.2f} min "
                  f"(CPU {c.cpu_seconds / 60:5.2f})  valid ppl {ppl:8.2f}  "
                  f"({c.tokens / c.train_seconds:,.0f} tokens/s; "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
            if ppl <= target:
                reached[c.name] = (c.train_seconds, c.cpu_seconds)
                active.remove(c)
            elif (c.cpu_seconds if args.cap_clock == "cpu" else c.train_seconds) >= 60 * args.max_minutes \
                    or not math.isfinite(ppl):
                active.remove(c)
    results = {c.name: summary(c, *(reached[c.name] or (None, None))) for c in contenders}
    if args.json:
        curves = {"target": target, "threads": args.threads, "results": results}
        args.json.write_text(json.dumps(curves, indent=1) + "\n")
    report(results, target, args.threads, args.png)


if __name__ == "__main__":
    main()
