"""Asynchronous shared-memory data-parallel training (Hogwild), as the paper ran it on SMP machines.

The parameters live in shared memory (torch.multiprocessing); K
worker processes each compute a minibatch gradient and write their update straight into them,
with no lock: an update may be applied over parameters another worker is changing, which is the
point (no waiting) and the paper's finding (it does not hurt convergence).

Work is handed out in the single-process order: a worker claims the next batch index of the
epoch's permutation from a shared counter (the only lock, held for a few instructions), so when
the workers stop, the batches done are exactly a prefix of the epoch, and state.json's
(epoch, batch) position means what it means for the other trainers. eps_t (paper recipe) and
Adam's step count are read from shared counters too. Between epochs the parent process scores
validation and writes the run directory; checkpoints are written at epoch ends and when the time
budget stops training (the update order is not reproducible, so resuming continues the run
rather than replaying it).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.multiprocessing as mp

from nnlm.errors import NnlmError
from nnlm.neural import checkpoint as ck
from nnlm.neural.distributed import START_METHOD
from nnlm.neural import train as tr
from nnlm.neural.model import NPLM, ModelConfig
from nnlm.neural.optim import Adam


def _worker(index: int, net: NPLM, moments: tuple[dict, dict] | None, adam_steps, recipe: tr.Recipe,
            padded: torch.Tensor, k: int, batch: int, seed: int, bf16: bool, counters, commands, results) -> None:
    """Wait for an epoch, claim batches until none is left (or told to stop), report loss sums."""
    torch.set_num_threads(1)
    optimizer = tr.build_optimizer(net, recipe, recipe.lr)
    if isinstance(optimizer, Adam):
        optimizer.m, optimizer.v = moments  # this worker's own moments (in shared memory for checkpoints)
    n_examples = len(padded) - k
    n_batches = math.ceil(n_examples / batch)
    window = torch.arange(k + 1)
    explode_at = tr.EXPLODED * math.log(net.config.vocab_size)
    next_batch, examples, steps, stop = counters
    while (command := commands.get()) is not None:
        epoch, lr, deadline = command
        optimizer.lr = lr
        if isinstance(optimizer, Adam):
            optimizer.t = adam_steps[index]
        torch.manual_seed(int(np.random.SeedSequence([seed, epoch, index]).generate_state(1, np.uint64)[0] >> 1))
        order = torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n_examples))
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
            rows = padded[order[b * batch:(b + 1) * batch, None] + window]
            loss = tr.batch_loss(net, rows[:, :k], rows[:, k], bf16)
            value = float(loss.detach())
            if not math.isfinite(value) or value > explode_at:
                failure = "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else f"exploding ({value:.1f})"
                stop.value = 1
                break
            net.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step(seen, len(rows))
            loss_sum += value * len(rows)
            count += len(rows)
            if isinstance(optimizer, Adam):
                adam_steps[index] = optimizer.t
            if deadline is not None and time.time() >= deadline:
                stop.value = 1
        results.put((index, loss_sum, count, failure))


def train_hogwild(out: Path, requested: dict[str, Any], workers: int, resume: bool = False, progress: bool = True,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train (or continue) the run in `out` with `workers` Hogwild processes on this machine."""
    from nnlm.neural.parallel import end_epoch

    session = tr.SESSION_DEFAULTS | {k: v for k, v in requested.items() if k in tr.SESSION_DEFAULTS}
    if session["device"] == "cuda":
        raise NnlmError("--parallel hogwild runs on the CPU (shared memory); use --parallel ddp for GPUs")
    run, corpus = tr.prepare_run(out, {k: v for k, v in requested.items() if k in tr.RUN_DEFAULTS}, resume)
    if session["threads"] is not None and session["threads"] < 1:
        raise NnlmError(f"--threads must be at least 1, got {session['threads']}")
    recipe = tr.RECIPES[run["recipe"]]
    lr = run["lr"] if run["lr"] is not None else recipe.lr
    config = ModelConfig.from_dict(run["model"])
    torch.manual_seed(run["seed"])
    net = NPLM(config, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
    optimizer = tr.build_optimizer(net, recipe, lr)
    state = (ck.load_training_state(out, net, optimizer) if resume else None) or tr._fresh_state()
    if tr.nothing_left_to_do(out, state, session, resume, log):
        return state
    state["parallel"] = {"mode": "hogwild", "world_size": workers}

    net.share_memory()
    # Adam: each worker keeps its own moments. Shared ones would let a worker divide another's
    # fresh first moment by a second moment not yet updated (~0 early on): a step of ~1e5 x lr.
    # The checkpoint holds their mean; resuming starts every worker from it.
    moments = [({n: t.clone().share_memory_() for n, t in optimizer.m.items()},
                {n: t.clone().share_memory_() for n, t in optimizer.v.items()}) if isinstance(optimizer, Adam) else None
               for _ in range(workers)]
    k = config.order - 1
    train_ids = torch.as_tensor(corpus.train.astype(np.int64))
    padded = torch.cat([torch.full((k,), corpus.pad_id, dtype=torch.int64), train_ids]).share_memory_()
    n_batches = math.ceil(len(train_ids) / run["batch_size"])

    ctx = mp.get_context(START_METHOD)
    counters = (ctx.Value("q", 0), ctx.Value("q", state["examples"]), ctx.Value("q", state["step"]), ctx.Value("b", 0))
    adam_steps = ctx.Array("q", [getattr(optimizer, "t", 0)] * workers, lock=False)
    commands, results = ctx.SimpleQueue(), ctx.SimpleQueue()
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(i, net, moments[i], adam_steps, recipe, padded, k, run["batch_size"], run["seed"], run["bf16"],
                               counters, commands, results)) for i in range(workers)]
    for p in procs:
        p.start()
    budget = None if session["time_budget"] is None else 60.0 * session["time_budget"]
    start = time.monotonic()
    elapsed_before = state["elapsed"]

    def elapsed() -> float:
        return elapsed_before + time.monotonic() - start

    def checkpoint() -> None:
        state["elapsed"] = elapsed()
        if isinstance(optimizer, Adam):  # workers are idle here
            for store, kind in ((optimizer.m, 0), (optimizer.v, 1)):
                for name, t in store.items():
                    t.copy_(torch.stack([own[kind][name] for own in moments]).mean(dim=0))
            optimizer.t = max(adam_steps)
        ck.save_training_state(out, net, optimizer, state)

    log(f"training {run['preset']} (n={config.order}, h={config.hidden}, m={config.features}, direct={config.direct}; "
        f"{config.parameter_count():,} parameters) on {corpus.name}, recipe {recipe.name}, batch {run['batch_size']}, "
        f"--parallel hogwild with {workers} worker processes (1 thread each)")
    stop = None
    try:
        while stop is None:
            epoch = state["epoch"]
            if epoch >= session["epochs"]:
                break
            counters[0].value = state["batch"]
            deadline = None if budget is None else time.time() + max(budget - elapsed(), 0.0)
            for _ in procs:
                commands.put((epoch, lr * recipe.lr_gamma ** epoch, deadline))
            failures = []
            for _ in procs:
                _, loss_sum, count, failure = _collect(results, procs)
                state["loss_sum"] += loss_sum
                state["loss_count"] += count
                failures += [failure] if failure else []
            state.update(batch=counters[0].value, examples=counters[1].value, step=counters[2].value)
            if failures:
                raise tr.TrainingDiverged(f"training stopped at epoch {epoch + 1}, step {state['step']}: the loss became "
                                          f"{failures[0]}; the best model so far is intact in {out / ck.WEIGHTS}. "
                                          "Try a smaller --lr or --batch-size.")
            if state["batch"] < n_batches:
                stop = f"time budget of {session['time_budget']} minutes used"
            partial, early = end_epoch(out, net, corpus, run, state, epoch, n_batches, lr * recipe.lr_gamma ** epoch,
                                       elapsed(), log)
            stop = stop or early
            if partial or stop is not None or state["epoch"] >= session["epochs"]:
                break
            checkpoint()
            tr.write_metrics(out, state["history"])
    finally:
        for _ in procs:
            commands.put(None)
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    if stop is None:
        stop = f"reached {session['epochs']} epochs"
    state["finished"] = stop.startswith("early stopping")
    state["stop_reason"] = stop
    checkpoint()
    if state["history"]:
        tr.write_metrics(out, state["history"])
    log(f"stopped: {stop}; best valid ppl "
        + (f"{state['best']['valid_ppl']:.2f} (epoch {state['best']['epoch']})" if state["best"] else "none yet"))
    return state


def _collect(results, procs: list) -> tuple:
    """The next worker report; NnlmError if a worker died instead of reporting."""
    while True:
        if not results.empty():
            return results.get()
        dead = [i for i, p in enumerate(procs) if not p.is_alive()]
        if dead:
            code = procs[dead[0]].exitcode
            raise NnlmError(f"Hogwild worker {dead[0]} of {len(procs)} stopped (exit code {code}); the last checkpoint "
                            "is intact: restart with --resume")
        time.sleep(0.01)
