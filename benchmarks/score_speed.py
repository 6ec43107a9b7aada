"""Scoring speed of `nnlm score` (nnlm.use.score_lines) with an MLP1-shaped model on a 100k-token
text, against a plain reference measured in the same run: a loop over the lines that calls the
network once per token (one context row at a time), the way a naive scorer would.

The model is an untrained MLP1 (n=5, h=50, m=60, direct) over Brown's vocabulary: the speed does
not depend on the weights. The text is the first 100k tokens of Brown's test split, one paragraph
per line, as `nnlm score` reads it.

    PYTHONPATH=src python benchmarks/score_speed.py --tokens 100000 --threads 1
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import PARAGRAPH
from nnlm.neural.model import NPLM, NeuralLM
from nnlm.neural.presets import preset
from nnlm.use import line_tokens, score_lines, start_token


def brown_lines(tokens: int) -> tuple[list[str], NeuralLM]:
    corpus = load_corpus("brown")
    torch.manual_seed(0)
    model = NeuralLM(NPLM(preset("mlp1", len(corpus.vocab))), corpus.vocab, corpus.pad_token)
    words = corpus.vocab.decode(corpus.test[:tokens])
    lines, current = [], []
    for w in words:  # benchmark setup, not the measured path
        if w == PARAGRAPH:
            if current:
                lines.append(" ".join(current))
            current = []
        elif not w.startswith("<text"):
            current.append(w)
    if current:
        lines.append(" ".join(current))
    return lines, model


@torch.no_grad()
def reference_score(model: NeuralLM, lines: list[str], max_tokens: int) -> tuple[int, float]:
    """Per line, per token: build the context, one forward pass of one row, log-softmax, pick."""
    net, vocab, k = model.net.eval(), model.vocab, model.context_size
    history = [vocab.id(start_token(vocab))] * k
    done, total = 0, 0.0
    for line in lines:
        for w in line_tokens(line):
            target = vocab.id(w)
            y = net(torch.tensor([history[-k:]]))[0]
            total += float(torch.log_softmax(y, dim=0)[target])
            history.append(target)
            done += 1
            if done >= max_tokens:
                return done, total
    return done, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000, help="size of the scored text (Brown test tokens)")
    ap.add_argument("--reference-tokens", type=int, default=3_000,
                    help="tokens the slow reference scores (its rate is measured on this prefix)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lines, model = brown_lines(args.tokens)
    n_tokens = sum(len(line.split()) + 1 for line in lines)

    t0 = time.perf_counter()
    scores, _ = score_lines(model, lines)
    batched_s = time.perf_counter() - t0
    batched = n_tokens / batched_s

    t0 = time.perf_counter()
    ref_tokens, ref_total = reference_score(model, lines, args.reference_tokens)
    reference = ref_tokens / (time.perf_counter() - t0)
    ours = np.concatenate([s.word_log10 for s in scores])[:ref_tokens].sum() / np.log10(np.e)
    assert abs(ours - ref_total) < 1e-3 * max(1.0, abs(ref_total)), (ours, ref_total)  # same numbers

    print(f"MLP1 shape (|V| = {len(model.vocab):,}), {args.threads} thread(s), "
          f"{n_tokens:,} tokens in {len(lines):,} lines")
    print(f"  reference, one row per call   {reference:10,.0f} tokens/s  1.00x  "
          f"(measured on {ref_tokens:,} tokens; {n_tokens / reference:,.0f} s for the whole text)")
    print(f"  nnlm score_lines (batched)    {batched:10,.0f} tokens/s  {batched / reference:.1f}x  "
          f"({batched_s:.2f} s for the whole text)")


if __name__ == "__main__":
    main()
