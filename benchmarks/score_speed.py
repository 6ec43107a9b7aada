"""Scoring speed of `nnlm score` (nnlm.use.score_lines) with an MLP1-shaped model on a 100k-token
text, against a plain reference measured in the same run: a loop over the lines that calls the
network once per token (one context row at a time), the way a naive scorer would.

Also the exact fp32 split scoring of `nnlm eval` (NeuralLM.log_prob on Brown test contexts) against
the CPU's large-matrix fp32 product rate measured in the same run with the same threads (a 2048^3
product): exact scoring costs 2 K |V| FLOPs per token in its output product (K = (n-1)m + h), so
tokens/s x 2 K |V| / that rate is the fraction of the hardware's matmul speed it reaches. The
previous implementation (256-row blocks, two products, torch.logsumexp) is timed alongside.

The model is an untrained MLP1 (n=5, h=50, m=60, direct) over Brown's vocabulary: the speed does
not depend on the weights. The text is the first 100k tokens of Brown's test split, one paragraph
per line, as `nnlm score` reads it.

    PYTHONPATH=src python benchmarks/score_speed.py --tokens 100000 [--threads 1] [--split-tokens 100000]

Without --threads, the thread governor chooses (as `nnlm eval` does).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from nnlm import threads
from nnlm.data.corpus import load_corpus
from nnlm.data.tokenize import tokens_to_score
from nnlm.data.vocab import PARAGRAPH, start_token
from nnlm.lm import contexts
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.presets import preset
from nnlm.use import score_lines


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
        for w in tokens_to_score(line):
            target = vocab.id(w)
            y = net(torch.tensor([history[-k:]]))[0]
            total += float(torch.log_softmax(y, dim=0)[target])
            history.append(target)
            done += 1
            if done >= max_tokens:
                return done, total
    return done, total


def large_matmul_rate(seconds: float = 1.0, size: int = 2048) -> tuple[float, float]:
    """(FLOPs, seconds) of large square fp32 products on the current threads: the practical peak."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    c = torch.empty(size, size)
    torch.mm(a, b, out=c)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        torch.mm(a, b, out=c)
        done += 1
    return 2 * size ** 3 * done, time.perf_counter() - started


@torch.no_grad()
def previous_exact(model: NeuralLM, ctx: np.ndarray, targets: np.ndarray, rows: int = 256) -> np.ndarray:
    """The exact path before: 256-row blocks, y from two addmm (W x, then U tanh), torch.logsumexp."""
    net, c, t = model.net.eval(), torch.as_tensor(ctx), torch.as_tensor(targets)
    out = np.empty(len(t))
    for lo in range(0, len(t), rows):
        y = net(c[lo:lo + rows])
        out[lo:lo + len(y)] = (y.gather(1, t[lo:lo + rows, None])[:, 0] - torch.logsumexp(y, 1)).double().numpy()
    return out


def split_scoring(model: NeuralLM, tokens: int, slice_tokens: int = 10_000) -> None:
    """Exact fp32 scoring of Brown test contexts, as `nnlm eval` runs it, against the matmul rate.
    Slices of the text alternate with ~1 s of large products (and the previous path on a fifth of
    each slice), so that load from other processes falls on all three alike."""
    corpus = load_corpus("brown")
    start = corpus.split_offset("test")
    positions = np.arange(start, start + min(tokens, len(corpus.test)))
    ctx = contexts(corpus.stream(), positions, model.context_size, corpus.pad_id)
    targets = corpus.stream()[positions].astype(np.int64)
    cfg = model.config
    flops = 2 * ((cfg.input_size if cfg.direct else 0) + cfg.hidden) * cfg.vocab_size
    model.log_prob(ctx[:2048], targets[:2048])  # warm-up (allocator, OpenMP team)
    totals = {"matmul": [0.0, 0.0], "fast": [0, 0.0], "previous": [0, 0.0]}
    for lo in range(0, len(targets), slice_tokens):
        done, seconds = large_matmul_rate()
        totals["matmul"][0] += done
        totals["matmul"][1] += seconds
        c, t = ctx[lo:lo + slice_tokens], targets[lo:lo + slice_tokens]
        t0 = time.perf_counter()
        ours = model.log_prob(c, t)
        totals["fast"][0] += len(t)
        totals["fast"][1] += time.perf_counter() - t0
        few = len(t) // 5
        t0 = time.perf_counter()
        before = previous_exact(model, c[:few], t[:few])
        totals["previous"][0] += few
        totals["previous"][1] += time.perf_counter() - t0
        assert np.allclose(ours[:few], before, rtol=1e-5, atol=1e-5), np.abs(ours[:few] - before).max()  # same numbers
    rate = totals["matmul"][0] / totals["matmul"][1]
    print(f"exact fp32 split scoring (nnlm eval), {len(targets):,} Brown test tokens, "
          f"{flops / 1e6:.1f} MFLOP per token; large fp32 matmul {rate / 1e9:.1f} GFLOP/s (interleaved)")
    for name in ("previous", "fast"):
        speed = totals[name][0] / totals[name][1]
        label = "previous (256 rows, 2 products)" if name == "previous" else "nnlm eval now"
        print(f"  {label:<32} {speed:10,.0f} tokens/s  {speed * flops / 1e9:6.1f} GFLOP/s  "
              f"{speed * flops / rate:5.1%} of the large-matmul rate")
    fast = totals["fast"][0] / totals["fast"][1]
    both = len(corpus.valid) + len(corpus.test)
    print(f"  -> Brown valid + test ({both:,} tokens, `nnlm eval`'s default) at this speed: {both / fast:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000, help="size of the scored text (Brown test tokens)")
    ap.add_argument("--reference-tokens", type=int, default=3_000,
                    help="tokens the slow reference scores (its rate is measured on this prefix)")
    ap.add_argument("--threads", type=int, default=None, help="default: the thread governor's choice")
    ap.add_argument("--split-tokens", type=int, default=100_000, help="Brown test tokens of the exact split scoring")
    args = ap.parse_args()
    governor = threads.govern(args.threads)
    print(f"{governor.describe()}; load average {', '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    lines, model = brown_lines(args.tokens)
    split_scoring(model, args.split_tokens)
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

    print(f"MLP1 shape (|V| = {len(model.vocab):,}), {governor.threads} thread(s), "
          f"{n_tokens:,} tokens in {len(lines):,} lines")
    print(f"  reference, one row per call   {reference:10,.0f} tokens/s  1.00x  "
          f"(measured on {ref_tokens:,} tokens; {n_tokens / reference:,.0f} s for the whole text)")
    print(f"  nnlm score_lines (batched)    {batched:10,.0f} tokens/s  {batched / reference:.1f}x  "
          f"({batched_s:.2f} s for the whole text)")


if __name__ == "__main__":
    main()
