"""Parallel training on torch.distributed: synchronous data-parallel (`ddp`) and the paper's
parameter-parallel output layer (`vocab`); Hogwild lives in `nnlm.neural.hogwild`.

Both modes run the same loop as `nnlm.neural.train` (same recipes, epoch permutation, validation,
early stopping, time budget) in every rank, and leave the same run directory, written by rank 0
only: model.safetensors holds the whole model, so `nnlm eval`, `nnlm.load` etc. see no difference.

- ddp: the global batch of `--batch-size` examples is cut into `world` contiguous shards, rank r
  computing the loss of shard r; DistributedDataParallel sums the gradients (each rank's loss is
  scaled so their average is the gradient of the global batch mean). The update is therefore the
  single-process update of that batch, up to float summation order.
- vocab: every rank reads the whole batch and owns a slice of the output layer
  (`nnlm.neural.vocab_parallel`); all ranks share one RNG state, so even dropout masks match a
  single process.

Checkpoints hold whole tensors (slices gathered, optimizer state included), so a run may be
resumed with another world size or mode: the checkpoint is re-sharded when it is loaded.
Rank 0 alone reads and writes the run directory and broadcasts what it read; the corpus must be
readable by every rank (`brown` from its cache, or the same directory path on every machine).
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural import checkpoint as ck
from nnlm.neural import distributed as dd
from nnlm.neural import train as tr
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM
from nnlm.neural.vocab_parallel import VocabParallelNPLM, assemble_nplm, full_tensors, vocab_slices

MODES = ("none", "hogwild", "ddp", "vocab")


def _quiet(_: str) -> None:
    pass


def train_parallel(out: Path | str, requested: dict[str, Any], mode: str, workers: int | None = None,
                   resume: bool = False, progress: bool = True, log: Callable[[str], None] = print,
                   timeout: float = dd.DEFAULT_TIMEOUT) -> dict[str, Any] | None:
    """Train with `mode`; under torchrun this process is one rank, otherwise `workers` local
    processes are started. Returns the final state (on rank 0; None on the other ranks)."""
    if mode not in MODES:
        raise NnlmError(f"--parallel must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        if dd.under_torchrun():
            raise NnlmError("under torchrun, choose --parallel ddp or --parallel vocab (otherwise every process "
                            "would train the same run on its own)")
        if workers is not None:
            raise NnlmError("--workers needs --parallel hogwild, ddp or vocab")
        return tr.train(out, requested, resume=resume, progress=progress, log=log)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise NnlmError(f"--workers must be a positive integer, got {workers!r}")
    if timeout <= 0:
        raise NnlmError(f"--dist-timeout must be positive, got {timeout}")
    out = Path(out)
    if mode == "hogwild":
        if dd.under_torchrun():
            raise NnlmError("--parallel hogwild shares memory between local processes: run it without torchrun")
        from nnlm.neural.hogwild import train_hogwild

        return train_hogwild(out, requested, workers or 2, resume=resume, progress=progress, log=log)
    if dd.under_torchrun():
        if workers is not None and workers != int(os.environ["WORLD_SIZE"]):
            raise NnlmError("under torchrun the number of processes is torchrun's (--nproc-per-node x --nnodes); "
                            "drop --workers")
        device = dd.rank_device(tr.pick_device(requested.get("device", "auto")))
        dd.init_group(device, timeout)
        try:
            return run_rank(out, requested, mode, resume, progress, log if dist.get_rank() == 0 else _quiet, timeout)
        finally:
            dd.leave_group()
    if requested.get("device", "auto") == "cuda":
        raise NnlmError("--parallel ddp/vocab on GPUs: launch with torchrun (one process per GPU)")
    dd.launch_local(run_rank, workers or 2,
                    args=(out, requested | {"device": "cpu"}, mode, resume, progress, log if log is print else None, timeout),
                    timeout=timeout)
    return ck.read_json(out / ck.STATE, "training state")


def run_rank(out: Path, requested: dict[str, Any], mode: str, resume: bool, progress: bool,
             log: Callable[[str], None] | None, timeout: float) -> dict[str, Any] | None:
    """One rank's whole training run; turns a failed collective into one clear line."""
    log = log if (log is not None and dist.get_rank() == 0) else _quiet
    try:
        return _run_rank(out, requested, mode, resume, progress and dist.get_rank() == 0, log)
    except NnlmError:
        raise
    except RuntimeError as exc:  # gloo/NCCL: a peer closed its connection, or the timeout expired
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise NnlmError(f"rank {dist.get_rank()}: lost contact with the other ranks ({first}); a rank died or "
                        f"stalled for more than {timeout:.0f} s. The last checkpoint in {out} is intact: "
                        "restart with --resume") from None


def _step_seed(seed: int, step: int, rank: int) -> int:
    """ddp: each rank's dropout RNG for one step, from numbers the run state holds (exact resume)."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, np.uint64)[0] >> 1)


def _sliced_view(tensors: dict[str, torch.Tensor], lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Rows [lo, hi) of the output layer's tensors (parameters and their optimizer state)."""
    return {k: (t[lo:hi] if k.rsplit(".", 1)[-1] in ("b", "W", "U") else t) for k, t in tensors.items()}


def _run_rank(out: Path, requested: dict[str, Any], mode: str, resume: bool, progress: bool,
              log: Callable[[str], None]) -> dict[str, Any] | None:
    rank, world = dist.get_rank(), dist.get_world_size()
    session = tr.SESSION_DEFAULTS | {k: v for k, v in requested.items() if k in tr.SESSION_DEFAULTS}
    device = dd.rank_device(tr.pick_device(session["device"]))
    if session["threads"] is not None:
        if session["threads"] < 1:
            raise NnlmError(f"--threads must be at least 1, got {session['threads']}")
        torch.set_num_threads(session["threads"])

    # Rank 0 prepares (or checks) the run directory and reads the checkpoint; the others receive it.
    failure = run = state = None
    whole: dict[str, torch.Tensor] | None = None
    if rank == 0:
        try:
            run, corpus = tr.prepare_run(out, {k: v for k, v in requested.items() if k in tr.RUN_DEFAULTS}, resume, device)
            recipe = tr.RECIPES[run["recipe"]]
            torch.manual_seed(run["seed"])  # the same initial weights as a single-process run
            net0 = NPLM(ModelConfig.from_dict(run["model"]))
            opt0 = tr.build_optimizer(net0, recipe, 1.0)
            state = (ck.load_training_state(out, net0, opt0) if resume else None) or tr._fresh_state()
            whole = {f"model.{k}": v for k, v in net0.state_dict().items()} | opt0.state_tensors()
            whole["rng.torch"] = torch.get_rng_state()
            del net0, opt0
        except NnlmError as exc:
            failure = str(exc)
    failure, run, state = dd.broadcast_object((failure, run, state))
    if failure:
        raise NnlmError(failure)
    if rank != 0:
        corpus = tr._corpus_of(run)
        if corpus.vocab.fingerprint != run["vocab_fingerprint"]:
            raise NnlmError(f"rank {rank}: the corpus {run['corpus']} has another vocabulary here than on rank 0")
    whole = {k: v.cpu() for k, v in dd.broadcast_tensors(whole, device).items()}
    torch.set_rng_state(whole.pop("rng.torch").to(torch.uint8))

    if tr.nothing_left_to_do(out, state, session, resume, log):
        return state if rank == 0 else None
    before = state.get("parallel")
    if resume and before and (before["mode"], before["world_size"]) != (mode, world):
        log(f"re-sharding the checkpoint: it was written by {before['mode']} on {before['world_size']} processes, "
            f"continuing with {mode} on {world}")
    state["parallel"] = {"mode": mode, "world_size": world}

    recipe = tr.RECIPES[run["recipe"]]
    lr = run["lr"] if run["lr"] is not None else recipe.lr
    config = ModelConfig.from_dict(run["model"])
    model_part = {k[len("model."):]: v for k, v in whole.items() if k.startswith("model.")}
    optim_part = {k: v for k, v in whole.items() if k.startswith("optim.")}
    if mode == "ddp":
        net = NPLM(config, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
        net.load_state_dict(model_part)
        net.to(device)
        optimizer = tr.build_optimizer(net, recipe, lr)
        optimizer.load_state_tensors({k: v.to(device) for k, v in optim_part.items()})
        from torch.nn.parallel import DistributedDataParallel

        engine = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        lo, hi = vocab_slices(config.vocab_size, world)[rank]
        net = VocabParallelNPLM.from_full(model_part, config, rank, world, recipe.dropout_x, recipe.dropout_h).to(device)
        optimizer = tr.build_optimizer(net, recipe, lr)
        optimizer.load_state_tensors({k: v.to(device) for k, v in _sliced_view(optim_part, lo, hi).items()})
        engine = net
    del whole, model_part, optim_part

    def whole_model() -> tuple[NPLM, dict[str, torch.Tensor]]:
        """The whole model and optimizer state (a collective in vocab mode; meaningful on rank 0)."""
        if mode == "ddp":
            return net, optimizer.state_tensors()
        gathered = full_tensors(net, optimizer.state_tensors())
        params = {k: v for k, v in gathered.items() if not k.startswith("optim.")}
        return assemble_nplm({k: v.cpu() for k, v in params.items()}, config).to(device), \
            {k: v for k, v in gathered.items() if k.startswith("optim.")}

    k = config.order - 1
    train_ids = torch.as_tensor(corpus.train.astype(np.int64))
    padded = torch.cat([torch.full((k,), corpus.pad_id, dtype=torch.int64), train_ids]).to(device)
    window = torch.arange(k + 1, device=device)
    n_examples, batch = len(train_ids), run["batch_size"]
    n_batches = math.ceil(n_examples / batch)
    explode_at = tr.EXPLODED * math.log(config.vocab_size)
    budget = None if session["time_budget"] is None else 60.0 * session["time_budget"]
    start = last_save = time.monotonic()
    elapsed_before = state["elapsed"]
    dropout = recipe.dropout_x > 0 or recipe.dropout_h > 0

    def elapsed() -> float:
        return elapsed_before + time.monotonic() - start

    def checkpoint() -> None:
        nonlocal last_save
        whole_net, optim_state = whole_model()
        if rank == 0:
            state["elapsed"] = elapsed()
            ck.save_training_state(out, whole_net, SimpleNamespace(state_tensors=lambda: optim_state), state)
        last_save = time.monotonic()

    log(f"training {run['preset']} (n={config.order}, h={config.hidden}, m={config.features}, direct={config.direct}; "
        f"{config.parameter_count():,} parameters) on {corpus.name}, recipe {recipe.name}"
        f"{' (bf16 autocast)' if run['bf16'] else ''}, global batch {batch}, --parallel {mode} on {world} processes "
        f"({dist.get_backend()}), {torch.get_num_threads()} threads each, {device}")
    stop = None
    while stop is None:
        epoch = state["epoch"]
        if epoch >= session["epochs"]:
            stop = f"reached {session['epochs']} epochs"
            break
        optimizer.lr = lr * recipe.lr_gamma ** epoch
        order = torch.from_numpy(np.random.default_rng([run["seed"], epoch]).permutation(n_examples)).to(device)
        net.train()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=n_examples, initial=min(state["batch"] * batch, n_examples), unit="tok",
                       unit_scale=True, desc=f"epoch {epoch + 1}", leave=False, dynamic_ncols=True)
        while state["batch"] < n_batches:
            rows = padded[order[state["batch"] * batch:(state["batch"] + 1) * batch, None] + window]
            if mode == "ddp":
                if dropout:
                    torch.manual_seed(_step_seed(run["seed"], state["step"], rank))
                mine = rows.tensor_split(world)[rank]
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run["bf16"]):
                    logits = engine(mine[:, :k])
                loss_sum = F.cross_entropy(logits.float(), mine[:, k], reduction="sum")
                loss = loss_sum * (world / len(rows))  # DDP averages over ranks: this makes it the global mean
                contribution = float(loss_sum.detach())
            else:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run["bf16"]):
                    loss = net.loss(rows[:, :k], rows[:, k])
                contribution = float(loss.detach()) * len(rows) if rank == 0 else 0.0
            # One small all-reduce per step: the global loss, and rank 0's clock (budget, checkpoint).
            flags = [contribution, 0.0, 0.0]
            if rank == 0:
                flags[1] = float(budget is not None and elapsed() >= budget)
                flags[2] = float(time.monotonic() - last_save >= 60.0 * session["checkpoint_minutes"])
            total = torch.tensor(flags, dtype=torch.float64, device=device)
            dist.all_reduce(total)
            value = float(total[0]) / len(rows)
            if not math.isfinite(value) or value > explode_at:
                what = "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else f"exploding ({value:.1f})"
                raise tr.TrainingDiverged(f"training stopped at epoch {epoch + 1}, step {state['step']}: the loss became "
                                          f"{what}; the best model so far is intact in {out / ck.WEIGHTS}. "
                                          "Try a smaller --lr or --batch-size.")
            net.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step(state["examples"], len(rows))
            state["step"] += 1
            state["batch"] += 1
            state["examples"] += len(rows)
            state["loss_sum"] += value * len(rows)
            state["loss_count"] += len(rows)
            if bar is not None:
                bar.update(len(rows))
            if total[1] > 0:
                stop = f"time budget of {session['time_budget']} minutes used"
                break
            if total[2] > 0:
                checkpoint()
        if bar is not None:
            bar.close()
        whole_net, _ = whole_model()
        decision = None
        if rank == 0:
            decision = end_epoch(out, whole_net, corpus, run, state, epoch, n_batches, optimizer.lr, elapsed(), log)
        state, decision = dd.broadcast_object((state, decision))
        partial, stop_now = decision
        if partial:
            break
        if stop_now is not None:
            stop = stop_now
        if stop is not None or state["epoch"] >= session["epochs"]:
            break
        checkpoint()
        if rank == 0:
            tr.write_metrics(out, state["history"])
    if stop is None:
        stop = f"reached {session['epochs']} epochs"
    state["finished"] = stop.startswith("early stopping")
    state["stop_reason"] = stop
    checkpoint()
    if rank != 0:
        return None
    if state["history"]:
        tr.write_metrics(out, state["history"])
    log(f"stopped: {stop}; best valid ppl "
        + (f"{state['best']['valid_ppl']:.2f} (epoch {state['best']['epoch']})" if state["best"] else "none yet"))
    return state


def end_epoch(out: Path, net: NPLM, corpus: Corpus, run: dict[str, Any], state: dict[str, Any], epoch: int,
              n_batches: int, lr: float, elapsed: float, log: Callable[[str], None]) -> tuple[bool, str | None]:
    """Score validation, keep the best weights, update the history and early-stopping counters
    (the single-process trainer's rules). Returns (partial epoch, early-stopping reason or None)."""
    partial = state["batch"] < n_batches
    label = round(epoch + state["batch"] / n_batches, 3) if partial else epoch + 1
    device = next(net.parameters()).device
    lm = NeuralLM(net, corpus.vocab, corpus.pad_token, device=device)
    scoring_started = time.monotonic()
    valid_ppl = perplexity(lm, corpus, "valid")
    train_ppl = math.exp(state["loss_sum"] / max(state["loss_count"], 1))
    state["history"].append({"epoch": label, "train_ppl": train_ppl, "valid_ppl": valid_ppl,
                             "examples": state["examples"], "elapsed_seconds": round(elapsed, 1),
                             "valid_seconds": round(time.monotonic() - scoring_started, 1), "lr": lr}
                            | ({"partial": True} if partial else {}))
    improved = state["best"] is None or valid_ppl < state["best"]["valid_ppl"]
    if improved:
        state["best"] = {"epoch": label, "valid_ppl": valid_ppl}
        ck.save_tensors(out / ck.WEIGHTS, dict(net.state_dict()), {"epoch": str(label), "valid_ppl": repr(valid_ppl)})
    log(f"epoch {label}: train ppl {train_ppl:.2f} (running), valid ppl {valid_ppl:.2f}"
        f"{' (best)' if improved else ''}; {elapsed / 60:.1f} min")
    if partial:
        return True, None
    state["bad_epochs"] = 0 if improved else state["bad_epochs"] + 1
    state.update(epoch=epoch + 1, batch=0, loss_sum=0.0, loss_count=0)
    if state["bad_epochs"] >= run["patience"]:
        return False, f"early stopping: no better validation perplexity for {run['patience']} epochs"
    return False, None
