"""Parallel training throughput: tokens/s with 1 and 2 processes for each --parallel mode, the
speed-up over one plain process (measured in the same run), and the fraction of each step spent
communicating (the paper reports about 1/15 for its parameter-parallel cluster runs).

    PYTHONPATH=src python benchmarks/parallel.py --preset mlp1 --batch-size 256 --seconds 10 [--bf16]

--bf16 runs every contender with the step `nnlm train` takes on bf16 hardware: the fused bf16
output layer (`softmax_loss`) in the plain and hogwild processes and inside DDP's forward, its
vocabulary-parallel version for vocab. Without it every step is fp32.

Every process uses one thread, on synthetic batches at Brown's |V| (the model's shape, not the
data, sets the cost). Communication fraction:
- vocab: seconds inside the all-reduces (max, sum, target score, and the gradients on x and on
  the hidden layer) over the step time. Waiting for a slower peer counts as communication.
- ddp: seconds inside the gradient all-reduce. DDP normally overlaps it with backward, which
  hides it from a timer; here a communication hook runs the same averaging all-reduce
  synchronously and times it (so the ddp rows are a little slower than real DDP).
- hogwild: shared memory, no messages: 0 by construction; what it pays instead is stale gradients.
tokens/CPU-s divides the tokens by the CPU seconds all processes used (their gloo threads
included): unlike tokens/s it does not drop when other jobs share the cores, so on a busy machine
it is the better guide to the cost of each mode (1.00x = no parallel overhead).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nnlm.neural import distributed as dd
from nnlm.neural.model import NPLM
from nnlm.neural.optim import PaperSGD
from nnlm.neural.parallel import ShardLoss
from nnlm.neural.presets import preset
from nnlm.neural.train import batch_loss
from nnlm.neural.vocab_parallel import CommTimer, VocabParallelNPLM

BROWN_V = 17_907


def batches(cfg, batch: int, seed: int, count: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, cfg.vocab_size, (batch, cfg.order - 1), generator=gen),
             torch.randint(0, cfg.vocab_size, (batch,), generator=gen)) for _ in range(count)]


def timed(step, seconds: float, warmup: int = 2) -> tuple[int, float, float]:
    """(steps, wall seconds, CPU seconds of this process) of running `step` about `seconds`; ranks
    agree on the count beforehand (from rank 0's warm-up), so the loop holds no other collective."""
    t0 = time.perf_counter()
    for i in range(warmup):
        step(i)
    n = max(3, int(seconds / ((time.perf_counter() - t0) / warmup)))
    if dist.is_initialized():
        n = dd.broadcast_object(n)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        step(i)
    return n, time.perf_counter() - t0, time.process_time() - c0


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


def plain_step_fn(net: NPLM, data, batch: int, bf16: bool):
    opt = PaperSGD(net, 1e-4, 0.0, 0.0)

    def step(i: int) -> None:
        ctx, tgt = data[i % len(data)]
        loss = batch_loss(net, ctx, tgt, bf16)
        net.zero_grad(set_to_none=True)
        loss.backward()
        opt.step(0, batch)
    return step


def rank_benchmark(mode: str, preset_name: str, batch: int, seconds: float, bf16: bool, result_file: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = preset(preset_name, BROWN_V)
    torch.manual_seed(0)
    full = NPLM(cfg)
    data = batches(cfg, batch, seed=0)
    if mode == "vocab":
        net = VocabParallelNPLM.from_full(dict(full.state_dict()), cfg, rank, world)
        del full
        opt = PaperSGD(net, 1e-4, 0.0, 0.0)

        def step(i: int) -> None:
            ctx, tgt = data[i % len(data)]
            loss = net.loss(ctx, tgt, bf16)
            net.zero_grad(set_to_none=True)
            loss.backward()
            opt.step(0, batch)

    else:
        from torch.nn.parallel import DistributedDataParallel

        engine = DistributedDataParallel(ShardLoss(full, batch_loss))
        engine.register_comm_hook(None, timed_all_reduce_hook(world))
        opt = PaperSGD(full, 1e-4, 0.0, 0.0)
        shard = [(c.tensor_split(world)[rank], t.tensor_split(world)[rank]) for c, t in data]

        def step(i: int) -> None:
            ctx, tgt = shard[i % len(shard)]
            loss = engine(ctx, tgt, bf16) * (world / batch)
            full.zero_grad(set_to_none=True)
            loss.backward()
            opt.step(0, batch)

    timed(step, 0.0)
    CommTimer.seconds = 0.0
    steps, elapsed, cpu = timed(step, seconds)
    comm = CommTimer.seconds / elapsed
    stats = torch.tensor([steps * batch / elapsed, comm, cpu], dtype=torch.float64)
    dist.all_reduce(stats)  # rates and fractions: average the ranks' views; CPU seconds: total
    if rank == 0:
        Path(result_file).write_text(json.dumps({"tokens_per_s": float(stats[0]) / world,
                                                 "comm": float(stats[1]) / world,
                                                 "tokens_per_cpu_s": steps * batch / float(stats[2])}))


def hogwild_worker(net: NPLM, data, batch: int, seconds: float, bf16: bool, start, counts, index: int) -> None:
    torch.set_num_threads(1)
    step = plain_step_fn(net, data, batch, bf16)
    step(0)
    start.wait()
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        step(index + n)
        n += 1
    counts[2 * index] = n * batch / (time.perf_counter() - t0)
    counts[2 * index + 1] = n * batch / (time.process_time() - c0)


def hogwild_benchmark(preset_name: str, batch: int, seconds: float, workers: int, bf16: bool) -> tuple[float, float]:
    """(tokens/s of all workers together, tokens per CPU-second)."""
    cfg = preset(preset_name, BROWN_V)
    torch.manual_seed(0)
    net = NPLM(cfg)
    net.share_memory()
    data = batches(cfg, batch, seed=0)
    ctx = mp.get_context(dd.START_METHOD)
    start, counts = ctx.Barrier(workers), ctx.Array("d", 2 * workers)
    procs = [ctx.Process(target=hogwild_worker, args=(net, data, batch, seconds, bf16, start, counts, i))
             for i in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rates, per_cpu = counts[0::2], counts[1::2]
    return float(sum(rates)), float(sum(rates)) / sum(r / c for r, c in zip(rates, per_cpu, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    ap.add_argument("--modes", default="hogwild,ddp,vocab", help="which parallel modes to measure")
    ap.add_argument("--bf16", action="store_true", help="every contender takes its bf16 step (fused output layer)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = preset(args.preset, BROWN_V)
    torch.manual_seed(0)
    plain = plain_step_fn(NPLM(cfg), batches(cfg, args.batch_size, 0), args.batch_size, args.bf16)
    steps, elapsed, cpu = timed(plain, args.seconds)
    ref, ref_cpu = steps * args.batch_size / elapsed, steps * args.batch_size / cpu
    print(f"{args.preset} (|V| = {BROWN_V:,}), global batch {args.batch_size}, {'bf16' if args.bf16 else 'fp32'} "
          f"steps, 1 thread per process, {os.cpu_count()} CPU cores on this machine; load average "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"  {'':<16}{'procs':>6}{'tokens/s':>10}{'speed-up':>10}{'tokens/CPU-s':>14}{'vs plain':>10}  communication")
    print(f"  {'plain':<16}{1:>6}{ref:10,.0f}{1:10.2f}x{ref_cpu:13,.0f}{1:10.2f}x")
    for mode in args.modes.split(","):
        for world in (1, 2):
            if mode == "hogwild":
                tps, per_cpu = hogwild_benchmark(args.preset, args.batch_size, args.seconds, world, args.bf16)
                comm = 0.0
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    result = Path(tmp) / "result.json"
                    dd.launch_local(rank_benchmark, world,
                                    args=(mode, args.preset, args.batch_size, args.seconds, args.bf16, str(result)))
                    measured = json.loads(result.read_text())
                tps, comm, per_cpu = measured["tokens_per_s"], measured["comm"], measured["tokens_per_cpu_s"]
            print(f"  {mode:<16}{world:>6}{tps:10,.0f}{tps / ref:10.2f}x"
                  f"{per_cpu:13,.0f}{per_cpu / ref_cpu:10.2f}x  {comm:6.1%}"
                  + (f" (1/{1 / comm:.0f})" if comm > 0.005 else ""))


if __name__ == "__main__":
    main()
