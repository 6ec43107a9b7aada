"""The learning-rate schedules as they run: the rate of an epoch, and what happens after one (plateau and
newbob lower the rate; newbob puts the best weights and their optimizer state back on a stall).

The recipes and their values are declared in nnlm.neural.run.recipes; this module carries them out during
training and is the one of the two that touches checkpoints, so the declarations stay free of the files
(and of torch) and can be read by the command-line parser cheaply.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.recipes import BEST_OPTIMIZER, Recipe


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
