"""Training the NPLM: the loop every trainer runs, and `train`, the single-process entry point.

Examples, their order and batches are in nnlm.neural.run.batches; the run's options and run.json in
nnlm.neural.run.config and .run_config; the setup every trainer shares and the trainers' registry in
nnlm.neural.run.pipeline; recipes (how the parameters are updated, the learning-rate schedule,
regularisation) in nnlm.neural.run.recipes, declared there without torch or files for the command-line parser
and carried out here (the schedules section: an epoch's rate, plateau and newbob after an epoch).
Output layer (`--loss`, a run's defining option): `full` (default) is the exact softmax over V;
`sampled` (importance-sampled softmax) and `nce` (noise-contrastive estimation) never compute
the |V|-wide softmax in training: K = `--samples` words (default 128) drawn per batch from the
unigram^0.75 proposal, only their rows (and the targets' and contexts') touched, updated by a
row-wise Adam (Adam recipes only). Both also train the model to self-normalize (log Z near 0),
so it can score without the softmax sum (`nnlm score --unnormalized`). See `nnlm.neural.net.sampled`.
Validation and `nnlm eval` always use the exact softmax (normalized over all of V). With a sampled loss, the running
figure is exp of the training objective, not a perplexity, and is labelled "train exp(objective)".
Early stopping: after `patience` epochs without a better validation perplexity (better by the
recipe's `min_improvement`, relative) training stops; the best weights (any improvement) are in
model.safetensors all along. The plateau schedule's state (current rate, stalled epochs) is in
state.json, so a resumed run continues exactly.

One loop (`run_epochs`) serves every trainer: a `Trainer` (nnlm.neural.run.trainer) holds what differs
-- how a batch's loss is computed and agreed on, which process logs and writes, what the whole model
is, who runs the batches -- and nnlm.neural.parallel.ranks (DDP, vocabulary-parallel) and
nnlm.neural.parallel.hogwild override those few methods.
"""
from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nnlm import threads
from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import perplexity_from_log_probs, split_log_probs
from nnlm.neural.net import presets
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.batches import epoch_order
from nnlm.neural.run.config import SessionOptions, TrainRequest, as_request
from nnlm.neural.run.pipeline import TrainerSpec, nothing_left_to_do, prepare, trainer_spec
from nnlm.neural.run.recipes import BEST_OPTIMIZER, Recipe
from nnlm.neural.run.run_config import Run, open_run, pick_device
from nnlm.neural.run.stop_signals import Interrupted, StoppedBySignal, StopRequest
from nnlm.neural.run.trainer import Clock, Trainer, TrainingSetup, TrainingState, running_label
from nnlm.wording import counted

__all__ = ["prepare_run", "run_epochs", "train", "train_with"]
CPU = torch.device("cpu")  # the default device of prepare_run


def prepare_run(out: Path, request: TrainRequest | Mapping[str, Any], resume: bool,
                device: torch.device = CPU) -> tuple[dict[str, Any], Corpus]:
    """The run's defining options as run.json holds them (new, or the saved ones checked against
    what was asked), and its corpus: `open_run`, returning run.json's dict."""
    run, corpus = open_run(out, as_request(request), resume, device)
    return run.to_json(), corpus


# --- the loop --------------------------------------------------------------------------------

def under_torchrun() -> bool:
    """Whether this process is one rank of a torchrun group (torchrun sets WORLD_SIZE and RANK)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def train(out: Path | str, request: TrainRequest | Mapping[str, Any], resume: bool = False, progress: bool = True,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train (or continue) the run in `out` in this process; returns its final state. `request`: the
    typed request, or its keyword form ({"lr": 0.01, "epochs": 3}: `TrainRequest.of`). Refused under
    torchrun, where every process would train the same run on its own (nnlm.neural.parallel trains there)."""
    if under_torchrun():
        raise NnlmError("under torchrun, choose --parallel ddp or --parallel vocab (otherwise every process "
                        "would train the same run on its own)")
    return train_with("single", out, as_request(request), resume=resume, progress=progress, log=log)


def train_with(name: str, out: Path | str, request: TrainRequest, resume: bool = False, progress: bool = True,
               log: Callable[[str], None] = print, workers: int | None = None) -> dict[str, Any]:
    """Train (or continue) the run in `out` with the trainer registered as `name` that runs from this
    process (single, or hogwild with `workers` processes); returns the final state."""
    spec = trainer_spec(name)
    session = request.session
    device = CPU if spec.cpu_only else pick_device(session.device)
    # --threads, or the cores free now (re-checked while training); the caller's settings back afterwards
    with threads.governing(session.threads, device) if not spec.cpu_only else nullcontext():
        setup = prepare(Path(out), request, resume, device, spec, workers, progress)
        return run_setup(setup, spec, log, progress)


def run_setup(setup: TrainingSetup, spec: TrainerSpec, log: Callable[[str], None], progress: bool) -> dict[str, Any]:
    """Train a prepared run with the trainer `spec` names; the final state (or the saved one if there
    is nothing left to do)."""
    if nothing_left_to_do(setup, log):
        return setup.state
    trainer = spec.trainer_class(setup.net.config)(setup)
    try:
        with StopRequest() as stop_request:
            return run_epochs(setup.out, setup.run, setup.session, setup.corpus, setup.state, trainer, log, progress,
                              stop_request)
    finally:
        trainer.close()


def tied_rows_text(run: Run) -> str:
    """How the run's rows started, as the training log's first line says it: tied to classes, or random after
    --init-features auto compared (with what it compared); '' for random rows nothing chose."""
    evidence = run.init_evidence
    refined = run.feature_clustering == "trigram"
    valid = evidence and evidence["refined_class_trigram_valid" if refined else "class_trigram_valid"]
    why = (f" (--init-features auto: a class trigram on {evidence['classes']} classes has valid perplexity "
           f"{valid:.1f}, the word KN trigram {evidence['kn_trigram_valid']:.1f})") if evidence else ""
    if run.init_features != "exchange":
        return f"random rows{why}, " if evidence else ""
    pairs = " with class-pair features" if run.model_config.class_context else ""
    how = " refined by trigrams" if refined else ""
    return f"rows tied to {run.feature_classes} exchange classes{how}{pairs}{why}, "


def run_epochs(out: Path, run: Run, session: SessionOptions, corpus: Corpus, state: TrainingState,
               trainer: Trainer, log: Callable[[str], None], progress: bool,
               stop_request: StopRequest | None = None) -> TrainingState:
    """The training loop of every trainer: epochs of batches in the order of a permutation seeded
    with (seed, epoch), validation after each, early stopping, the time budget, checkpoints, and a
    stop on SIGINT/SIGTERM (`stop_request`: a checkpoint, then StoppedBySignal).
    Returns the final state (on every process of a parallel run)."""
    recipe = run.training_recipe
    clock = Clock(state["elapsed"], session.time_budget, session.checkpoint_minutes, stop_request)
    out_of_time = f"time budget of {session.time_budget} minutes used"

    def save(whole: tuple[nn.Module, Any] | None = None) -> None:
        net, optimizer = whole or trainer.whole()
        state["elapsed"] = clock.elapsed()
        if trainer.writer:
            ck.save_training_state(out, net, optimizer, state)
        clock.last_save = time.monotonic()

    def stopped() -> StoppedBySignal:
        return StoppedBySignal(*stopped_message(out, state, stop_request, log))

    log(start_line(run, corpus, trainer))
    first_step, stop = state["step"], None
    while stop is None and state["epoch"] < session.epochs:
        if state["step"] > first_step and trainer.agree([float(trainer.writer and clock.out_of_time())])[0]:
            stop = out_of_time  # spent scoring the last epoch: an epoch of one batch would only score again
            break
        trainer.optimizer.lr = epoch_lr(recipe, state)
        order = epoch_order(run.seed, state["epoch"], trainer.n_examples)
        trainer.net.train()
        if trainer.run_epoch(state, order.to(trainer.device), clock, save, progress):
            stop = out_of_time
        if trainer.agree([float(clock.signalled())])[0]:  # every rank stops where it is, the writer saves
            save()
            raise stopped()
        whole, valid = validate(trainer, corpus, stop_request, save, stopped)
        decision = end_epoch(out, whole[0], valid, run, state, trainer.n_batches, trainer.optimizer.lr,
                             clock.elapsed, log, whole[1]) if trainer.writer else None
        state, decision = trainer.share((state, decision))
        partial, early_stop = decision
        stop = early_stop or stop  # an early stop at the budget's end still finishes the run
        if partial or stop is not None or state["epoch"] >= session.epochs:
            break
        save(whole)
        if trainer.writer:
            ck.write_metrics(out, state["history"], run.loss == "full", last=False)
    return finish(out, run, state, trainer, stop or f"reached {counted(session.epochs, 'epoch')}", save, log)


def start_line(run: Run, corpus: Corpus, trainer: Trainer) -> str:
    """The training log's first line: the net, its corpus, its recipe and output layer, how its rows started,
    and the trainer."""
    config = trainer.config
    return (f"training {presets.run_name(run.preset, config)} (n={config.order}, h={config.hidden}, "
            f"m={config.features}, direct={config.direct}; {config.parameter_count():,} parameters) on "
            f"{corpus.name}, recipe {run.training_recipe.name}"
            f"{' (bf16 output layer)' if run.bf16 and run.loss == 'full' else ''}, "
            + (f"{run.loss} loss with {run.samples} samples, " if run.loss != "full" else "")
            + (f"class-factored output ({config.output_classes} {run.output_clustering} classes), "
               if config.output_classes else "")
            + (f"tree output (branching {config.output_tree}, {run.output_clustering} tree), "
               if config.output_tree else "")
            + tied_rows_text(run)
            + trainer.describe())


def validate(trainer: Trainer, corpus: Corpus, stop_request: StopRequest | None,
             save: Callable[..., None], stopped: Callable[[], StoppedBySignal]
             ) -> tuple[tuple[nn.Module, Any], tuple[float, Any, float] | None]:
    """After an epoch's batches: the whole model (and its optimizer) and its validation perplexity with the
    log P of every valid token and the seconds it took (None on a process that does not validate). A signal
    during validation saves the epoch's batches (--resume validates them first) and stops."""
    if hasattr(trainer.optimizer, "flush"):  # RowAdam's exact decay: every row up to date before it is scored
        trainer.optimizer.flush()
    whole = trainer.whole()
    started = time.monotonic()
    try:
        with stop_request.interrupting() if stop_request and trainer.validates_alone else nullcontext():
            lm = trainer.validation_model(whole[0], corpus)  # a collective in ddp and vocab runs
            valid = None if lm is None else (*scored_validation(lm, corpus), time.monotonic() - started)
    except Interrupted:
        save(whole)
        raise stopped() from None
    return whole, valid


def scored_validation(lm: Any, corpus: Corpus) -> tuple[float, Any]:
    """valid's perplexity under `lm` and the log P of every valid token it comes from."""
    scores = split_log_probs(lm, corpus, "valid")
    return perplexity_from_log_probs(scores), scores


def finish(out: Path, run: Run, state: TrainingState, trainer: Trainer, stop: str, save: Callable[..., None],
           log: Callable[[str], None]) -> TrainingState:
    """The run's end for `stop`: finished only by early stopping (a budget- or epoch-limited run may be
    resumed), the last checkpoint and metrics, the line saying why and how well."""
    state["finished"] = stop.startswith("early stopping")
    state["stop_reason"] = stop
    save()
    if trainer.writer and state["history"]:
        ck.write_metrics(out, state["history"], run.loss == "full")
    log(f"stopped: {stop}; best valid ppl "
        + (f"{state['best']['valid_ppl']:.2f} (epoch {state['best']['epoch']})" if state["best"] else "none yet"))
    return state


def stopped_message(out: Path, state: TrainingState, stop_request: StopRequest | None,
                    log: Callable[[str], None]) -> tuple[int, str]:
    """The signal and the line saying where training stopped and how to continue (also logged)."""
    signum = stop_request.signum if stop_request and stop_request.requested else signal.SIGTERM
    where = f"epoch {state['epoch'] + 1}, step {state['step']}"
    message = (f"stopped by {signal.Signals(signum).name} at {where}; the checkpoint is saved in {out}: "
               f"continue with: nnlm train --out {out} --resume")
    log(message)
    return signum, message


# --- the learning-rate schedules as they run (declared in nnlm.neural.run.recipes) -----------------

def epoch_lr(recipe: Recipe, state: dict[str, Any]) -> float:
    """The learning rate of the epoch state["epoch"]: a function of the epoch for the `epoch` schedule,
    the state's own (lowered by `end_epoch` on a plateau, checkpointed) for `plateau`."""
    if recipe.lr_schedule == "epoch":
        return recipe.lr * recipe.lr_factor ** state["epoch"]
    if recipe.lr_schedule in ("plateau", "newbob") and state.get("lr") is not None:
        return state["lr"]
    return recipe.lr  # constant; paper (PaperSGD applies its eps_t itself); a plateau run's first epoch


def keep_best_optimizer(out: Path, optimizer: Any, recipe: Recipe) -> None:
    """With model.safetensors (a better validation), the optimizer state that goes with it: newbob restores both."""
    if recipe.lr_schedule == "newbob":
        ck.save_tensors(out / BEST_OPTIMIZER, optimizer.state_tensors())


def next_rate(out: Path, net: Any, optimizer: Any, recipe: Recipe, state: dict[str, Any], lr: float,
              improved: bool, real: bool, log: Callable[[str], None]) -> None:
    """After a whole epoch (state["epoch"] already advanced): the plateau and newbob schedules' next rate.

    plateau: x lr_factor after `plateau_patience` epochs without a real improvement.
    newbob (the schedule of speech recognition and RNNLM training): the same test, but a stalled epoch
    is undone -- the best weights and the optimizer state saved with them are put back -- before the
    rate is lowered, and from the first stall on the rate is lowered after every epoch (annealing).
    An epoch that overfits at a rate too high for the data is then not the starting point of the slower
    epochs. The restored tensors are checkpointed with the state, so a resume continues exactly."""
    if recipe.lr_schedule not in ("plateau", "newbob"):
        return
    state["lr_stalls"] = 0 if real else state.get("lr_stalls", 0) + 1
    stalled = state["lr_stalls"] >= recipe.plateau_patience
    if recipe.lr_schedule == "newbob" and stalled and not improved:
        ck.load_weights(net, out / ck.WEIGHTS)
        tensors, _ = ck.load_tensors(out / BEST_OPTIMIZER)
        optimizer.load_state_tensors(tensors)
        log(f"validation stalled: the best weights and optimizer state (epoch {state['best']['epoch']}) restored")
    if stalled or (recipe.lr_schedule == "newbob" and state.get("annealing")):
        state.update(lr=lr * recipe.lr_factor, lr_stalls=0, annealing=recipe.lr_schedule == "newbob")
        log(f"{'validation stalled' if stalled else 'annealing'}: learning rate {lr:.3g} -> {state['lr']:.3g}")


def end_epoch(out: Path, net: nn.Module, valid: tuple[float, Any, float], run: Run, state: TrainingState,
              n_batches: int, lr: float, elapsed: Callable[[], float],
              log: Callable[[str], None], optimizer: Any = None) -> tuple[bool, str | None]:
    """Given the validation perplexity, the valid tokens' log P and the seconds it took, keep the best
    weights (and those scores beside them: nnlm.neural.run.checkpoint), update the history and the
    early-stopping count. Returns (partial epoch, early-stopping reason or None)."""
    epoch = state["epoch"]
    partial = state["batch"] < n_batches  # only when the time budget ran out mid-epoch
    label = round(epoch + state["batch"] / n_batches, 3) if partial else epoch + 1
    valid_ppl, scores, valid_seconds = valid
    train_ppl = math.exp(state["loss_sum"] / max(state["loss_count"], 1))
    state["history"].append({"epoch": label, "train_ppl": train_ppl, "valid_ppl": valid_ppl,
                             "examples": state["examples"], "elapsed_seconds": round(elapsed(), 1),
                             "valid_seconds": round(valid_seconds, 1), "lr": lr}
                            | ({"partial": True} if partial else {}))
    recipe = run.training_recipe
    improved = state["best"] is None or valid_ppl < state["best"]["valid_ppl"]
    real = state["best"] is None or valid_ppl < state["best"]["valid_ppl"] * (1.0 - recipe.min_improvement)
    if improved:
        state["best"] = {"epoch": label, "valid_ppl": valid_ppl}
        ck.save_tensors(out / ck.WEIGHTS, dict(net.state_dict()), {"epoch": str(label), "valid_ppl": repr(valid_ppl)})
        ck.keep_valid_scores(out, scores)
        keep_best_optimizer(out, optimizer, recipe)
    log(f"epoch {label}: {running_label(run)} {train_ppl:.2f} (running), valid ppl {valid_ppl:.2f}"
        f"{' (best)' if improved else ''}; {elapsed() / 60:.1f} min")
    if partial:  # the weights at the budget's end are scored too; the position is kept for --resume
        return True, None
    state["bad_epochs"] = 0 if real else state["bad_epochs"] + 1
    state.update(epoch=epoch + 1, batch=0, loss_sum=0.0, loss_count=0)
    if state["bad_epochs"] >= run.patience:
        better = (f"{100 * recipe.min_improvement:g}% better than the best" if recipe.min_improvement
                  else "better")
        return False, f"early stopping: no {better} validation perplexity for {counted(run.patience, 'epoch')}"
    next_rate(out, net, optimizer, recipe, state, lr, improved, real, log)
    return False, None
