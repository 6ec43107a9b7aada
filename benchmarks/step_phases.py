"""Where a net's training epoch of the main job goes on this host: the sampled step's phases (the loss's
forward pass with the draw and gathers, backward, RowAdam's step) and the per-epoch exact validation,
each in CPU seconds of this process (one thread unless --threads), so that load from other processes
falls on none of them more than the others; wall seconds too. Then the epoch's model: 3,125 steps of
Brown's 800k tokens at batch 256, and one exact pass over valid's 200k tokens.

    PYTHONPATH=src:benchmarks NLTK_DATA=... python benchmarks/step_phases.py [--preset mlp1] [--steps 200]
        [--rounds 3] [--threads 1] [--profile]

--profile adds torch.profiler's table of the step's operators (its own overhead inflates the small ones).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from host import cpu_name
from sampled_step import Variant

from nnlm.data.corpus import load_corpus
from nnlm.lm import contexts
from nnlm.neural.net.nets import language_model
from nnlm.neural.run.config import RUN_DEFAULTS
from nnlm.neural.run.run_config import model_config
from nnlm.reproduce.rates import new_net

PHASES = ("forward (draw, gathers, loss)", "backward", "RowAdam step")


def phase_seconds(v: Variant, steps: int) -> dict[str, tuple[float, float]]:
    """(CPU, wall) seconds per step of each phase."""
    cpu = dict.fromkeys(PHASES, 0.0)
    wall = dict.fromkeys(PHASES, 0.0)
    v.net.train()
    for _ in range(steps):
        i = v.position % (len(v.order) // v.batch)
        rows = v.ids[v.order[i * v.batch:(i + 1) * v.batch, None] + v.window]
        marks = [(time.process_time(), time.perf_counter())]
        loss = v.loss(v.net, rows[:, :v.k], rows[:, v.k])
        marks.append((time.process_time(), time.perf_counter()))
        v.net.zero_grad(set_to_none=True)
        loss.backward()
        marks.append((time.process_time(), time.perf_counter()))
        v.optimizer.step(i * v.batch, v.batch)
        marks.append((time.process_time(), time.perf_counter()))
        v.position += 1
        for name, a, b in zip(PHASES, marks, marks[1:], strict=False):
            cpu[name] += b[0] - a[0]
            wall[name] += b[1] - a[1]
    return {name: (cpu[name] / steps, wall[name] / steps) for name in PHASES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--score-tokens", type=int, default=8192)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    run = dict(RUN_DEFAULTS) | {"preset": args.preset, "loss": "sampled", "recipe": "sampled", "samples": 128}
    v = Variant(corpus, run, False, True, True)
    config = model_config({"preset": args.preset}, len(corpus.vocab))
    lm = language_model(new_net(config, corpus), corpus.vocab, corpus.pad_token, device="cpu")
    start, n = corpus.split_offset("valid"), args.score_tokens
    ctx = contexts(corpus.stream(), np.arange(start, start + n), config.order - 1, corpus.pad_id)
    targets = corpus.valid[:n].astype(np.int64)
    phase_seconds(v, 10)
    lm.log_prob(ctx[:64], targets[:64])
    rounds: list[dict[str, tuple[float, float]]] = []
    for _ in range(args.rounds):
        rounds.append(phase_seconds(v, args.steps))
        c0, w0 = time.process_time(), time.perf_counter()
        lm.log_prob(ctx, targets)
        rounds[-1]["validation, per token"] = ((time.process_time() - c0) / n, (time.perf_counter() - w0) / n)
    med = {k: (statistics.median(r[k][0] for r in rounds), statistics.median(r[k][1] for r in rounds))
           for k in rounds[0]}
    print(f"{args.preset}, sampled recipe (K = 128, batch 256), {args.threads} thread(s); {cpu_name()}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    step_cpu = sum(med[p][0] for p in PHASES)
    for p in PHASES:
        share = med[p][0] / step_cpu
        print(f"  {p:34s} {med[p][0] * 1e3:7.2f} CPU-ms/step ({share:5.1%})  wall {med[p][1] * 1e3:7.2f} ms")
    wall = sum(med[p][1] for p in PHASES)
    print(f"  {'step':34s} {step_cpu * 1e3:7.2f} CPU-ms/step           wall {wall * 1e3:7.2f} ms")
    steps, valid = -(-len(corpus.train) // 256), len(corpus.valid)
    train_s, valid_s = steps * step_cpu, valid * med["validation, per token"][0]
    print(f"  an epoch: training {train_s:.1f} CPU-s ({steps:,} steps) + exact validation {valid_s:.1f} CPU-s "
          f"({valid:,} tokens at {1 / med['validation, per token'][0]:,.0f} tokens/CPU-s): validation is "
          f"{valid_s / (train_s + valid_s):.0%}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            phase_seconds(v, 50)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
