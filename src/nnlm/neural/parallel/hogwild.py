"""Asynchronous shared-memory data-parallel training (Hogwild), as the paper ran it on SMP machines.

The parameters live in shared memory (torch.multiprocessing); K
worker processes each compute a minibatch gradient and write their update straight into them,
with no lock: an update may be applied over parameters another worker is changing, which is the
point (no waiting) and the paper's finding (it does not hurt convergence). Any loss: with
--loss sampled or nce each worker draws its own samples and runs its own row-wise Adam
(`nnlm.neural.net.sampled.RowAdam`) over the shared rows, as does a class-factored net's worker
(`nnlm.neural.run.pipeline.full_loss`). With the paper's SGD the workers update one shared [W, U, b] copy
through the kept output layer (`nnlm.neural.net.kept_output.share_kept_layout`).

Work is handed out in the single-process order: a worker claims the next batch index of the
epoch's permutation from a shared counter (the only lock, held for a few instructions), so when
the workers stop, the batches done are exactly a prefix of the epoch, and state.json's
(epoch, batch) position means what it means for the other trainers. eps_t (paper recipe) and
Adam's step count are read from shared counters too. The parent process runs the training loop
of nnlm.neural.run.train (`run_epochs`) with a HogwildTrainer (trainer `hogwild` of nnlm.neural.run.pipeline),
whose epoch (its permutation, in shared memory) is handed to the workers; between epochs it scores
validation and writes the run directory; checkpoints are written at epoch ends and when the time
budget stops training (the update order is not reproducible, so resuming continues the run rather
than replaying it).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

from nnlm.errors import NnlmError
from nnlm.neural.net.kept_output import keeps_output, share_kept_layout
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.sampled import RowAdam, SampledLoss
from nnlm.neural.parallel.distributed import START_METHOD
from nnlm.neural.run.batches import EXPLODED, batch_rows, diverged, update
from nnlm.neural.run.optim import Adam
from nnlm.neural.run.pipeline import full_loss
from nnlm.neural.run.recipes import Recipe
from nnlm.neural.run.stop_signals import ignore_interrupts_in_worker
from nnlm.neural.run.trainer import Clock, Trainer, TrainingDiverged, TrainingSetup, TrainingState, divergence_message
from nnlm.progress import Silent


def _worker(index: int, net: NPLM, moments: tuple[dict, dict] | None, adam_steps, recipe: Recipe,
            sampling: tuple[str, torch.Tensor, int] | None, padded: torch.Tensor, order: torch.Tensor, k: int,
            batch: int, seed: int, bf16: bool, kept: torch.Tensor | None, counters, commands, results) -> None:
    """Wait for an epoch, claim batches until none is left (or told to stop), report loss sums.
    `sampling` = (loss, proposal q, samples) for a sampled or NCE run, None for the full softmax; `kept`: the
    shared copy of [W, U, b] the parent laid out for the paper's SGD, which this worker's kept output layer
    adopts (None: the plain path)."""
    torch.set_num_threads(1)
    ignore_interrupts_in_worker()
    if sampling is None:  # (row-wise Adam for a class-factored net; the kept output layer for the paper's SGD)
        loss_fn, optimizer = full_loss(net, recipe, recipe.lr, bf16, one_process=kept is not None)
        if kept is not None:
            loss_fn.kept.adopt(kept)
    else:  # this worker's own draws and its own row-wise Adam over the shared rows
        loss_fn = SampledLoss(*sampling)
        optimizer = RowAdam(net, loss_fn, recipe.lr, recipe.weight_decay)
    if moments is not None:
        optimizer.m, optimizer.v = moments  # this worker's own moments (in shared memory for checkpoints)
    n_examples = len(padded) - k
    n_batches = math.ceil(n_examples / batch)
    window = torch.arange(k + 1)
    explode_at = EXPLODED * math.log(net.config.vocab_size)
    next_batch, examples, steps, stop = counters
    while (command := commands.get()) is not None:
        epoch, lr, deadline = command
        optimizer.lr = lr
        if moments is not None:
            optimizer.t = adam_steps[index]
        torch.manual_seed(int(np.random.SeedSequence([seed, epoch, index]).generate_state(1, np.uint64)[0]) >> 1)
        net.train()
        loss_sum, count, failure = 0.0, 0, None
        while True:
            with next_batch.get_lock():
                b = next_batch.value
                if b >= n_batches or stop.value:
                    break
                next_batch.value = b + 1
                size = min(batch, n_examples - b * batch)
                with examples.get_lock():
                    seen = examples.value
                    examples.value += size
                with steps.get_lock():
                    steps.value += 1
            rows = batch_rows(padded, order, b, batch, window)
            loss = loss_fn(net, rows[:, :k], rows[:, k], bf16)
            value = float(loss.detach())
            if (failure := diverged(value, explode_at)) is not None:
                stop.value = 1
                break
            update(net, optimizer, loss, seen, len(rows))
            loss_sum += value * len(rows)
            count += len(rows)
            if moments is not None:
                adam_steps[index] = optimizer.t
            if deadline is not None and time.time() >= deadline:
                stop.value = 1
        results.put((index, loss_sum, count, failure))


class HogwildTrainer(Trainer):
    """The parent process: hands each epoch to the workers, which share the parameters (and the
    batch counter) and update them without locks; it scores, logs and saves between epochs."""

    def __init__(self, setup: TrainingSetup) -> None:
        super().__init__(setup)
        net, optimizer, run, loss_fn = self.net, self.optimizer, self.run, self.loss_fn
        workers = setup.workers or 2
        setup.state["parallel"] = {"mode": "hogwild", "world_size": workers}
        # the paper's SGD: the workers update one shared [W, U, b] copy through the kept output layer
        self.kept = None
        if run.loss == "full" and keeps_output(net, run.training_recipe.optimizer, True):
            self.kept = share_kept_layout(net, torch.bfloat16 if run.bf16 else torch.float32)
        net.share_memory()
        self.padded.share_memory_()
        self.order = torch.empty(self.n_examples, dtype=torch.int64).share_memory_()  # the epoch's, set per epoch
        # Adam: each worker keeps its own moments. Shared ones would let a worker divide another's
        # fresh first moment by a second moment not yet updated (~0 early on): a step of ~1e5 x lr.
        # The checkpoint holds their mean; resuming starts every worker from it.
        adam = isinstance(optimizer, (Adam, RowAdam))
        self.moments = [({n: t.clone().share_memory_() for n, t in optimizer.m.items()},
                         {n: t.clone().share_memory_() for n, t in optimizer.v.items()}) if adam else None
                        for _ in range(workers)]
        ctx = mp.get_context(START_METHOD)
        self.counters = (ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("b", 0))
        self.adam_steps = ctx.Array("q", [getattr(optimizer, "t", 0)] * workers, lock=False)
        self.commands, self.results = ctx.SimpleQueue(), ctx.SimpleQueue()
        sampling = (run.loss, loss_fn.q.share_memory_(), run.samples) if run.loss != "full" else None
        self.procs = [ctx.Process(target=_worker, daemon=True,
                                  args=(i, net, self.moments[i], self.adam_steps, run.training_recipe,
                                        sampling, self.padded, self.order, self.k, self.batch, run.seed, run.bf16,
                                        self.kept, self.counters, self.commands, self.results))
                      for i in range(workers)]
        for p in self.procs:
            p.start()

    def describe(self) -> str:
        return f"batch {self.batch}, --parallel hogwild with {len(self.procs)} worker processes (1 thread each)"

    def run_batches(self, state: TrainingState, order: torch.Tensor, clock: Clock,
                    save: Callable[[], None], bar: Silent) -> bool:
        """The workers do the epoch's remaining batches, in `order` (shared with them); checkpoints
        wait for the epoch's end (`save` is not called: the workers do not pause for it). The bar
        (nnlm.progress) follows the shared count of examples done while the parent waits."""
        self.order.copy_(order)
        next_batch, examples, steps, stop = self.counters
        next_batch.value, examples.value, steps.value, stop.value = state["batch"], state["examples"], state["step"], 0
        deadline = None if clock.budget is None else time.time() + max(clock.budget - clock.elapsed(), 0.0)
        for _ in self.procs:
            self.commands.put((state["epoch"], self.optimizer.lr, deadline))

        shown = state["examples"]

        def while_waiting() -> None:
            nonlocal shown
            if clock.signalled():  # the workers finish their batch and report; the parent saves
                stop.value = 1
            now = examples.value
            bar.update(now - shown)
            shown = now

        failures = []
        for _ in self.procs:
            _, loss_sum, count, failure = _collect(self.results, self.procs, while_waiting)
            state["loss_sum"] += loss_sum
            state["loss_count"] += count
            failures += [failure] if failure else []
        bar.update(examples.value - shown)
        state.update(batch=next_batch.value, examples=examples.value, step=steps.value)
        if failures:
            raise TrainingDiverged(divergence_message(self.out, state, failures[0], self.run))
        return state["batch"] < self.n_batches

    def whole(self) -> tuple[NPLM, Any]:
        """The shared parameters, and the optimizer holding the mean of the workers' Adam moments
        (the workers are idle between epochs)."""
        if self.moments[0] is not None:  # an Adam (or row-wise Adam) run
            for store, kind in ((self.optimizer.m, 0), (self.optimizer.v, 1)):
                for name, t in store.items():
                    t.copy_(torch.stack([own[kind][name] for own in self.moments]).mean(dim=0))
            self.optimizer.t = max(self.adam_steps)
        return self.net, self.optimizer

    def close(self) -> None:
        """Stop the worker processes."""
        for _ in self.procs:
            self.commands.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()


def _collect(results, procs: list, while_waiting: Callable[[], object]) -> tuple:
    """The next worker report; NnlmError if a worker died instead of reporting. `while_waiting` is
    called as it polls (it tells the workers to stop when a signal asked the run to stop)."""
    while True:
        while_waiting()
        if not results.empty():
            return results.get()
        dead = [i for i, p in enumerate(procs) if not p.is_alive()]
        if dead:
            code = procs[dead[0]].exitcode
            raise NnlmError(f"Hogwild worker {dead[0]} of {len(procs)} stopped (exit code {code}); the last checkpoint "
                            "is intact: restart with --resume")
        time.sleep(0.01)
