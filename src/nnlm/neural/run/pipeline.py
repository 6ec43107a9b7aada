"""The one setup of a training run, shared by every trainer, and the registry of trainers.

`prepare` opens (or creates) the run, seeds torch with the run's seed, builds the NPLM, its
optimizer and loss, and puts a resumed run's checkpoint back: a single process, the Hogwild parent
and rank 0 of a ddp or vocab run all start from exactly this (so their initial weights are the
same). `TRAINERS` names each trainer and what it accepts; its class is imported only when chosen,
so naming one costs nothing. To add a trainer: subclass `nnlm.neural.run.trainer.Trainer` (override
what differs) and register it here.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.nets import build_net
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.config import TrainRequest
from nnlm.neural.run.optim import Adam, PaperSGD
from nnlm.neural.run.recipes import Recipe
from nnlm.neural.run.run_config import Run, open_run
from nnlm.neural.run.trainer import Trainer, TrainingSetup, TrainingState
from nnlm.wording import counted


@dataclass(frozen=True)
class TrainerSpec:
    """A registered trainer: where its class is, and what it accepts."""

    name: str
    where: str                 # "module:Class", imported when the trainer is chosen
    full_softmax_only: bool    # ddp and vocab split the exact softmax; hogwild takes any loss
    takes_class_output: bool = True  # vocab slices the |V| output rows, which a class-factored layer groups
    cpu_only: bool = False     # hogwild shares memory between local processes
    restores_best: bool = False  # the newbob schedule puts the best weights back: one process only

    @property
    def ties_rows(self) -> bool:
        """Whether it can pull the rows towards their classes (--init-features exchange): one process only."""
        return self.name == "single"

    def trainer_class(self, config: ModelConfig | None = None) -> type[Trainer]:
        """Its class; a recurrent net's single process trains by windows of streams (RecurrentTrainer)."""
        if config is not None and config.recurrent != "none" and self.name == "single":
            from nnlm.neural.run.recurrent_trainer import RecurrentTrainer

            return RecurrentTrainer
        module, name = self.where.split(":")
        return getattr(importlib.import_module(module), name)

    def check(self, loss: str, device: str = "cpu", lr_schedule: str | None = None,
              output_layer: str | None = None, energy: bool = False, init_features: str | None = None,
              row_decay: str | None = None, recurrent: str = "none", tied: bool = False) -> None:
        """What this trainer cannot do -> one-line NnlmError. Asked once per run, by `prepare` through
        `open_run`: on a new run's resolved options before anything is written, on a resumed run's own."""
        if output_layer == "tree" and self.name != "single":
            raise NnlmError(f"--output-layer tree trains in one process, not with --parallel {self.name}")
        if output_layer == "classes" and not self.takes_class_output:
            raise NnlmError(f"--parallel {self.name} slices the full softmax's output rows over the ranks; "
                            "--output-layer classes trains in one process or with --parallel hogwild or ddp")
        if init_features == "exchange" and not self.ties_rows:
            raise NnlmError(f"--init-features exchange pulls the rows towards their classes in one process, not with "
                            f"--parallel {self.name}")
        if row_decay == "exact" and self.name != "single":
            raise NnlmError(f"--row-decay exact keeps each row's bookkeeping in one process, not with --parallel "
                            f"{self.name}")
        if recurrent != "none" and self.name != "single":
            raise NnlmError(f"the recurrent net (--recurrent {recurrent}) trains in one process, not --parallel "
                            f"{self.name}")
        if tied and recurrent == "none" and self.name == "vocab":
            raise NnlmError("--tied shares C (every word) with the output rows U, which --parallel vocab slices over "
                            "the ranks: train it in one process or with --parallel hogwild or ddp")
        if energy and self.name != "single":
            raise NnlmError(f"the energy network (--energy) trains in one process, not with --parallel {self.name}")
        if self.full_softmax_only and loss != "full":
            raise NnlmError(f"--loss {loss} trains in one process or with --parallel hogwild; --parallel "
                            f"{self.name} trains the full softmax only")
        if self.cpu_only and device == "cuda":
            raise NnlmError(f"--parallel {self.name} runs on the CPU (shared memory); use --parallel ddp for GPUs")
        if lr_schedule == "newbob" and not self.restores_best:
            raise NnlmError(f"--lr-schedule newbob restores the best weights, which --parallel {self.name} "
                            "cannot: train it in one process")


TRAINERS: dict[str, TrainerSpec] = {spec.name: spec for spec in (
    TrainerSpec("single", "nnlm.neural.run.trainer:Trainer", full_softmax_only=False, restores_best=True),
    TrainerSpec("hogwild", "nnlm.neural.parallel.hogwild:HogwildTrainer", full_softmax_only=False, cpu_only=True),
    TrainerSpec("ddp", "nnlm.neural.parallel.ranks:DDPTrainer", full_softmax_only=True),
    TrainerSpec("vocab", "nnlm.neural.parallel.ranks:VocabTrainer", full_softmax_only=True, takes_class_output=False),
)}


def trainer_spec(name: str) -> TrainerSpec:
    if name not in TRAINERS:
        raise NnlmError(f"unknown trainer {name!r}; choose from {', '.join(TRAINERS)}")
    return TRAINERS[name]


def build_optimizer(net: torch.nn.Module, recipe: Recipe, lr: float) -> PaperSGD | Adam:
    if recipe.optimizer == "paper-sgd":
        return PaperSGD(net, lr, recipe.lr_decay, recipe.weight_decay)
    return Adam(net, lr, recipe.weight_decay)


def full_loss(net: torch.nn.Module, recipe: Recipe, lr: float, bf16: bool = False,
              one_process: bool = False, exact_decay: bool = False) -> tuple[Callable[..., torch.Tensor], Any]:
    """The loss and optimizer of a --loss full run in one process or a Hogwild worker: `batch_loss` and
    the recipe's optimizer; for a class-factored net with an Adam recipe, `ClassRowLoss` and RowAdam,
    which update only the rows a batch touched (its context words' C rows, its present classes' word
    rows): dense Adam over the |V|-row parameters was most of a step at a large vocabulary
    (docs/experiments/class-output.md, "Row-wise Adam"). ddp keeps dense Adam: DistributedDataParallel
    sums dense gradients. The paper's SGD in one CPU process (`one_process`; also a Hogwild worker, which
    then adopts the copy its parent laid out in shared memory: `kept_output.share_kept_layout`) keeps a
    copy of the output weights side by side and updates it with the masters in one pass (`KeptLoss`).
    `exact_decay`: RowAdam's exact rule (--row-decay exact), else its lazy one."""
    if net.config.recurrent != "none":  # (its trainer computes its own loss: nnlm.neural.run.recurrent_trainer)
        return batch_loss, build_optimizer(net, recipe, lr)
    if (net.config.output_classes or net.config.output_tree) and recipe.optimizer == "adam":  # (the tree too)
        from nnlm.neural.net.class_output import ClassRowLoss
        from nnlm.neural.net.sampled import RowAdam

        loss = ClassRowLoss()
        return loss, RowAdam(net, loss, lr, recipe.weight_decay, exact_decay=exact_decay)
    if recipe.optimizer == "paper-sgd":  # (the kept layer's module, with its compiled update, only for the paper's SGD)
        from nnlm.neural.net.kept_output import KeptLoss, keeps_output
    if recipe.optimizer == "paper-sgd" and keeps_output(net, recipe.optimizer, one_process):
        kept_loss = KeptLoss(net, torch.bfloat16 if bf16 else torch.float32)
        return kept_loss, PaperSGD(net, lr, recipe.lr_decay, recipe.weight_decay, kept=kept_loss.kept)
    return batch_loss, build_optimizer(net, recipe, lr)


def build_loss(run: Run | dict[str, Any], net: NPLM, corpus: Corpus, device: torch.device,
               lr: float, one_process: bool = False) -> tuple[Callable[..., torch.Tensor], Any]:
    """The run's batch loss and the one optimizer that goes with it: `full_loss` for the full softmax
    (and the class-factored output); the sampled loss and RowAdam (Adam on the rows a batch touched)
    for sampled / nce. Called before a resume loads its checkpoint, which then replaces the sampled
    runs' initial b."""
    run = run if isinstance(run, Run) else Run(**{k: v for k, v in run.items() if k in Run.__dataclass_fields__})
    exact_decay = run.row_decay == "exact"
    if run.loss == "full":
        return full_loss(net, run.training_recipe, lr, run.bf16, one_process, exact_decay)
    from nnlm.neural.net.sampled import RowAdam, SampledLoss, initial_bias, proposal

    energy, words = net.config.energy, net.config.vocab_size  # energy net (nnlm.neural.net.energy): b enters as -b
    if energy:
        from nnlm.neural.net.energy import EnergySampledLoss
    loss = (EnergySampledLoss if energy else SampledLoss)(run.loss, proposal(corpus.train, words),
                                                          run.samples).to(device)
    with torch.no_grad():
        net.b.copy_(initial_bias(corpus.train, words) * (-1.0 if energy else 1.0))
    if net.config.recurrent != "none":  # (its trainer calls loss.output_loss; the rows reach Adam through autograd)
        return loss, build_optimizer(net, run.training_recipe, lr)
    return loss, RowAdam(net, loss, lr, run.training_recipe.weight_decay, exact_decay=exact_decay)


def fresh_state() -> TrainingState:
    """state.json of a run that has not trained yet."""
    return {"step": 0, "epoch": 0, "batch": 0, "examples": 0, "loss_sum": 0.0, "loss_count": 0,
            "history": [], "best": None, "bad_epochs": 0, "elapsed": 0.0,
            "finished": False, "stop_reason": None, "tensors": None, "lr": None, "lr_stalls": 0}


def prepare(out: Path, request: TrainRequest, resume: bool, device: torch.device, spec: TrainerSpec,
            workers: int | None = None, progress: bool = False) -> TrainingSetup:
    """The run (created, or re-opened and checked), the seeded model with its optimizer and loss, and
    the progress so far (a resumed run's checkpoint put back: weights, optimizer state, RNG). `progress`:
    shown while the run is set up (--init-features auto's comparison)."""
    session = request.session
    run, corpus = open_run(out, request, resume, device, check=lambda run: spec.check(
        run.loss, session.device, run.training_recipe.lr_schedule, run.output_layer, energy=run.model_config.energy,
        init_features=run.init_features, row_decay=run.row_decay, recurrent=run.model_config.recurrent,
        tied=run.model_config.tied),
        ties_rows=spec.ties_rows, progress=progress)
    recipe = run.training_recipe
    torch.manual_seed(run.seed)
    net = build_net(run.model_config, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h).to(device)
    loss_fn, optimizer = build_loss(run, net, corpus, device, run.learning_rate, one_process=spec.name == "single")
    state = ck.load_training_state(out, net, optimizer) if resume else None
    words = net.config.vocab_size  # |V|: the run's vocabulary is the net's output (run.json checked it)
    if state is None and net.config.output_classes:  # a fresh class-factored net: the run's classes
        from nnlm.neural.net.output_clustering import output_classes

        net.set_classes(output_classes(run.output_clustering, corpus.train, words, net.config.output_classes))
    if state is None and net.config.output_tree:  # a fresh tree net: the run's tree
        from nnlm.neural.net.output_tree import word_tree

        net.set_tree(word_tree(run.output_clustering, corpus.train, words, net.config.output_tree, run.output_classes,
                               progress))
    if run.init_features == "exchange":  # the classes start a fresh net's rows, and hold every run's near them
        from nnlm.neural.net import feature_init as fi
        from nnlm.neural.net.kept_output import KeptLoss

        classes = fi.feature_classes(corpus.train, words, run.feature_classes, run.feature_clustering)
        if state is None:
            fi.tie_rows_to_classes(net, classes, run.seed)
            if run.model_config.class_context:  # (a checkpoint holds the map with the weights)
                net.set_context_classes(classes, corpus.vocab.unk_id)
        if not isinstance(loss_fn, KeptLoss):
            fi.add_class_pull(net, classes, run.class_pull)
        elif run.class_pull:  # (the kept layer's gradients reach no hook: the pull is in the update)
            optimizer.pull_towards(fi.ClassPull(classes, run.class_pull, device), fi.tied_parameters(net))
    state = state or fresh_state()
    return TrainingSetup(out, run, session, corpus, device, net, optimizer, loss_fn, state, resume, workers)


def nothing_left_to_do(setup: TrainingSetup, log: Callable[[str], None]) -> bool:
    """A finished run, or a resumed one that already has its --epochs or used its --time-budget:
    say so (every trainer asks this before training)."""
    state, session, out = setup.state, setup.session, setup.out
    if state["finished"]:
        log(f"{out}: this run already finished ({state['stop_reason']}); nothing to do")
        return True
    if setup.resume and state["epoch"] >= session.epochs:
        log(f"{out}: {counted(state['epoch'], 'epoch')} done already; give a larger --epochs to continue")
        return True
    if setup.resume and session.time_budget is not None and state["elapsed"] >= 60.0 * session.time_budget:
        log(f"{out}: the time budget of {session.time_budget} minutes is used already "
            f"({state['elapsed'] / 60:.1f} min); give a larger --time-budget to continue")
        return True
    return False
