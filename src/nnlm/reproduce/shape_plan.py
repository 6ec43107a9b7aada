"""Which shape a table's net trains in, from the rates measured for each (pure: trials in, choice out).

Why a rule over measured trials: at a natural vocabulary (|V| in the hundreds of thousands) the preset's
shape may not be the best use of the budget. What decides is measured, not guessed: each candidate shape
(the table's `net_shapes`, in its order of preference: more capacity first) is timed on a slice --
training tokens/s with its loss, and exact scoring tokens/s on the path its validation and test will
take -- and the planner turns those rates into a grant. With the sampled loss the training step is
nearly flat in |V| (docs/large-vocab.md), so the shapes differ mostly in their scoring: with direct
connections |V| (h + (n-1) m) multiply-adds a token, without them |V| h; the class-factored layer trains
2.9x slower at 119k and is kept as the last resort.

The rule: the first shape, in preference order, whose grant holds at least `MIN_EPOCHS` epochs of
training; if none does, the one whose grant holds the most epochs (a shape the budget cannot fit at all
holds none). Two epochs because the recipes' learning rate decays 0.7 per epoch and a net that has not
seen its corpus twice is judged on a first pass (the old AP report: 0.57 epoch, 1.32 x KN5); this is a
documented choice, not a measured optimum.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nnlm.reproduce.planner import Grant, Rates, epoch_parts

MIN_EPOCHS = 2.0


@dataclass(frozen=True)
class Trial:
    """One candidate shape: what it is called, its measured rates and the grant the planner gives it."""

    label: str
    rates: Rates
    grant: Grant
    train_tokens: int
    valid_tokens: int

    @property
    def epochs(self) -> float:
        """Epochs of training (each with its validation) its grant holds; 0 when skipped."""
        if self.grant.status == "skipped":
            return 0.0
        return self.grant.work / sum(epoch_parts(self.rates, self.train_tokens, self.valid_tokens))

    def summary(self) -> str:
        fits = (f"{self.epochs:.1f} epochs in {self.grant.work / 60:.1f} min" if self.grant.status != "skipped"
                else "does not fit")
        return (f"{self.label}: trains {self.rates.train:,.0f} tokens/s, scores {self.rates.score:,.0f} tokens/s "
                f"({self.grant.fixed / 60:.1f} min for valid + test), {fits}")


def pick(trials: Sequence[Trial], min_epochs: float = MIN_EPOCHS) -> tuple[int, str]:
    """(index of the chosen trial, why): see the module docstring. `trials` are in preference order; the
    last one may be a shape that is still being measured (the caller stops measuring at the first that
    meets `min_epochs`). With no trial that fits, index 0 (the preset's reason is the row's)."""
    for i, trial in enumerate(trials):
        if trial.epochs >= min_epochs:
            why = f"the first shape whose grant holds at least {min_epochs:g} epochs"
            return i, choice_text(trials, i, why)
    best = max(range(len(trials)), key=lambda i: (trials[i].epochs, -i))
    if trials[best].epochs <= 0:
        return 0, choice_text(trials, None, "no shape fits the budget")
    return best, choice_text(trials, best, f"no shape's grant holds {min_epochs:g} epochs; the most epochs")


def choice_text(trials: Sequence[Trial], chosen: int | None, why: str) -> str:
    head = "no shape chosen" if chosen is None else f"chose {trials[chosen].label}"
    return f"{head} ({why}); measured: " + "; ".join(t.summary() for t in trials)
