"""Speed of the NPLM's stateful step (NeuralLM.begin_state / advance, nnlm.neural.lm.stepper) on a beam of 16,
against recomputing each context (model.log_prob on the beam's full contexts every step), in the same run.

The model is an MLP1-shaped net (n=5, h=50, m=60, direct connections) over Brown's vocabulary with
random weights: the speed does not depend on the weights' values. The beam's 16 rows walk 16 different
stretches of Brown's test split (row r starts at r/16 of it), so every step brings up to 16 different
words: the stepper's direct-rows cache starts empty and is filled during the timed run (its misses are
reported); then the rows walk on through the next stretch with the cache as left (a longer session), and
with --tables inside a long pass that precomputes every word's rows (the per-position tables).
Both paths give the same log-probabilities (checked on the steps both ran, to fp32 rounding).

With --candidates K the beam is a decoder's: every step each of the 16 hypotheses is asked for K words at
once (its text's next word and K-1 others drawn by unigram frequency, as an acoustic model proposes
alternatives), all 16 K (state, word) pairs in one `advance` call, and the hypotheses go on with their
text's word. Two references in the same run: `log_prob` on the 16 K (context, word) pairs (a stateless
decoder's call), and the strongest stateless alternative, all of V for the 16 contexts once
(`distribution`) and the K words picked from it.

    PYTHONPATH=src python benchmarks/state_speed.py [--steps 3000] [--reference-steps 400] [--threads 1] [--tables]
    PYTHONPATH=src python benchmarks/state_speed.py --candidates 8 [--steps 1000] [--reference-steps 200]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from nnlm import threads
from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import start_token
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.presets import preset

BEAM = 16


def beam_words(corpus, steps: int) -> np.ndarray:
    """[steps, BEAM]: row r's words are Brown test tokens from r/BEAM of the split on."""
    test = corpus.test.astype(np.int64)
    stride = len(test) // BEAM
    if steps > stride:
        raise SystemExit(f"--steps must be at most {stride} (the test split / {BEAM})")
    return np.stack([test[r * stride:r * stride + steps] for r in range(BEAM)], axis=1)


def clocks() -> np.ndarray:
    """(wall seconds, this process's CPU seconds): on a shared machine the CPU time is the fairer figure."""
    return np.array([time.perf_counter(), time.process_time()])


def stepped(model: NeuralLM, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wall, CPU) seconds and log-probs [steps, BEAM] of walking the beam through states."""
    out = np.empty(words.shape)
    t0 = clocks()
    state = model.begin_state(BEAM)
    for t, row in enumerate(words):
        out[t], state = model.advance(state, row)
    return clocks() - t0, out


def recomputed(model: NeuralLM, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wall, CPU) seconds and log-probs of the same walk, each step's [BEAM, n-1] contexts scored afresh."""
    out = np.empty(words.shape)
    context = np.full((BEAM, model.context_size), model.vocab.id(start_token(model.vocab)), dtype=np.int64)
    t0 = clocks()
    for t, row in enumerate(words):
        out[t] = model.log_prob(context, row)
        context = np.concatenate([context[:, 1:], row[:, None]], axis=1)
    return clocks() - t0, out


def candidates_of(corpus, words: np.ndarray, k: int) -> np.ndarray:
    """[steps, BEAM, k]: each hypothesis's text word first, then k-1 words drawn by unigram frequency."""
    counts = np.bincount(corpus.train, minlength=len(corpus.vocab)).astype(np.float64)
    rng = np.random.default_rng(0)
    others = rng.choice(len(counts), size=words.shape + (k - 1,), p=counts / counts.sum())
    return np.concatenate([words[..., None], others], axis=2)


def decoder_stepped(model: NeuralLM, asked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wall, CPU) seconds and log-probs [steps, BEAM, k]: each step one advance of BEAM k (state, word)
    pairs, the hypotheses going on with their first candidate (their text's word)."""
    steps, _, k = asked.shape
    out = np.empty(asked.shape)
    t0 = clocks()
    state = model.begin_state(BEAM)
    expand, first = np.repeat(np.arange(BEAM), k), np.arange(BEAM) * k
    for t in range(steps):
        lp, after = model.advance(state.take(expand), asked[t].reshape(-1))
        out[t] = lp.reshape(BEAM, k)
        state = after.take(first)
    return clocks() - t0, out


def decoder_recomputed(model: NeuralLM, asked: np.ndarray, once: bool) -> tuple[np.ndarray, np.ndarray]:
    """The same, without states: `log_prob` on every (context, word) pair, or (`once`) on all of V for
    each hypothesis's context once, the k words picked from it."""
    steps, _, k = asked.shape
    out = np.empty(asked.shape)
    context = np.full((BEAM, model.context_size), model.vocab.id(start_token(model.vocab)), dtype=np.int64)
    t0 = clocks()
    for t in range(steps):
        if once:
            out[t] = np.log(np.take_along_axis(model.distribution(context), asked[t], axis=1))
        else:
            out[t] = model.log_prob(np.repeat(context, k, axis=0), asked[t].reshape(-1)).reshape(BEAM, k)
        context = np.concatenate([context[:, 1:], asked[t, :, :1]], axis=1)
    return clocks() - t0, out


def decoder_run(model: NeuralLM, corpus, args) -> None:
    k = args.candidates
    asked = candidates_of(corpus, beam_words(corpus, args.steps), k)
    pairs = BEAM * k
    ref_s, ref_lp = decoder_recomputed(model, asked[:args.reference_steps], once=False)
    print(f"MLP1 shape (|V| = {len(model.vocab):,}), a decoder's beam: {BEAM} hypotheses x {k} words a step")
    print(f"  recompute each (context, word) pair   {rates(args.reference_steps, ref_s, pairs)}  1.00x  "
          f"({args.reference_steps} steps)")
    once_s, once_lp = decoder_recomputed(model, asked[:args.reference_steps], once=True)
    gap = float(np.abs(once_lp - ref_lp).max())
    ratio = (args.reference_steps / once_s) / (args.reference_steps / ref_s)
    print(f"  all of V once per hypothesis          {rates(args.reference_steps, once_s, pairs)}  "
          f"{ratio[0]:.1f}x wall, {ratio[1]:.1f}x CPU  (|log-prob difference| <= {gap:.0e})")
    step_s, step_lp = decoder_stepped(model, asked)
    common = min(args.steps, args.reference_steps)
    gap = float(np.abs(step_lp[:common] - ref_lp[:common]).max())
    assert gap < 1e-4, gap  # the same numbers (fp32 rounding)
    ratio = (args.steps / step_s) / (args.reference_steps / ref_s)
    vs_once = (args.steps / step_s) / (args.reference_steps / once_s)
    print(f"  stateful step                         {rates(args.steps, step_s, pairs)}  {ratio[0]:.1f}x wall, "
          f"{ratio[1]:.1f}x CPU; {vs_once[0]:.1f}x / {vs_once[1]:.1f}x the once-per-hypothesis path  "
          f"({args.steps} steps; |log-prob difference| <= {gap:.0e})")


def rates(steps: int, seconds: np.ndarray, per_step: int = BEAM) -> str:
    wall, cpu = steps * per_step / seconds
    return f"{wall:8,.0f} words/s wall, {cpu:8,.0f} per CPU second"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="beam steps of the stateful walk")
    ap.add_argument("--reference-steps", type=int, default=400, help="steps of the recomputing walk (slower)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tables", action="store_true",
                    help="also step inside a long pass that builds the per-position tables (5 GB for Brown)")
    ap.add_argument("--candidates", type=int, default=0,
                    help="a decoder's beam: each hypothesis asked for this many words a step (see above)")
    args = ap.parse_args()
    governor = threads.govern(args.threads)
    print(f"{governor.describe()}; load average {', '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    corpus = load_corpus("brown")
    torch.manual_seed(0)
    model = NeuralLM(NPLM(preset("mlp1", len(corpus.vocab))), corpus.vocab, corpus.pad_token)
    if args.candidates:
        decoder_run(model, corpus, args)
        print(f"load average after: {', '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        return
    words = beam_words(corpus, args.steps)

    ref_s, ref_lp = recomputed(model, words[:args.reference_steps])
    print(f"MLP1 shape (|V| = {len(model.vocab):,}), beam {BEAM}, {governor.threads} thread(s)")
    print(f"  recompute each context (log_prob)   {rates(args.reference_steps, ref_s)}  1.00x  "
          f"({args.reference_steps} steps)")
    common = min(args.steps, args.reference_steps)

    step_s, step_lp = stepped(model, words)
    gap = float(np.abs(step_lp[:common] - ref_lp[:common]).max())
    assert gap < 1e-4, gap  # the same numbers (fp32 rounding)
    cache = model._stepper[1].direct
    ratio = (args.steps / step_s) / (args.reference_steps / ref_s)
    print(f"  stateful step, cold LRU cache       {rates(args.steps, step_s)}  {ratio[0]:.1f}x wall, "
          f"{ratio[1]:.1f}x CPU  ({args.steps} steps; rows computed for {cache.computed:,} words, "
          f"cache of {len(cache.slab):,}; |log-prob difference| <= {gap:.0e})")
    before = cache.computed
    warm_s, _ = stepped(model, beam_words(corpus, 2 * args.steps)[args.steps:])
    ratio = (args.steps / warm_s) / (args.reference_steps / ref_s)
    print(f"  stateful step, the cache as left    {rates(args.steps, warm_s)}  {ratio[0]:.1f}x wall, "
          f"{ratio[1]:.1f}x CPU  (the next {args.steps} steps of each row's text; rows computed for "
          f"{cache.computed - before:,} words)")
    if args.tables:
        t0 = clocks()
        with model.long_pass(1 << 40):  # a decoder's long session: the per-position tables, if they fit
            built = clocks() - t0
            if model._tables is None:
                print("  (the per-position tables do not fit in this machine's memory budget)")
            else:
                step_s, step_lp = stepped(model, words)
                gap = float(np.abs(step_lp[:common] - ref_lp[:common]).max())
                assert gap < 1e-4, gap
                ratio = (args.steps / step_s) / (args.reference_steps / ref_s)
                print(f"  stateful step, per-position tables  {rates(args.steps, step_s)}  {ratio[0]:.1f}x wall, "
                      f"{ratio[1]:.1f}x CPU  (tables built once in {built[0]:.1f} s wall, {built[1]:.1f} s CPU, "
                      f"{model._tables.tables.numel() * 4 / 2**30:.1f} GiB)")
    print(f"load average after: {', '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
