"""`nnlm train`'s own code path, for the benchmarks: a run set up by nnlm.neural.run.pipeline.prepare (in a
directory the caller gives, normally a temporary one) and trained by its registered trainer's
`run_batches`, advanced by a time or a number of examples instead of whole epochs, so that what a
benchmark times is what `nnlm train` runs, batch bookkeeping included. Epochs turn over as in
`run_epochs` (the next epoch's order and learning rate); validation and checkpoints are left out.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from nnlm.neural.run.batches import epoch_order
from nnlm.neural.run.config import TrainRequest
from nnlm.neural.run.pipeline import prepare, trainer_spec
from nnlm.neural.run.train import epoch_lr
from nnlm.neural.run.trainer import Clock, Trainer, TrainingSetup
from nnlm.progress import Silent

CPU = torch.device("cpu")
NEVER = 1e9  # minutes: no checkpoint is due while a benchmark trains


class TrainingPath:
    """A prepared run and its trainer, advanced a little at a time."""

    def __init__(self, setup: TrainingSetup, trainer: Trainer) -> None:
        self.setup, self.trainer = setup, trainer
        self.run, self.state = setup.run, setup.state
        self.epoch_batches = self.trainer.n_batches
        self.order: torch.Tensor | None = None

    @classmethod
    def new(cls, out: Path | str, options: dict[str, Any], name: str = "single", device: torch.device = CPU,
            workers: int | None = None) -> TrainingPath:
        """A new run in `out` with the `options` (names and values), trained by the trainer registered as `name`."""
        spec = trainer_spec(name)
        setup = prepare(Path(out), TrainRequest.of(options), False, device, spec, workers=workers)
        return cls(setup, spec.trainer_class()(setup))

    def _turn_epoch(self) -> None:
        """At an epoch's end (or before the first): the next epoch's order and learning rate."""
        if self.order is not None:
            self.state.update(epoch=self.state["epoch"] + 1, batch=0)
        self.trainer.optimizer.lr = epoch_lr(self.run.training_recipe, self.state)
        self.order = epoch_order(self.run.seed, self.state["epoch"], self.trainer.n_examples).to(self.setup.device)
        self.trainer.net.train()

    def advance(self, seconds: float | None = None, examples: int | None = None) -> int:
        """Train for about `seconds` (the trainer's own time-budget check ends it) or for at least
        `examples` examples (whole batches; not for hogwild, whose workers run to the epoch's end
        unless the time stops them); returns the examples trained."""
        clock = Clock(0.0, None if seconds is None else seconds / 60.0, NEVER)
        before = self.state["examples"]
        while True:
            if self.order is None or self.state["batch"] >= self.epoch_batches:
                self._turn_epoch()
            left = None if examples is None else examples - (self.state["examples"] - before)
            if left is not None and left <= 0:
                break
            # the loop's own bound, lowered for this call when only `examples` are wanted
            wanted = math.ceil(left / self.trainer.batch) if left is not None else self.epoch_batches
            self.trainer.n_batches = min(self.epoch_batches, self.state["batch"] + wanted)
            try:
                out_of_time = self.trainer.run_batches(self.state, self.order, clock, lambda: None, Silent())
            finally:
                self.trainer.n_batches = self.epoch_batches
            if out_of_time:
                break
        return self.state["examples"] - before

    def close(self) -> None:
        self.trainer.close()
