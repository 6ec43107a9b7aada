"""Speed of `nnlm generate`'s drawing: the current loop against the one it replaced, and torch's threads.

Run from the repository root (about 2-4 minutes; the neural rows are the slow ones under load):
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/generate_speed.py [--tokens N]

One text is sequential (each token is the next one's context), so a draw is one model call on one
context plus the sampling. Measured, in this run, one after the other, on Brown's vocabulary (17,907
words): a Kneser-Ney trigram and an MLP1-shaped NPLM (random weights: its speed does not depend on
them), each with (a) the previous loop, a `Generator.choice(p=...)` per token after a log / exp pass,
and (b) `nnlm.use.sample`, uniforms drawn in blocks and the word by inverse CDF; both must give the
same words. Then the NPLM's draw at each torch thread count: one row's matrix-vector products gain
little from threads and lose much when other processes share the cores, which is why `nnlm generate`
lets nnlm.threads choose the count. Prints microseconds per token, the ratios, the load and the CPU.
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator

import numpy as np
import torch
from host import cpu_name

from nnlm.data.corpus import load_corpus
from nnlm.lm import LanguageModel
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.presets import preset
from nnlm.ngram.build import build_ngram
from nnlm.use import next_context, sample


def previous_draw(model: LanguageModel, history: list[str], tokens: int, temperature: float, top_k: int | None,
                  rng: np.random.Generator) -> Iterator[str]:
    """The loop `nnlm generate` ran before: the reference the current one must match word for word."""
    k = model.context_size
    for _ in range(tokens):
        p = model.distribution(next_context(model, history)[None, :])[0]
        if not np.all(np.isfinite(p)):
            raise ValueError("non-finite probability")
        logits = np.log(np.maximum(p, 1e-300))
        logits = (logits - logits.max()) / temperature
        if top_k is not None:
            cut = np.partition(logits, -top_k)[-top_k]
            logits = np.where(logits >= cut, logits, -np.inf)
        q = np.exp(logits)
        q /= q.sum()
        word = model.vocab.tokens[int(rng.choice(len(q), p=q))]
        history.append(word)
        del history[:-k - 1]
        yield word


def timed(draw: Iterator[str]) -> tuple[list[str], float]:
    start = time.perf_counter()
    words = list(draw)
    return words, time.perf_counter() - start



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per measurement (default 1000)")
    args = parser.parse_args()
    corpus = load_corpus("brown")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load before: {os.getloadavg()[0]:.2f}")
    torch.manual_seed(0)
    net = NPLM(preset("mlp1", len(corpus.vocab))).eval()
    models = {"KN3": build_ngram("kn", corpus, 3),
              "MLP1 shape": NeuralLM(net, corpus.vocab, corpus.pad_token)}
    torch.set_num_threads(1)
    print(f"\n{args.tokens} tokens each, 1 torch thread; us per token (ratio: previous / current)")
    for name, model in models.items():
        for temperature, top_k in ((1.0, None), (0.8, 40)):
            old, t_old = timed(previous_draw(model, [], args.tokens, temperature, top_k, np.random.default_rng(1)))
            new, t_new = timed(sample(model, [], args.tokens, temperature, top_k, 1))
            print(f"  {name:<11} T={temperature:g} top-k={top_k}: previous {1e6 * t_old / args.tokens:7.0f}  "
                  f"current {1e6 * t_new / args.tokens:7.0f}  ({t_old / t_new:.2f}x)  same words: {old == new}")
    print("\nMLP1 shape, current loop, by torch thread count (load now "
          f"{os.getloadavg()[0]:.2f}): us per token")
    model = models["MLP1 shape"]
    for threads in range(1, (os.cpu_count() or 1) + 1):
        torch.set_num_threads(threads)
        _, seconds = timed(sample(model, [], args.tokens, 1.0, None, 1))
        print(f"  {threads} thread{'s' if threads > 1 else ''}: {1e6 * seconds / args.tokens:7.0f}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
