"""Training speed of the AP News net (n = 6, h = 60, m = 100, direct) as the vocabulary grows (issue 47, item 1):
the same corpus read with |V| capped at 18,000 (the paper's AP cap), at 60,000 and uncapped, for the sampled
loss (with RowAdam's lazy and exact weight decay) and the class-factored output layer, in one run.

Each of the six runs is set up and trained by `nnlm train`'s own code (benchmarks/training_path.py: the
pipeline's loss and optimizer, the trainer's batches and bookkeeping), from the same seed. After a warm-up,
the runs are advanced in interleaved rounds of a few seconds each, so that load from other processes falls
on every run alike; a run's figure is the median over rounds of its training tokens per CPU second of this
process (one thread: the work a step costs) and per wall second. The ratios compare each vocabulary with the
18k one of the same output layer: a step whose cost does not grow with |V| (the sampled loss: K samples per
batch whatever |V|) should be within 1.5x; the class-factored layer's cost per token grows as sqrt(|V|)
(K ~ sqrt(|V|) classes of ~sqrt(|V|) words), so it cannot be.

    python benchmarks/scale_corpus.py /tmp/ap-natural --tokens 9000000 --valid 250000 --words 125000
    PYTHONPATH=src python benchmarks/vocab_scaling.py --corpus /tmp/ap-natural [--rounds 5] [--seconds 8]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from host import cpu_name
from training_path import TrainingPath

OUTPUTS = {  # name: the run options that choose the output layer (as nnlm reproduce --table apnews does)
    "sampled": {"loss": "sampled"},
    "sampled-exact": {"loss": "sampled", "row_decay": "exact"},  # RowAdam's exact weight decay (--row-decay exact)
    "classes": {"output_layer": "classes", "output_clustering": "frequency", "loss": "full"},
}


def timed(path: TrainingPath, seconds: float) -> tuple[float, float]:
    """(tokens per CPU second, tokens per wall second) of `seconds` of training."""
    cpu, wall = time.process_time(), time.perf_counter()
    examples = path.advance(seconds=seconds)
    return examples / (time.process_time() - cpu), examples / (time.perf_counter() - wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="a text directory (benchmarks/scale_corpus.py)")
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--caps", default="18000,60000,0", help="vocabulary caps, 0 = uncapped; the first is the reference")
    ap.add_argument("--outputs", default="sampled,sampled-exact,classes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8.0, help="training seconds per run and round")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    caps = [int(c) for c in args.caps.split(",")]
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; load average at start {os.getloadavg()}")
    work = tempfile.TemporaryDirectory(prefix="vocab-scaling-")
    paths: dict[tuple[str, int], TrainingPath] = {}
    for output in args.outputs.split(","):
        for cap in caps:
            requested = {"corpus": args.corpus, "min_count": args.min_count, "preset": "apnews", "epochs": 1,
                         "threads": args.threads} | OUTPUTS[output] | ({"max_vocab": cap} if cap else {})
            started = time.perf_counter()
            path = paths[output, cap] = TrainingPath.new(Path(work.name) / f"{output}-{cap}", requested)
            net = path.setup.net
            path.advance(examples=20 * path.run.batch_size)  # warm-up: first-touch pages, compiled kernels
            print(f"{output:13s} cap {cap or 'none':>6}: |V| = {net.config.vocab_size:,}, "
                  f"{sum(p.numel() for p in net.parameters()):,} parameters, "
                  f"{type(path.setup.loss_fn).__name__} + {type(path.setup.optimizer).__name__}; "
                  f"set up and warmed up in {time.perf_counter() - started:.0f} s")
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {key: [] for key in paths}
    for _ in range(args.rounds):
        for key, path in paths.items():
            figures[key].append(timed(path, args.seconds))
    print(f"training tokens/s, median of {args.rounds} interleaved rounds of {args.seconds:g} s per run; "
          f"load average now {os.getloadavg()}")
    for output in args.outputs.split(","):
        ref_cpu = statistics.median(f[0] for f in figures[output, caps[0]])
        for cap in caps:
            per_cpu = statistics.median(f[0] for f in figures[output, cap])
            per_wall = statistics.median(f[1] for f in figures[output, cap])
            print(f"  {output:13s} |V| {paths[output, cap].setup.net.config.vocab_size:>7,}: {per_cpu:8,.0f} tokens "
                  f"per CPU s, {per_wall:8,.0f} per wall s; {cap or 'uncapped'} vs {caps[0]}: "
                  f"{ref_cpu / per_cpu:.2f}x slower (CPU)")
    for path in paths.values():
        path.close()
    work.cleanup()


if __name__ == "__main__":
    main()
