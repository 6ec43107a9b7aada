"""Training recipes: the optimizer, learning-rate schedule and regularisation of a run.

A recipe is a frozen set of values; a run stores them (`recipe_values`) in run.json and rebuilds its
recipe from there (`run_recipe`), so a resume trains on with the values it started with. It imports no
torch at the top, so that the command-line help can list the recipes and their values from `RECIPES`.

- `paper`: stochastic gradient ascent on the log-likelihood, eps_t = eps_0 / (1 + r t) with
  eps_0 = 1e-3, r = 1e-8 and t the number of training examples seen, and weight decay
  lambda = 1e-4 on C, H, U, W (not on the biases b, d). Per example, the paper's online update is
        theta <- theta + eps_t (d log P(w_t | context) / d theta - lambda theta).
  A minibatch of B examples does B such updates at once, evaluating all B gradients at the
  parameters of the batch start: the step is eps_t times the *sum* of the B gradients (B eps_t
  times their mean) and the decay factor (1 - eps_t lambda)^B; t advances by B. With B = 1 this is
  exactly the paper's online algorithm.
- `modern`: Adam with decoupled weight decay 0.05 on the weights and C, dropout 0.25 on x and on
  the hidden layer, learning rate 1e-3 x 0.7 per epoch, and the
  output layer with its softmax in bf16 (`softmax_loss`; fp32 weights, optimizer and loss value)
  where the hardware has bf16; chosen by measurement on Brown (see README). The per-epoch
  validation of a bf16 run uses bf16 products too (`Scoring(precision="bf16")`, ~1e-4 relative);
  `nnlm eval` and the reproduction's figures are fp32.
- `sampled`: the default with `--loss sampled` / `nce`: `modern` with learning rate 2e-3, weight
  decay 0.2 and dropout 0.05 (measured on Brown, see README); above 1M training tokens the decay is
  x 1M / tokens, the same shrinkage an epoch as on Brown (DECAY_REFERENCE_TOKENS).
- `adaptive` (the default with the full softmax) and `adaptive-sampled` (its counterpart for the
  sampled losses, not the default: worse than `sampled` on Brown MLP1, see docs/recipes.md): Adam
  at 2e-3 until an epoch fails to improve the best validation perplexity by `min_improvement`
  (relative), then the rate x `lr_factor` (0.5) -- not a fixed per-epoch decay, which ends learning
  after a dozen epochs on any corpus; early stopping counts the same stalled epochs. Weight decay and
  dropout start from `modern`'s / `sampled`'s and are scaled by min(1, parameters per training token /
  Brown MLP1's), so a small net on a small corpus is not held back by Brown's regularisation
  (docs/recipes.md). Every recipe field can be given on the command line and is stored in run.json.
- the `newbob` schedule (`--lr-schedule newbob`, any Adam recipe; `next_rate`): as `plateau`, but a
  stalled epoch that made validation worse is undone (the best weights and the optimizer state saved
  with them are restored) before the rate is lowered, and from then on the rate is lowered after every
  epoch. Not a default: it did not beat `plateau` on gen-500 nor `sampled` on Brown MLP1 (docs/recipes.md).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nnlm.errors import NnlmError

LR_SCHEDULES = ("paper", "epoch", "plateau", "newbob", "constant")
BEST_OPTIMIZER = "best-optimizer.safetensors"  # the optimizer state that goes with model.safetensors (newbob)


@dataclass(frozen=True)
class Recipe:
    """How the parameters are updated; see the module docstring. A run stores every field but the
    name, optimizer and bf16 in run.json (`run_recipe` rebuilds the recipe from them), so a resume
    trains on with the values it started with, whatever the defaults have become since."""

    name: str
    optimizer: str           # "paper-sgd" or "adam"
    lr: float                # eps_0 (paper, per example) or Adam's step size
    lr_decay: float = 0.0    # paper: r, per example
    lr_schedule: str = "epoch"  # paper (eps_t above), epoch (x lr_factor per epoch), plateau, newbob, constant
    lr_factor: float = 1.0   # epoch: lr x factor after every epoch; plateau: x factor when validation stalls
    weight_decay: float = 0.0
    dropout_x: float = 0.0
    dropout_h: float = 0.0
    min_improvement: float = 0.0  # an epoch counts as better only below best x (1 - this); 0: any improvement
    plateau_patience: int = 1  # plateau: epochs without such an improvement before the rate is lowered
    scaled: bool = False     # weight decay and dropout x min(1, parameters per training token / Brown MLP1's)
    per_epoch_decay: bool = False  # weight decay x min(1, DECAY_REFERENCE_TOKENS / training tokens)
    bf16: bool = False       # output layer and softmax in bf16 (fp32 master weights, optimizer, loss value)

    def describe(self) -> str:
        """One sentence for reports (`nnlm reproduce`)."""
        if self.optimizer == "paper-sgd":
            return (f"{self.name} recipe (SGD, eps_t = {self.lr:g} / (1 + {self.lr_decay:g} t), weight decay "
                    f"{self.weight_decay:g}, early stopping on validation)")
        schedule = {"epoch": f"x {self.lr_factor:g} per epoch", "constant": "constant",
                    "plateau": f"x {self.lr_factor:g} whenever validation improves by less than "
                               f"{100 * self.min_improvement:g}%",
                    "newbob": f"until validation improves by less than {100 * self.min_improvement:g}%, then the "
                              f"best weights restored and x {self.lr_factor:g} per epoch"}[self.lr_schedule]
        scale = " (at most; scaled down with the parameters per training token)" if self.scaled else ""
        per_epoch = (f" x min(1, {DECAY_REFERENCE_TOKENS:,} / training tokens), the same decay an epoch on larger "
                     "texts" if self.per_epoch_decay else "")
        return (f"{self.name} recipe (Adam with decoupled weight decay {self.weight_decay:g}{per_epoch}, dropout "
                f"{self.dropout_x:g}{scale}, learning rate {self.lr:g} {schedule}, early stopping on validation)")


RECIPES: dict[str, Recipe] = {
    "paper": Recipe("paper", "paper-sgd", lr=1e-3, lr_decay=1e-8, lr_schedule="paper", weight_decay=1e-4),
    "modern": Recipe("modern", "adam", lr=1e-3, lr_factor=0.7, weight_decay=0.05, dropout_x=0.25, dropout_h=0.25,
                     bf16=True),
    # for the sampled output layers, measured on Brown (MLP1, README "The sampled recipe"): their noise
    # regularizes already (dropout 0.05 beats 0.25), and the rows of W, U, b a batch rarely draws need
    # a larger step (lr 2e-3: valid 279.9 vs 289.5); the faster fit then wants more weight decay.
    "sampled": Recipe("sampled", "adam", lr=2e-3, lr_factor=0.7, weight_decay=0.2, dropout_x=0.05, dropout_h=0.05,
                      bf16=True, per_epoch_decay=True),
    # the defaults (docs/recipes.md): a fixed per-epoch decay ends learning after a dozen epochs whatever
    # the corpus, so the rate drops only when validation stalls; the regularisation measured on Brown
    # MLP1 is scaled down for nets with fewer parameters per training token, which it made underfit.
    "adaptive": Recipe("adaptive", "adam", lr=2e-3, lr_schedule="plateau", lr_factor=0.5, weight_decay=0.05,
                       dropout_x=0.25, dropout_h=0.25, min_improvement=0.002, scaled=True, bf16=True),
    "adaptive-sampled": Recipe("adaptive-sampled", "adam", lr=2e-3, lr_schedule="plateau", lr_factor=0.5,
                               weight_decay=0.2, dropout_x=0.05, dropout_h=0.05, min_improvement=0.002,
                               scaled=True, bf16=True),
    # the nets past the paper (presets.BEYOND, 14M parameters on Brown's 800k tokens) fit the training text
    # within two epochs and then only memorise it: the same recipe with the rate falling faster
    # (docs/experiments/beyond.md: deep-context valid 264.9 against 270.0 with x 0.7; more dropout,
    # fewer samples, no direct connections were worse).
    "sampled-large": Recipe("sampled-large", "adam", lr=2e-3, lr_factor=0.35, weight_decay=0.2, dropout_x=0.05,
                            dropout_h=0.05, bf16=True, per_epoch_decay=True),
}
# Brown MLP1's parameters per training token (6,297,407 / 800,000), where the Brown recipes were measured.
REFERENCE_PARAMETERS_PER_TOKEN = 6_297_407 / 800_000
# The sampled recipes' weight decay was measured on Brown (~800k training tokens, ~3k steps an epoch). Decoupled
# decay shrinks the weights by exp(-lr x decay) a step, so on a larger text the same value shrinks them more an
# epoch (e^-14 at 9M tokens against Brown's e^-1.2), and held the nets back: 4-minute trials on the 12.4M-token
# real text (docs/large-vocab.md) gave valid 94.8 at decay 0.2, 87.1 at 0.01, 85.8 at 0.05, 83.5 at 0. Above
# this many training tokens the decay is scaled so that an epoch shrinks the weights as much as Brown's does.
DECAY_REFERENCE_TOKENS = 1_000_000
# run.json key -> Recipe field(s); `--dropout` sets both dropout fields.
RECIPE_KEYS: dict[str, tuple[str, ...]] = {
    "lr": ("lr",), "lr_schedule": ("lr_schedule",), "lr_factor": ("lr_factor",), "weight_decay": ("weight_decay",),
    "dropout": ("dropout_x", "dropout_h"), "min_improvement": ("min_improvement",),
    "plateau_patience": ("plateau_patience",),
}


def default_recipe(loss: str, preset: str | None = None) -> str:
    """The recipe a run gets when none is asked for: `adaptive` for the full softmax; `sampled` otherwise, since
    `adaptive-sampled` did worse on Brown MLP1 (docs/recipes.md) and `nnlm reproduce` trains with this default;
    `sampled-large` for the large presets past the paper (presets.BEYOND) with a sampled loss."""
    from nnlm.neural.net.presets import BEYOND

    if loss == "full":
        return "adaptive"
    return "sampled-large" if preset is not None and preset.lower() in BEYOND else "sampled"


def regularisation_scale(recipe: Recipe, parameters: int, train_tokens: int) -> float:
    """The factor on a scaled recipe's weight decay and dropout: a net with fewer parameters per training
    token than Brown MLP1 gets proportionally less (never more: larger ratios were not measured)."""
    if not recipe.scaled:
        return 1.0
    return min(1.0, parameters / max(train_tokens, 1) / REFERENCE_PARAMETERS_PER_TOKEN)


def decay_scale(recipe: Recipe, train_tokens: int) -> float:
    """The factor on a per-epoch recipe's weight decay: min(1, DECAY_REFERENCE_TOKENS / training tokens), so
    that an epoch of any text decays the weights as much as an epoch of Brown (1 on Brown and smaller texts)."""
    if not recipe.per_epoch_decay:
        return 1.0
    return min(1.0, DECAY_REFERENCE_TOKENS / max(train_tokens, 1))


def recipe_values(recipe: Recipe, scale: float = 1.0, decay: float = 1.0) -> dict[str, Any]:
    """The run.json values of a recipe (regularisation x scale, weight decay x decay as well)."""
    return {"lr": recipe.lr, "lr_schedule": recipe.lr_schedule, "lr_factor": recipe.lr_factor,
            "weight_decay": round(recipe.weight_decay * scale * decay, 6),
            "dropout": round(recipe.dropout_x * scale, 6),
            "min_improvement": recipe.min_improvement, "plateau_patience": recipe.plateau_patience}


def recipe_defaults(key: str) -> str:
    """How `--help` states a recipe field's default (a run.json key of RECIPE_KEYS): each value with the
    recipes that give it, e.g. "0.7 (modern, sampled), 0.5 (adaptive)"; a scaled recipe's weight decay
    and dropout are "or less" (`regularisation_scale`)."""
    by_value: dict[str, list[str]] = {}
    for name, recipe in RECIPES.items():
        value = recipe_values(recipe)[key]
        text = f"{value:g}" if isinstance(value, float) else str(value)
        if value and ((recipe.scaled and key in ("weight_decay", "dropout"))
                      or (recipe.per_epoch_decay and key == "weight_decay")):
            text += " or less"
        by_value.setdefault(text, []).append(name)
    return "the recipe's: " + ", ".join(f"{text} ({', '.join(names)})" for text, names in by_value.items())


def run_recipe(run: dict[str, Any]) -> Recipe:
    """The recipe a run trains with: its named recipe with the values stored in run.json (a run from
    before they were stored gets its named recipe's, which have not changed)."""
    base = RECIPES[run["recipe"]]
    fields = {f: run[key] for key, names in RECIPE_KEYS.items() if run.get(key) is not None for f in names}
    return dataclasses.replace(base, **fields)


def check_recipe_values(run: dict[str, Any]) -> None:
    """Recipe options that do not go together -> one-line NnlmError (checked before anything is written).
    Each value's own limits are its option's (nnlm.neural.run.config), checked there."""
    schedule = run.get("lr_schedule")
    if schedule is not None:
        adam = RECIPES[run["recipe"]].optimizer == "adam"
        if schedule not in LR_SCHEDULES or (schedule == "paper") == adam:
            allowed = "epoch, plateau, newbob or constant" if adam else "paper (the paper recipe's own eps_t)"
            raise NnlmError(f"--lr-schedule with recipe {run['recipe']} must be {allowed}, got {schedule!r}")
    if RECIPES[run["recipe"]].optimizer != "adam" and run.get("dropout"):
        raise NnlmError("--dropout applies to the Adam recipes, not to the paper recipe")


def learning_rate(run: dict[str, Any]) -> float:
    return run["lr"] if run.get("lr") is not None else RECIPES[run["recipe"]].lr
