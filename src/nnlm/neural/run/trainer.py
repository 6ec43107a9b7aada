"""A trainer: one process's part in training a run, and the clock that bounds it.

`Trainer` is the single process: it computes whole batches, and it alone logs and writes the run
directory. The parallel trainers (`nnlm.neural.parallel.hogwild`, `nnlm.neural.parallel.ranks`) subclass it and
override the few methods that differ: how a batch's loss is computed and agreed on, which process
writes, what the whole model is, who runs the batches. `nnlm.neural.run.pipeline` picks one by name.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import nn

from nnlm import threads
from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.neural.lm.scoring import BF16, EXACT
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.nets import language_model
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.batches import EXPLODED, batch_rows, diverged, padded_stream, update
from nnlm.neural.run.config import SessionOptions
from nnlm.neural.run.run_config import Run
from nnlm.neural.run.stop_signals import StopRequest
from nnlm.progress import Silent, show_progress

CHECK_THREADS_EVERY = 64  # batches between looks at the thread governor (it re-measures only every RECHECK_SECONDS)


class TrainingState(TypedDict, total=False):
    """state.json: a run's progress (checkpoint.STATE_SCHEMA checks it when read). A dict, as JSON
    reads and writes it; this names its keys and their types."""

    step: int            # updates made
    epoch: int           # epochs completed
    batch: int           # batches done of the current epoch (its position in the epoch's order)
    examples: int        # training examples seen (the paper recipe's t)
    loss_sum: float      # summed -log P of the current epoch so far (the running figure)
    loss_count: int
    history: list[dict[str, Any]]  # one entry per validation (metrics.jsonl)
    best: dict[str, Any] | None    # {"epoch", "valid_ppl"} of model.safetensors
    bad_epochs: int      # epochs without a real improvement (early stopping)
    elapsed: float       # training seconds over all sessions
    finished: bool
    stop_reason: str | None
    tensors: str | None  # the checkpoint file these numbers go with
    lr: float | None     # plateau schedule: the current rate (None: the recipe's)
    lr_stalls: int       # plateau schedule: epochs since the rate last had a reason to stay
    annealing: bool      # newbob schedule: stalled once, so the rate drops after every epoch
    parallel: dict[str, Any]  # {"mode", "world_size"} of the trainer that wrote it (hogwild, ddp, vocab)


class TrainingDiverged(NnlmError):
    """The loss became NaN/inf or exploded; the best model on disk is untouched."""


def running_label(run: Run) -> str:
    """What the running training figure is called: a perplexity for the full softmax, only exp of
    the objective for a sampled or NCE loss (which does not normalize over V)."""
    return "train ppl" if run.loss == "full" else "train exp(objective)"


def divergence_message(out: Path, state: TrainingState, what: str, run: Run | None = None) -> str:
    """What a diverged run says: where it stopped, what is safe on disk, and which options to lower (the
    class pull too where the run has one: pull x step above 1 alone makes the rows oscillate apart)."""
    best = state["best"]
    kept = (f"the best model (epoch {best['epoch']}, valid perplexity {best['valid_ppl']:.2f}) is intact in "
            f"{out / ck.WEIGHTS}" if best else "no epoch had finished, so no model was saved")
    pulled = run is not None and run.init_features == "exchange" and (run.class_pull or 0) > 0
    lower = "--lr, --batch-size or --class-pull" if pulled else "--lr or --batch-size"
    return (f"training stopped at epoch {state['epoch'] + 1}, step {state['step']}: the loss became {what}; "
            f"{kept}. Try a smaller {lower}.")


@dataclass
class TrainingSetup:
    """What every trainer is given (`nnlm.neural.run.pipeline.prepare` builds it): the run, this
    invocation's options, the corpus, the model, its optimizer and loss, and the progress so far."""

    out: Path
    run: Run
    session: SessionOptions
    corpus: Corpus
    device: torch.device
    net: nn.Module
    optimizer: Any
    loss_fn: Callable[..., torch.Tensor]
    state: TrainingState
    resume: bool = False
    workers: int | None = None  # processes asked for (hogwild, local ddp/vocab)


class Trainer:
    """One process's part in training a run: its model and optimizer, the training tokens, and
    the few things the parallel trainers do differently (nnlm.neural.parallel.ranks, .hogwild override
    them). This base class is the single process: it computes whole batches, and it alone logs
    and writes the run directory."""

    writer = True  # this process logs and writes the run directory
    validates_alone = True  # its validation involves no other process (so a signal may cut it short)

    def __init__(self, setup: TrainingSetup) -> None:
        self.out, self.net, self.optimizer, self.run = setup.out, setup.net, setup.optimizer, setup.run
        self.device = device = setup.device
        self.loss_fn = setup.loss_fn  # batch_loss (full softmax) or a sampled loss (nnlm.neural.net.sampled)
        self.config: ModelConfig = self.net.config
        self.k = self.config.order - 1
        corpus = setup.corpus
        self.padded = padded_stream(corpus.train, self.k, corpus.pad_id, device)
        self.window = torch.arange(self.k + 1, device=device)
        self.n_examples, self.batch = len(corpus.train), self.run.batch_size
        self.n_batches = math.ceil(self.n_examples / self.batch)
        self.explode_at = EXPLODED * math.log(self.config.vocab_size)

    def describe(self) -> str:
        governor = threads.current()
        cores = governor.describe() if governor else threads.thread_count(torch.get_num_threads())
        return f"batch {self.batch}, {cores}, {self.device}"

    def batch_at(self, order: torch.Tensor, b: int) -> Any:
        """Batch b of the epoch: rows [B, k+1] (context, then target), one gather from the padded stream. A
        trainer with batches of its own (nnlm.neural.run.recurrent_trainer: windows of streams) overrides
        this, `examples_in`, `batch_loss` and `update`."""
        return batch_rows(self.padded, order, b, self.batch, self.window)

    def examples_in(self, rows: Any) -> int:
        """The examples (predicted tokens) of a batch."""
        return len(rows)

    def update(self, loss: torch.Tensor, examples_seen: int, examples: int) -> None:
        """One step of the optimizer on the gradient of `loss`."""
        update(self.net, self.optimizer, loss, examples_seen, examples)

    def batch_loss(self, rows: torch.Tensor, step: int) -> tuple[torch.Tensor, float]:
        """The loss to differentiate here, and this process's part of the batch's summed -log P."""
        loss = self.loss_fn(self.net, rows[:, :self.k], rows[:, self.k], self.run.bf16)
        return loss, float(loss.detach()) * len(rows)

    def agree(self, numbers: list[float]) -> list[float]:
        """Each number summed over the processes (loss parts; flags only the writer's clock raises)."""
        return numbers

    def share(self, value: Any) -> Any:
        """The writer's value, on every process."""
        return value

    def whole(self) -> tuple[nn.Module, Any]:
        """The whole model and what gives the optimizer's state_tensors(), to score and to save."""
        return self.net, self.optimizer

    def validation_model(self, whole_net: nn.Module, corpus: Corpus) -> LanguageModel | None:
        """What this process scores for the per-epoch validation, or None if it takes no part. Here
        the writer scores the whole model alone: bf16 products for a full-softmax bf16 run (see NeuralLM),
        the exact fp32 path for a sampled or NCE run, whose step has no bf16 product and for which the
        exact path (log Z in two passes) scored Brown MLP1 1.2x faster than the bf16 product on the AMX
        host (benchmarks/exact_scoring.py; docs/performance.md, "Scoring: neural nets, exact")."""
        if not self.writer:
            return None
        bf16 = bool(self.run.bf16) and self.run.loss == "full"
        return language_model(whole_net, corpus.vocab, corpus.pad_token, next(whole_net.parameters()).device,
                              BF16 if bf16 else EXACT)

    def close(self) -> None:
        """Release what the trainer started (worker processes); called when training ends, however it ends."""

    def run_epoch(self, state: TrainingState, order: torch.Tensor, clock: Clock, save: Callable[[], None],
                  progress: bool) -> bool:
        """The epoch's batches from state["batch"] on (`run_batches`) behind its progress line (nnlm.progress:
        the writer's, when `progress`); True if the time budget stopped them."""
        with show_progress(self.n_examples, f"epoch {state['epoch'] + 1}", "tok", enabled=progress and self.writer,
                           initial=min(state["batch"] * self.batch, self.n_examples)) as bar:
            return self.run_batches(state, order, clock, save, bar)

    def run_batches(self, state: TrainingState, order: torch.Tensor, clock: Clock,
                    save: Callable[[], None], bar: Silent) -> bool:
        """The epoch's batches from state["batch"] on, shown on `bar` (nnlm.progress); True if the time budget
        stopped them."""
        threads.check()
        if not hasattr(self, "step_threads"):  # measured (or read from the host's cache) once per session
            self.step_threads = self.chosen_step_threads(order)
        with threads.capped(self.step_threads):
            return self._batches(state, order, clock, save, bar)

    def chosen_step_threads(self, order: torch.Tensor) -> int | None:
        """The thread cap of this process's batches (None: none, the governor decides). The single process's
        sampled and NCE steps on the CPU are timed at 1 and at all free threads (nnlm.neural.run.step_threads);
        the full softmax and the parallel trainers (subclasses) run as the governor says."""
        if type(self) is not Trainer or self.run.loss == "full" or self.device.type != "cpu":
            return None
        from nnlm.neural.run import step_threads

        return step_threads.for_trainer(self, batch_rows(self.padded, order, 0, self.batch, self.window))

    def _batches(self, state: TrainingState, order: torch.Tensor, clock: Clock, save: Callable[[], None],
                 bar: Silent) -> bool:
        while state["batch"] < self.n_batches:
            rows = self.batch_at(order, state["batch"])
            loss, part = self.batch_loss(rows, state["step"])
            total, out_of_time, save_due = self.agree(
                [part, float(self.writer and clock.out_of_time()) + float(clock.signalled()),
                 float(self.writer and clock.save_due())])
            examples = self.examples_in(rows)
            value = total / examples
            if (what := diverged(value, self.explode_at)) is not None:
                raise TrainingDiverged(divergence_message(self.out, state, what, self.run))
            self.update(loss, state["examples"], examples)
            state["step"] += 1
            state["batch"] += 1
            state["examples"] += examples
            state["loss_sum"] += value * examples
            state["loss_count"] += examples
            if state["batch"] % CHECK_THREADS_EVERY == 0:
                threads.check()  # other processes' load may have changed (a clock read unless due)
            bar.update(examples)
            if state["batch"] % 20 == 0:
                left = ("" if clock.budget is None
                        else f", budget left {max(clock.budget - clock.elapsed(), 0) / 60:.1f} min")
                running = math.exp(state["loss_sum"] / state["loss_count"])
                bar.note(f"{running_label(self.run)} {running:.1f}{left}")
            if out_of_time:
                return True
            if save_due:
                save()
        return False


class Clock:
    """A run's wall time over all its sessions, against its time budget and checkpoint interval."""

    def __init__(self, elapsed_before: float, budget_minutes: float | None, checkpoint_minutes: float,
                 stop_request: StopRequest | None = None) -> None:
        self.start = self.last_save = time.monotonic()
        self.before = elapsed_before
        self.budget = None if budget_minutes is None else 60.0 * budget_minutes
        self.interval = 60.0 * checkpoint_minutes
        self.stop_request = stop_request

    def signalled(self) -> bool:
        """A SIGINT/SIGTERM asked training to stop (nnlm.neural.run.stop_signals)."""
        return self.stop_request is not None and self.stop_request.requested

    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.start

    def out_of_time(self) -> bool:
        return self.budget is not None and self.elapsed() >= self.budget

    def save_due(self) -> bool:
        return time.monotonic() - self.last_save >= self.interval

