"""A net row of any table (Table 1, Table 2, `--beyond`) as one model: what it trains, where, at which measured
speed, what it needs in the plan, and its training for what the planner grants it.

`net_rows` (the tables' nets, which share the budget tier by tier) and `beyond_nets` (the section's, planned
greedily) describe their nets as `NetRun`s and differ only in how they plan and report them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlm.neural.run import checkpoint as ck
from nnlm.reproduce import planner, rates
from nnlm.reproduce.results import options_tag

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job

MAX_EPOCHS = 100  # early stopping ends a run long before this
GUARD = 1.3  # a run given whole epochs stops at this x its grant if the rates were measured too high


@dataclass(frozen=True)
class NetRun:
    """One net a table trains. `options` is its results key (the run directory is named by it); `request`
    holds the run's defining options past its preset and loss (seed, recipe, vocabulary, shape); `shape` the
    ModelConfig fields over its preset that its speeds are measured in; `rates_key` where job.rates keeps them."""

    id: str
    preset: str
    loss: str
    options: dict[str, Any]
    rates_key: str
    request: dict[str, Any] = field(default_factory=dict)
    shape: dict[str, Any] | None = None
    training: dict[str, Any] | None = None  # training options its speeds depend on (samples, batch_size)

    def run_dir(self, out: Path) -> Path:
        return out / "runs" / f"{self.id}-{options_tag(self.options)}"


def parameters(job: Job, run: NetRun) -> int:
    """The net's parameter count, known from its architecture (its preset in its shape), trained or not."""
    from nnlm.neural.net.model_config import ModelConfig
    from nnlm.neural.net.presets import preset

    return ModelConfig(**(preset(run.preset, len(job.corpus.vocab)).to_dict() | (run.shape or {}))).parameter_count()


def rates_of(job: Job, run: NetRun, fresh: bool = False) -> planner.Rates:
    """The net's measured rates in the shape it trains with; `fresh` re-measures (the load may have changed)."""
    if fresh or run.rates_key not in job.rates:
        timed = (run.shape or {}) | (run.training or {})
        job.rates[run.rates_key] = rates.measure(run.preset, job.corpus, job.device_name(), job.threads, run.loss,
                                                 timed.get("samples", job.samples), timed or None)
    return job.rates[run.rates_key]


def epochs_in(where: Path, train_tokens: int) -> float:
    """Epochs a run directory has trained so far (0 before its first checkpoint)."""
    state = where / ck.STATE
    return ck.read_json(state, "training state").get("examples", 0) / train_tokens if state.exists() else 0.0


def need(job: Job, run: NetRun, fresh: bool, floor_epochs: float = planner.NET_TIERS[0]) -> planner.Need:
    """What the net asks of the plan: its epochs still to train, each with its validation, and its scoring."""
    c = job.corpus
    return planner.net_need(run.id, rates_of(job, run, fresh), len(c.train), len(c.valid), len(c.test),
                            epochs_in(run.run_dir(job.out), len(c.train)), floor_epochs)


def run_limits(where: Path, rates: planner.Rates, job: Job, grant: planner.Grant) -> dict[str, Any]:
    """The trainer's limits for a grant: whole epochs when it holds one or more (a run cut mid-epoch
    validates the part epoch as well, which costs as much as the validation of a whole one), with a
    time budget only as a guard against a low estimate; else a part epoch, its validation following.
    A run's time budget counts all its sessions."""
    state = ck.read_json(where / ck.STATE, "training state") if (where / ck.STATE).exists() else {}
    before, done = state.get("elapsed", 0.0), state.get("epoch", 0)
    train, valid = planner.epoch_parts(rates, len(job.corpus.train), len(job.corpus.valid))
    whole = int(grant.work / (train + valid) + 1e-9)  # a grant of 5 epochs is 5, not 4.999...
    if whole >= 1:
        return {"epochs": min(done + whole, MAX_EPOCHS), "time_budget": minutes(before + GUARD * grant.work)}
    return {"time_budget": minutes(before + max(grant.work - valid, 1.0))}


def minutes(seconds: float) -> float:
    """A time budget in minutes to the hundredth, rounded up: a budget of a few seconds is not 0."""
    return math.ceil(seconds / 60 * 100 - 1e-9) / 100


def limits(job: Job, run: NetRun, grant: planner.Grant | None) -> dict[str, Any]:
    """The trainer's limits for `grant` (none without a budget: the run trains to early stopping)."""
    return {} if grant is None else run_limits(run.run_dir(job.out), rates_of(job, run), job, grant)


def train(job: Job, run: NetRun, session: dict[str, Any], log, resume: bool | None = None) -> dict[str, Any]:
    """Train (or continue: `resume` None continues a run directory that exists) the net, with the session
    limits `session` over its defining options; the trainer's final state."""
    from nnlm.neural.parallel.ranks import train_parallel
    from nnlm.neural.run.config import TrainRequest

    where = run.run_dir(job.out)
    request = TrainRequest.of(train_options(job, run, session))
    return train_parallel(where, request, "hogwild" if job.hogwild else "none", job.hogwild,
                          resume=(where / ck.RUN).exists() if resume is None else resume, progress=job.progress,
                          log=log)


def train_options(job: Job, run: NetRun, session: dict[str, Any]) -> dict[str, Any]:
    """The keyword form of the net's TrainRequest (`TrainRequest.of`): its defining options, the call's device and
    threads, the session limits `session`."""
    options = {"corpus": job.corpus_source, "preset": run.preset, "loss": run.loss, **run.request}
    if job.samples is not None and options["loss"] != "full" and "samples" not in run.request:  # (a shape may
        # train the full softmax; a section row may name its own samples)
        options["samples"] = job.samples
    return options | {"device": job.device, "epochs": MAX_EPOCHS, "threads": job.threads} | session
