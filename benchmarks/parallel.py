"""Parallel training throughput: tokens/s with 1 and 2 processes for each --parallel mode, the
speed-up over one plain process (measured in the same run), and the fraction of each step spent
communicating (the paper reports about 1/15 for its parameter-parallel cluster runs).

    PYTHONPATH=src NLTK_DATA=... python benchmarks/parallel.py --preset mlp1 --batch-size 256 --seconds 10 [--bf16]

Every contender is `nnlm train`'s own code on Brown: a run set up by nnlm.neural.run.pipeline and trained
by the registered trainer's `run_batches` (training_path.py) -- `single` for the plain process, the
Hogwild parent with its workers, a DDPTrainer / VocabTrainer in every rank (each rank prepares the
same run in its own directory and takes its replica or slice with `parallel.rank_model`, as a ddp /
vocab job does from rank 0's broadcast). Recipe `paper` (plain SGD, no dropout), so the figures are
the steps' cost; --bf16 gives every contender the fused bf16 output layer (`softmax_loss`, its
vocabulary-parallel version for vocab), without it every step is fp32. One thread per process.
Communication fraction:
- vocab: seconds inside the all-reduces (max, sum, target score, and the gradients on x and on
  the hidden layer) over the step time. Waiting for a slower peer counts as communication.
- ddp: seconds inside the gradient all-reduce. DDP normally overlaps it with backward, which
  hides it from a timer; here a communication hook runs the same averaging all-reduce
  synchronously and times it (so the ddp rows are a little slower than real DDP).
- both: the trainers' one small all-reduce per step (loss parts and clock flags) is not counted.
- hogwild: shared memory, no messages: 0 by construction; what it pays instead is stale gradients.
tokens/CPU-s divides the tokens by the CPU seconds all processes used (their gloo threads
included): unlike tokens/s it does not drop when other jobs share the cores, so on a busy machine
it is the better guide to the cost of each mode (1.00x = no parallel overhead).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from training_path import TrainingPath

from nnlm.neural.parallel import distributed as dd
from nnlm.neural.parallel.ranks import rank_model
from nnlm.neural.parallel.vocab_parallel import CommTimer
from nnlm.neural.run.config import TrainRequest
from nnlm.neural.run.pipeline import TRAINERS, prepare

WARMUP_SECONDS = 2.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requested(preset_name: str, batch: int, bf16: bool) -> dict:
    return {"corpus": "brown", "preset": preset_name, "batch_size": batch, "recipe": "paper", "bf16": bf16,
            "threads": 1}


def timed(path: TrainingPath, seconds: float, pids: tuple[int, ...] = ()) -> tuple[int, float, float]:
    """(examples, wall seconds, CPU seconds of this process and `pids`) of training about `seconds`
    after a short warm-up (by time: Hogwild workers run whole epochs unless a deadline stops them)."""
    path.advance(seconds=min(WARMUP_SECONDS, seconds / 5))
    CommTimer.seconds = 0.0
    processes = (os.getpid(), *pids)
    t0, c0 = time.perf_counter(), sum(cpu_seconds(p) for p in processes)
    examples = path.advance(seconds=seconds)
    return examples, time.perf_counter() - t0, sum(cpu_seconds(p) for p in processes) - c0


def timed_all_reduce_hook(world: int):
    """A DDP communication hook doing the usual averaging all-reduce, synchronously and timed
    (DDP's own hook overlaps it with backward, which hides its cost from a timer)."""
    def hook(_state, bucket):
        grads = bucket.buffer()
        CommTimer.all_reduce(grads).div_(world)
        done = torch.futures.Future()
        done.set_result(grads)
        return done
    return hook


def rank_benchmark(mode: str, options: dict, seconds: float, work: str, result_file: str) -> None:
    """One rank: the run prepared in its own directory, this rank's part of it, its trainer timed."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    spec = TRAINERS[mode]
    setup = prepare(Path(work) / f"rank{rank}", TrainRequest.of(options), False, torch.device("cpu"), spec)
    whole = {f"model.{k}": v for k, v in setup.net.state_dict().items()} | setup.optimizer.state_tensors()
    net, optimizer = rank_model(whole, setup.run, mode, rank, world, setup.device)
    setup = dataclasses.replace(setup, net=net, optimizer=optimizer, workers=world)
    trainer = spec.trainer_class()(setup)
    if mode == "ddp":
        trainer.engine.register_comm_hook(None, timed_all_reduce_hook(world))
    examples, elapsed, cpu = timed(TrainingPath(setup, trainer), seconds)
    stats = torch.tensor([examples / elapsed, CommTimer.seconds / elapsed, cpu], dtype=torch.float64)
    dist.all_reduce(stats)  # rates and fractions: average the ranks' views; CPU seconds: total
    if rank == 0:
        Path(result_file).write_text(json.dumps({"tokens_per_s": float(stats[0]) / world,
                                                 "comm": float(stats[1]) / world,
                                                 "tokens_per_cpu_s": examples / float(stats[2])}))


def in_process(name: str, options: dict, seconds: float, workers: int | None = None) -> tuple[float, float]:
    """(tokens/s, tokens per CPU-second) of a trainer that runs from this process (single, hogwild)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = TrainingPath.new(Path(tmp) / "run", options, name, workers=workers)
        try:
            pids = tuple(p.pid for p in getattr(path.trainer, "procs", ()))
            examples, elapsed, cpu = timed(path, seconds, pids)
        finally:
            path.close()
    return examples / elapsed, examples / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    ap.add_argument("--modes", default="hogwild,ddp,vocab", help="which parallel modes to measure")
    ap.add_argument("--bf16", action="store_true", help="every contender takes its bf16 step (fused output layer)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    options = requested(args.preset, args.batch_size, args.bf16)
    ref, ref_cpu = in_process("single", options, args.seconds)
    print(f"{args.preset} on Brown, global batch {args.batch_size}, {'bf16' if args.bf16 else 'fp32'} steps "
          f"(recipe paper), 1 thread per process, {os.cpu_count()} CPU cores on this machine; load average "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"  {'':<16}{'procs':>6}{'tokens/s':>10}{'speed-up':>10}{'tokens/CPU-s':>14}{'vs plain':>10}  communication")
    print(f"  {'plain':<16}{1:>6}{ref:10,.0f}{1:10.2f}x{ref_cpu:13,.0f}{1:10.2f}x")
    for mode in args.modes.split(","):
        for world in (1, 2):
            if mode == "hogwild":
                tps, per_cpu = in_process("hogwild", options, args.seconds, workers=world)
                comm = 0.0
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    result = Path(tmp) / "result.json"
                    dd.launch_local(rank_benchmark, world, args=(mode, options, args.seconds, tmp, str(result)))
                    measured = json.loads(result.read_text())
                tps, comm, per_cpu = measured["tokens_per_s"], measured["comm"], measured["tokens_per_cpu_s"]
            print(f"  {mode:<16}{world:>6}{tps:10,.0f}{tps / ref:10.2f}x"
                  f"{per_cpu:13,.0f}{per_cpu / ref_cpu:10.2f}x  {comm:6.1%}"
                  + (f" (1/{1 / comm:.0f})" if comm > 0.005 else ""))
    print("load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
