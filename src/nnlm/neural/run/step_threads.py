"""How many threads the training step uses on this host: chosen by measuring it, and cached.

Why: the thread governor (nnlm.threads) gives torch every core other processes leave free, which is
right for the |V|-wide products of the per-epoch validation. A sampled or NCE step is different: its
products are [256, ~300] x [~300, ~400] and it runs ~100 small kernels, each of which a team of OpenMP
threads enters and leaves together, so on some CPUs two threads take the step no faster than one, or
slower (docs/experiments/host-speed.md). Which is faster depends on the CPU, its caches and the BLAS path
torch takes on it, not on a flag in /proc/cpuinfo, so it is measured: when a run starts with two or more
free cores, a few steps of a copy of the run's own step (its net, loss and optimizer; torch's random state
put back, so the run's numbers are untouched) are timed at one thread and at all of them, in interleaved
rounds. The answer is kept in the nnlm cache directory under the host and the step's shape (`nnlm.host_cache`),
so that a run on the same host and shape reads it, and another host (or another torch) measures again. The
step's numbers do not depend on the thread count (tests/test_step_threads.py):
only its speed does. The batches then run at min(governor's count, this choice); validation keeps the governor's.
"""
from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from nnlm import host_cache, threads

CACHE = "step-threads.json"
WARMUP_STEPS = 2   # untimed steps first (allocator, numba's cached kernels)
STEPS = 6          # steps per timing
ROUNDS = 3         # timings per thread count, interleaved; the median is kept


host_key = host_cache.host_key


def step_key(config: dict, loss: str, batch: int, samples: int | None) -> str:
    """The step's shape: the net's configuration, its loss, batch and samples."""
    return host_cache.shape_key({"config": config, "loss": loss, "batch": batch, "samples": samples})


def cache_path() -> Path:
    return host_cache.cache_path(CACHE)


def cached(host: str, step: str, path: Path | None = None) -> int | None:
    """The thread count measured for this host and step shape, if any."""
    entry = host_cache.entry(path or cache_path(), host, step)
    return entry.get("threads") if entry is not None and isinstance(entry.get("threads"), int) else None


def store(host: str, step: str, chosen: int, seconds: dict[int, float], path: Path | None = None) -> None:
    """Record a choice, with the seconds per step it was made from."""
    host_cache.store(path or cache_path(), host, step,
                     {"threads": chosen, "seconds_per_step": {str(k): v for k, v in seconds.items()}})


def seconds_per_step(step: Callable[[], None], counts: tuple[int, ...]) -> dict[int, float]:
    """Median seconds of one call of `step` at each thread count (interleaved rounds, after a warm-up);
    torch's thread count is put back afterwards."""
    before = torch.get_num_threads()
    times: dict[int, list[float]] = {n: [] for n in counts}
    try:
        for n in counts:
            torch.set_num_threads(n)
            for _ in range(WARMUP_STEPS):
                step()
        for _ in range(ROUNDS):
            for n in counts:
                torch.set_num_threads(n)
                t0 = time.perf_counter()
                for _ in range(STEPS):
                    step()
                times[n].append((time.perf_counter() - t0) / STEPS)
    finally:
        torch.set_num_threads(before)
    return {n: statistics.median(t) for n, t in times.items()}


def choose(host: str, step: str, free: int, measure: Callable[[tuple[int, ...]], dict[int, float]],
           path: Path | None = None) -> int | None:
    """The step's thread count on this host: the cached one, else measured now when `free` cores (the
    governor's count) allow more than one thread, else None (a busy machine: nothing to learn, the governor
    decides). The fewer threads win a tie within 5%: they leave a core to the rest of the machine."""
    known = cached(host, step, path)
    if known is not None or free < 2:
        return known
    seconds = measure((1, free))
    chosen = 1 if seconds[1] <= 1.05 * seconds[free] else free
    store(host, step, chosen, seconds, path)
    return chosen


def copied_step(net: torch.nn.Module, loss_fn: Callable, optimizer, rows: torch.Tensor, k: int,
                bf16: bool) -> Callable[[], None]:
    """One training step of a deep copy of (net, loss, optimizer) on the batch `rows`: what the run's
    step costs, with none of the run's own tensors touched."""
    from nnlm.neural.run.batches import update

    net, loss_fn, optimizer = copy.deepcopy((net, loss_fn, optimizer))

    def step() -> None:
        update(net, optimizer, loss_fn(net, rows[:, :k], rows[:, k], bf16), 0, len(rows))

    return step


def for_trainer(trainer, rows: torch.Tensor) -> int | None:
    """The thread cap for the batches of `trainer`, a single-process sampled or NCE run on the CPU
    (`Trainer.chosen_step_threads`), None for no cap: measured only under the governor (a deep copy of its step
    is cheap; --threads is the user's word)."""
    governor = threads.current()
    run = trainer.run
    if governor is None or governor.fixed:
        return None
    host = host_key()
    step = step_key(trainer.config.to_dict(), run.loss, run.batch_size, run.samples)
    with torch.random.fork_rng(devices=[]):  # the run's random state as it was: its numbers are untouched
        return choose(host, step, governor.threads,
                      lambda counts: seconds_per_step(copied_step(trainer.net, trainer.loss_fn, trainer.optimizer,
                                                                  rows, trainer.k, bool(run.bf16)), counts))
