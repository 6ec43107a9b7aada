"""Training the NPLM: a plain loop over shuffled minibatches, early stopping, exact resume.

Examples are all positions of the training split; the context of position t is the n-1 tokens
before it (padded at the very start, exactly as `nnlm.lm.contexts` does). Each epoch visits them
in the order of a permutation drawn from numpy's generator seeded with (seed, epoch), so the data
position of a run is just (epoch, batch index): nothing about it needs saving but those numbers.

Recipes (how the parameters are updated, the learning-rate schedule, regularisation) are in
nnlm.neural.recipes.
Output layer (`--loss`, a run's defining option): `full` (default) is the exact softmax over V;
`sampled` (importance-sampled softmax) and `nce` (noise-contrastive estimation) never compute
the |V|-wide softmax in training: K = `--samples` words (default 128) drawn per batch from the
unigram^0.75 proposal, only their rows (and the targets' and contexts') touched, updated by a
row-wise Adam (Adam recipes only). Both also train the model to self-normalize (log Z near 0),
so it can score without the softmax sum (`nnlm score --unnormalized`). See `nnlm.neural.sampled`.
Validation and `nnlm eval` always use the exact softmax (normalized over all of V). With a sampled loss, the running
figure is exp of the training objective, not a perplexity, and is labelled "train exp(objective)".
Early stopping: after `patience` epochs without a better validation perplexity (better by the
recipe's `min_improvement`, relative) training stops; the best weights (any improvement) are in
model.safetensors all along. The plateau schedule's state (current rate, stalled epochs) is in
state.json, so a resumed run continues exactly.

One loop (`run_epochs`) serves every trainer: a `Trainer` holds what differs -- how a batch's
loss is computed and agreed on, which process logs and writes, what the whole model is, who runs
the batches -- and nnlm.neural.parallel (DDP, vocabulary-parallel) and nnlm.neural.hogwild
override those few methods.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nnlm import threads
from nnlm.data.corpus import Corpus, load_corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel, perplexity
from nnlm.neural import checkpoint as ck
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM
from nnlm.neural.optim import Adam, PaperSGD
from nnlm.neural.presets import preset
from nnlm.neural.softmax_loss import softmax_cross_entropy
from nnlm.neural.recipes import (  # noqa: F401  (re-exported: the recipe API used to live here)
    LR_SCHEDULES, RECIPE_KEYS, RECIPES, REFERENCE_PARAMETERS_PER_TOKEN, Recipe, check_recipe_values,
    default_recipe, epoch_lr, keep_best_optimizer, learning_rate, next_rate, recipe_values, regularisation_scale,
    run_recipe,
)
from nnlm.neural.sampled import (
    DEFAULT_SAMPLES,
    RowAdam,
    SampledLoss,
    check_loss,
    initial_bias,
    proposal,
)


# Options that define a run: a resumed run must be given the same (or none).
RUN_DEFAULTS: dict[str, Any] = {
    "corpus": "brown", "min_count": None, "max_vocab": None, "vocab_from": "train",
    "preset": "mlp1", "order": None, "hidden": None, "features": None, "direct": None,
    "recipe": None, "batch_size": 256, "seed": 0, "lr": None, "patience": 3, "bf16": None,
    "loss": "full", "samples": None,
    "lr_schedule": None, "lr_factor": None, "weight_decay": None, "dropout": None, "min_improvement": None,
    "plateau_patience": None,
}
# Options of one invocation: they may change when resuming.
SESSION_DEFAULTS: dict[str, Any] = {
    "epochs": 30, "time_budget": None, "threads": None, "device": "auto", "checkpoint_minutes": 5.0,
}
EXPLODED = 3.0  # a batch loss above EXPLODED * log|V| (3x a uniform guess) means training diverged
CPU = torch.device("cpu")  # the default device of prepare_run
CHECK_THREADS_EVERY = 64  # batches between looks at the thread governor (it re-measures only every RECHECK_SECONDS)


class TrainingDiverged(NnlmError):
    """The loss became NaN/inf or exploded; the best model on disk is untouched."""


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise NnlmError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    if name not in ("cpu", "cuda"):
        raise NnlmError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def bf16_is_fast(device: torch.device) -> bool:
    """bf16 autocast pays off only with hardware bf16 (CUDA, or AVX-512 BF16 / AMX on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def model_config(run: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The preset's architecture, with any of n, h, m, direct given explicitly taking precedence."""
    base = preset(run["preset"], vocab_size)
    picks = {k: run[k] for k in ("order", "hidden", "features", "direct") if run.get(k) is not None}
    return ModelConfig(**(base.to_dict() | picks))


def build_optimizer(net: NPLM, recipe: Recipe, lr: float) -> PaperSGD | Adam:
    if recipe.optimizer == "paper-sgd":
        return PaperSGD(net, lr, recipe.lr_decay, recipe.weight_decay)
    return Adam(net, lr, recipe.weight_decay)


def batch_loss(net: NPLM, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool) -> torch.Tensor:
    """Mean negative log-likelihood of a batch, as a float32 scalar.

    fp32: plain autograd through `net`. bf16: the output layer and its softmax run as one fused
    step in bf16 (`softmax_loss`), everything else and all weights stay fp32: it saves the passes
    over [B, |V|] that autocast with an fp32 log-softmax (which it replaced) made; see the README,
    Training speed."""
    if not bf16 or (net.W is None and net.H is None):  # (y = b alone has no product to fuse)
        return F.cross_entropy(net(contexts), targets)
    zs, ws = net.output_operands(contexts)
    return softmax_cross_entropy(zs, ws, net.b, targets, torch.bfloat16)


def train_step(net: NPLM, optimizer: PaperSGD | Adam, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool,
               examples_seen: int, max_loss: float = math.inf) -> float:
    """One update on a batch, as the single-process trainer makes it (`batch_loss`, then `update`);
    returns its mean loss. A loss that is not finite or above max_loss makes no update (the caller
    stops training)."""
    loss = batch_loss(net, contexts, targets, bf16)
    value = float(loss.detach())
    if diverged(value, max_loss) is None:
        update(net, optimizer, loss, examples_seen, len(targets))
    return value


def padded_stream(ids: np.ndarray, k: int, pad_id: int, device: torch.device) -> torch.Tensor:
    """The training ids after k pads, on the device once: every batch is then one gather there."""
    return torch.cat([torch.full((k,), pad_id, dtype=torch.int64), torch.as_tensor(ids.astype(np.int64))]).to(device)


def epoch_order(seed: int, epoch: int, n_examples: int) -> torch.Tensor:
    """The order in which an epoch visits the examples: a permutation seeded with (seed, epoch)."""
    return torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n_examples))


def batch_rows(padded: torch.Tensor, order: torch.Tensor, b: int, batch: int, window: torch.Tensor) -> torch.Tensor:
    """Batch b of an epoch as rows [B, k+1] (context, then target): one gather from the padded
    stream (window = arange(k+1) on its device)."""
    return padded[order[b * batch:(b + 1) * batch, None] + window]


def epoch_batches(padded: torch.Tensor, k: int, batch: int, seed: int, epoch: int,
                  first: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(contexts [B, k], targets [B]) of an epoch from batch index `first` on, in the trainer's
    order; the last batch may be smaller."""
    n_examples = len(padded) - k
    order = epoch_order(seed, epoch, n_examples).to(padded.device)
    window = torch.arange(k + 1, device=padded.device)
    for b in range(first, math.ceil(n_examples / batch)):
        rows = batch_rows(padded, order, b, batch, window)
        yield rows[:, :k], rows[:, k]


def build_loss(run: dict[str, Any], net: NPLM, corpus: Corpus, device: torch.device, optimizer,
               lr: float) -> tuple[Callable[..., torch.Tensor], Any]:
    """The run's batch loss and the optimizer that goes with it (full softmax: `batch_loss` and the recipe's).
    Called before a resume loads its checkpoint, which then replaces the sampled runs' initial b."""
    if run["loss"] == "full":
        return batch_loss, optimizer
    loss = SampledLoss(run["loss"], proposal(corpus.train, len(corpus.vocab)), run["samples"]).to(device)
    with torch.no_grad():
        net.b.copy_(initial_bias(corpus.train, len(corpus.vocab)))
    return loss, RowAdam(net, loss, lr, run_recipe(run).weight_decay)


# --- run directory bookkeeping ---------------------------------------------------------------

def _corpus_of(run: dict[str, Any]) -> Corpus:
    return load_corpus(run["corpus"], min_count=run["min_count"], max_vocab=run["max_vocab"],
                       vocab_from=run["vocab_from"])


def _corpus_key(value: str) -> str:
    return value if value == "brown" else str(Path(value).resolve())


def require_full_softmax(loss: str, trainer: str) -> None:
    """ddp and vocab train the full softmax only (hogwild takes any loss): say so before anything is written,
    and when a run trained with another loss is resumed by them."""
    if loss != "full":
        raise NnlmError(f"--loss {loss} trains in one process or with --parallel hogwild; {trainer} trains the "
                        "full softmax only")


def prepare_run(out: Path, requested: dict[str, Any], resume: bool,
                device: torch.device = CPU) -> tuple[dict[str, Any], Corpus]:
    """The run's defining options (new, or the saved ones checked against what was asked)."""
    if "corpus" in requested:
        requested = requested | {"corpus": _corpus_key(requested["corpus"])}
    has_run = (out / ck.RUN).exists()
    if not resume:
        if has_run:
            state = ck.read_state(out)
            if state.get("finished") or (out / ck.WEIGHTS).exists():
                raise NnlmError(f"{out} already holds a trained model ({state.get('epoch', 0)} epochs); it is not "
                                "overwritten: continue it with --resume, or choose another --out")
            raise NnlmError(f"{out} holds an unfinished run; continue it with --resume or choose another --out")
        if out.exists() and any(out.iterdir()):
            raise NnlmError(f"{out} exists and is not empty; choose another --out")
        run = RUN_DEFAULTS | requested
        if run["recipe"] is None:
            run["recipe"] = default_recipe(run["loss"])
        if run["recipe"] not in RECIPES:
            raise NnlmError(f"unknown recipe {run['recipe']!r}; choose from {', '.join(RECIPES)}")
        if not isinstance(run["batch_size"], int) or run["batch_size"] < 1:
            raise NnlmError(f"--batch-size must be at least 1, got {run['batch_size']}")
        if run["patience"] < 1:
            raise NnlmError(f"--patience must be at least 1, got {run['patience']}")
        check_loss(run["loss"], run["samples"])
        check_recipe_values(run)
        if run["loss"] != "full" and RECIPES.get(run["recipe"], RECIPES["modern"]).optimizer != "adam":
            raise NnlmError(f"--loss {run['loss']} trains with the modern recipe (Adam on the touched rows), "
                            f"not {run['recipe']!r}")
        model_config(run, 2)  # unknown preset or impossible shapes: say so before loading the corpus
        if run["bf16"] is None:
            run["bf16"] = RECIPES[run["recipe"]].bf16 and bf16_is_fast(device)
        corpus = _corpus_of(run)
        model = model_config(run, len(corpus.vocab))
        if run["loss"] != "full" and run["samples"] is None:
            run["samples"] = min(DEFAULT_SAMPLES, len(corpus.vocab))
        check_loss(run["loss"], run["samples"], len(corpus.vocab))
        scale = regularisation_scale(RECIPES[run["recipe"]], model.parameter_count(), len(corpus.train))
        run |= {k: v for k, v in recipe_values(RECIPES[run["recipe"]], scale).items() if run[k] is None}
        run |= {"format": ck.RUN_FORMAT, "model": model.to_dict(), "corpus_name": corpus.name,
                "vocab_fingerprint": corpus.vocab.fingerprint, "pad_token": corpus.pad_token}
        out.mkdir(parents=True, exist_ok=True)
        corpus.vocab.save(out / ck.VOCAB)
        ck.write_json(out / ck.RUN, run)
        return run, corpus
    if not has_run:
        raise NnlmError(f"--resume: {out} holds no run to resume (no {ck.RUN})")
    run, vocab, _ = ck.read_run(out)
    run = {"loss": "full", "samples": None} | run  # runs from before the --loss option
    if run["recipe"] not in RECIPES:
        raise NnlmError(f"--resume: {out} was trained with recipe {run['recipe']!r}, which this version lacks")
    run |= {k: v for k, v in recipe_values(RECIPES[run["recipe"]]).items() if run.get(k) is None}
    for key, value in requested.items():
        if key in RUN_DEFAULTS and run.get(key) != value:
            raise NnlmError(f"--resume: {out} was started with {key} = {run.get(key)!r}, not {value!r}")
    corpus = _corpus_of(run)
    if corpus.vocab.fingerprint != run["vocab_fingerprint"]:
        raise NnlmError(f"--resume: the corpus {run['corpus']} now has another vocabulary than the run in {out}")
    return run, corpus


def _fresh_state() -> dict[str, Any]:
    return {"step": 0, "epoch": 0, "batch": 0, "examples": 0, "loss_sum": 0.0, "loss_count": 0,
            "history": [], "best": None, "bad_epochs": 0, "elapsed": 0.0,
            "finished": False, "stop_reason": None, "tensors": None, "lr": None, "lr_stalls": 0}


def nothing_left_to_do(out: Path, state: dict[str, Any], session: dict[str, Any], resume: bool,
                       log: Callable[[str], None]) -> bool:
    """A finished run, or a resumed one that already has its --epochs or used its --time-budget:
    say so (every trainer asks this before training)."""
    if state["finished"]:
        log(f"{out}: this run already finished ({state['stop_reason']}); nothing to do")
        return True
    if resume and state["epoch"] >= session["epochs"]:
        log(f"{out}: {state['epoch']} epochs done already; give a larger --epochs to continue")
        return True
    if resume and session["time_budget"] is not None and state["elapsed"] >= 60.0 * session["time_budget"]:
        log(f"{out}: the time budget of {session['time_budget']} minutes is used already "
            f"({state['elapsed'] / 60:.1f} min); give a larger --time-budget to continue")
        return True
    return False


def write_metrics(out: Path, history: list[dict[str, Any]], full_softmax: bool = True) -> None:
    """metrics.jsonl (rewritten whole, so a resumed run never duplicates a line) and curve.png. A
    sampled loss's running "train ppl" is exp of its objective, not a perplexity: not plotted."""
    from nnlm.io import atomic_path, atomic_write_text

    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(h) + "\n" for h in history))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = [h["epoch"] for h in history]
    if full_softmax:
        ax.plot(epochs, [h["train_ppl"] for h in history], "o-", label="train (running, during the epoch)")
    ax.plot(epochs, [h["valid_ppl"] for h in history], "s-", label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(out.name)
    fig.tight_layout()
    with atomic_path(out / "curve.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


# --- the loop --------------------------------------------------------------------------------

def train(out: Path | str, requested: dict[str, Any], resume: bool = False, progress: bool = True,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train (or continue) the run in `out` in this process; returns its final state."""
    out = Path(out)
    session = session_options(requested)
    device = pick_device(session["device"])
    run, corpus = prepare_run(out, {k: v for k, v in requested.items() if k in RUN_DEFAULTS}, resume, device)
    threads.govern(session["threads"], device)  # --threads, or the cores free now (re-checked while training)
    recipe = run_recipe(run)
    torch.manual_seed(run["seed"])
    net = NPLM(ModelConfig.from_dict(run["model"]), dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h).to(device)
    optimizer = build_optimizer(net, recipe, learning_rate(run))
    loss_fn, optimizer = build_loss(run, net, corpus, device, optimizer, learning_rate(run))
    state = (ck.load_training_state(out, net, optimizer) if resume else None) or _fresh_state()
    if nothing_left_to_do(out, state, session, resume, log):
        return state
    trainer = Trainer(out, net, optimizer, run, corpus, device, loss_fn)
    return run_epochs(out, run, session, corpus, state, trainer, log, progress)


def run_epochs(out: Path, run: dict[str, Any], session: dict[str, Any], corpus: Corpus, state: dict[str, Any],
               trainer: Trainer, log: Callable[[str], None], progress: bool) -> dict[str, Any]:
    """The training loop of every trainer: epochs of batches in the order of a permutation seeded
    with (seed, epoch), validation after each, early stopping, the time budget, checkpoints.
    Returns the final state (on every process of a parallel run)."""
    recipe = run_recipe(run)
    config = trainer.config
    clock = Clock(state["elapsed"], session["time_budget"], session["checkpoint_minutes"])
    out_of_time = f"time budget of {session['time_budget']} minutes used"

    def save(whole: tuple[nn.Module, Any] | None = None) -> None:
        net, optimizer = whole or trainer.whole()
        state["elapsed"] = clock.elapsed()
        if trainer.writer:
            ck.save_training_state(out, net, optimizer, state)
        clock.last_save = time.monotonic()

    log(f"training {run['preset']} (n={config.order}, h={config.hidden}, m={config.features}, "
        f"direct={config.direct}; {config.parameter_count():,} parameters) on {corpus.name}, "
        f"recipe {recipe.name}{' (bf16 output layer)' if run['bf16'] and run['loss'] == 'full' else ''}, "
        + (f"{run['loss']} loss with {run['samples']} samples, " if run["loss"] != "full" else "")
        + trainer.describe())
    if recipe.lr_schedule == "newbob" and type(trainer) is not Trainer:
        raise NnlmError("--lr-schedule newbob restores the best weights: single-process training only (no --trainer)")
    first_step, stop = state["step"], None
    while stop is None and state["epoch"] < session["epochs"]:
        epoch = state["epoch"]
        if state["step"] > first_step and trainer.agree([float(trainer.writer and clock.out_of_time())])[0]:
            stop = out_of_time  # spent scoring the last epoch: an epoch of one batch would only score again
            break
        trainer.optimizer.lr = epoch_lr(recipe, state)
        order = epoch_order(run["seed"], epoch, trainer.n_examples)
        trainer.net.train()
        bar = None
        if progress and trainer.writer:
            from tqdm import tqdm

            bar = tqdm(total=trainer.n_examples, initial=min(state["batch"] * trainer.batch, trainer.n_examples),
                       unit="tok", unit_scale=True, desc=f"epoch {epoch + 1}", leave=False, dynamic_ncols=True)
        if trainer.run_batches(state, order.to(trainer.device), clock, save, bar):
            stop = out_of_time
        if bar is not None:
            bar.close()
        whole = trainer.whole()
        started = time.monotonic()
        lm = trainer.validation_model(whole[0], corpus)  # a collective in ddp and vocab runs
        valid = None if lm is None else (perplexity(lm, corpus, "valid"), time.monotonic() - started)
        decision = end_epoch(out, whole[0], valid, run, state, trainer.n_batches, trainer.optimizer.lr,
                             clock.elapsed, log, whole[1]) if trainer.writer else None
        state, decision = trainer.share((state, decision))
        partial, early_stop = decision
        stop = early_stop or stop  # an early stop at the budget's end still finishes the run
        if partial or stop is not None or state["epoch"] >= session["epochs"]:
            break
        save(whole)
        if trainer.writer:
            write_metrics(out, state["history"], run["loss"] == "full")
    stop = stop or f"reached {session['epochs']} epochs"
    state["finished"] = stop.startswith("early stopping")  # budget- or epoch-limited runs may be resumed
    state["stop_reason"] = stop
    save()
    if trainer.writer and state["history"]:
        write_metrics(out, state["history"], run["loss"] == "full")
    log(f"stopped: {stop}; best valid ppl "
        + (f"{state['best']['valid_ppl']:.2f} (epoch {state['best']['epoch']})" if state["best"] else "none yet"))
    return state


def running_label(run: dict[str, Any]) -> str:
    """What the running training figure is called: a perplexity for the full softmax, only exp of
    the objective for a sampled or NCE loss (which does not normalize over V)."""
    return "train ppl" if run.get("loss", "full") == "full" else "train exp(objective)"


def end_epoch(out: Path, net: nn.Module, valid: tuple[float, float], run: dict[str, Any], state: dict[str, Any],
              n_batches: int, lr: float, elapsed: Callable[[], float],
              log: Callable[[str], None], optimizer: Any = None) -> tuple[bool, str | None]:
    """Given the validation perplexity and the seconds it took, keep the best
    weights, update the history and the early-stopping count. Returns (partial epoch, early-stopping
    reason or None)."""
    epoch = state["epoch"]
    partial = state["batch"] < n_batches  # only when the time budget ran out mid-epoch
    label = round(epoch + state["batch"] / n_batches, 3) if partial else epoch + 1
    valid_ppl, valid_seconds = valid
    train_ppl = math.exp(state["loss_sum"] / max(state["loss_count"], 1))
    state["history"].append({"epoch": label, "train_ppl": train_ppl, "valid_ppl": valid_ppl,
                             "examples": state["examples"], "elapsed_seconds": round(elapsed(), 1),
                             "valid_seconds": round(valid_seconds, 1), "lr": lr}
                            | ({"partial": True} if partial else {}))
    recipe = run_recipe(run)
    improved = state["best"] is None or valid_ppl < state["best"]["valid_ppl"]
    real = state["best"] is None or valid_ppl < state["best"]["valid_ppl"] * (1.0 - recipe.min_improvement)
    if improved:
        state["best"] = {"epoch": label, "valid_ppl": valid_ppl}
        ck.save_tensors(out / ck.WEIGHTS, dict(net.state_dict()), {"epoch": str(label), "valid_ppl": repr(valid_ppl)})
        keep_best_optimizer(out, optimizer, recipe)
    log(f"epoch {label}: {running_label(run)} {train_ppl:.2f} (running), valid ppl {valid_ppl:.2f}"
        f"{' (best)' if improved else ''}; {elapsed() / 60:.1f} min")
    if partial:  # the weights at the budget's end are scored too; the position is kept for --resume
        return True, None
    state["bad_epochs"] = 0 if real else state["bad_epochs"] + 1
    state.update(epoch=epoch + 1, batch=0, loss_sum=0.0, loss_count=0)
    if state["bad_epochs"] >= run["patience"]:
        better = (f"{100 * recipe.min_improvement:g}% better than the best" if recipe.min_improvement
                  else "better")
        return False, f"early stopping: no {better} validation perplexity for {run['patience']} epochs"
    next_rate(out, net, optimizer, recipe, state, lr, improved, real, log)
    return False, None


class Trainer:
    """One process's part in training a run: its model and optimizer, the training tokens, and
    the few things the parallel trainers do differently (nnlm.neural.parallel, .hogwild override
    them). This base class is the single process: it computes whole batches, and it alone logs
    and writes the run directory."""

    writer = True  # this process logs and writes the run directory

    def __init__(self, out: Path, net: nn.Module, optimizer: Any, run: dict[str, Any], corpus: Corpus,
                 device: torch.device,
                 loss_fn: Callable[..., torch.Tensor] = batch_loss) -> None:
        self.out, self.net, self.optimizer, self.run, self.device = out, net, optimizer, run, device
        self.loss_fn = loss_fn  # batch_loss (full softmax) or a sampled loss (nnlm.neural.sampled)
        self.config: ModelConfig = net.config
        self.k = self.config.order - 1
        self.padded = padded_stream(corpus.train, self.k, corpus.pad_id, device)
        self.window = torch.arange(self.k + 1, device=device)
        self.n_examples, self.batch = len(corpus.train), run["batch_size"]
        self.n_batches = math.ceil(self.n_examples / self.batch)
        self.explode_at = EXPLODED * math.log(self.config.vocab_size)

    def describe(self) -> str:
        governor = threads.current()
        return f"batch {self.batch}, {governor.describe() if governor else f'{torch.get_num_threads()} threads'}, " \
               f"{self.device}"

    def batch_loss(self, rows: torch.Tensor, step: int) -> tuple[torch.Tensor, float]:
        """The loss to differentiate here, and this process's part of the batch's summed -log P."""
        loss = self.loss_fn(self.net, rows[:, :self.k], rows[:, self.k], self.run["bf16"])
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
        the writer scores the whole model alone (bf16 products for a bf16 run, see NeuralLM)."""
        if not self.writer:
            return None
        return NeuralLM(whole_net, corpus.vocab, corpus.pad_token, device=next(whole_net.parameters()).device,
                        bf16=bool(self.run["bf16"]))

    def run_batches(self, state: dict[str, Any], order: torch.Tensor, clock: Clock,
                    save: Callable[[], None], bar: Any) -> bool:
        """The epoch's batches from state["batch"] on; True if the time budget stopped them."""
        threads.check()
        while state["batch"] < self.n_batches:
            rows = batch_rows(self.padded, order, state["batch"], self.batch, self.window)
            loss, part = self.batch_loss(rows, state["step"])
            total, out_of_time, save_due = self.agree(
                [part, float(self.writer and clock.out_of_time()), float(self.writer and clock.save_due())])
            value = total / len(rows)
            if (what := diverged(value, self.explode_at)) is not None:
                raise TrainingDiverged(divergence_message(self.out, state, what))
            update(self.net, self.optimizer, loss, state["examples"], len(rows))
            state["step"] += 1
            state["batch"] += 1
            state["examples"] += len(rows)
            state["loss_sum"] += value * len(rows)
            state["loss_count"] += len(rows)
            if state["batch"] % CHECK_THREADS_EVERY == 0:
                threads.check()  # other processes' load may have changed (a clock read unless due)
            if bar is not None:
                bar.update(len(rows))
                if state["batch"] % 20 == 0:
                    left = ("" if clock.budget is None
                            else f", budget left {max(clock.budget - clock.elapsed(), 0) / 60:.1f} min")
                    running = math.exp(state["loss_sum"] / state["loss_count"])
                    bar.set_postfix_str(f"{running_label(self.run)} {running:.1f}{left}")
            if out_of_time:
                return True
            if save_due:
                save()
        return False


class Clock:
    """A run's wall time over all its sessions, against its time budget and checkpoint interval."""

    def __init__(self, elapsed_before: float, budget_minutes: float | None, checkpoint_minutes: float) -> None:
        self.start = self.last_save = time.monotonic()
        self.before = elapsed_before
        self.budget = None if budget_minutes is None else 60.0 * budget_minutes
        self.interval = 60.0 * checkpoint_minutes

    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.start

    def out_of_time(self) -> bool:
        return self.budget is not None and self.elapsed() >= self.budget

    def save_due(self) -> bool:
        return time.monotonic() - self.last_save >= self.interval


def diverged(value: float, explode_at: float) -> str | None:
    """What is wrong with a batch's mean loss ("NaN", "infinite", "exploding (x)"), or None."""
    if math.isfinite(value) and value <= explode_at:
        return None
    return "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else f"exploding ({value:.1f})"


def divergence_message(out: Path, state: dict[str, Any], what: str) -> str:
    best = state["best"]
    kept = (f"the best model (epoch {best['epoch']}, valid perplexity {best['valid_ppl']:.2f}) is intact in "
            f"{out / ck.WEIGHTS}" if best else "no epoch had finished, so no model was saved")
    return (f"training stopped at epoch {state['epoch'] + 1}, step {state['step']}: the loss became {what}; "
            f"{kept}. Try a smaller --lr or --batch-size.")


def update(net: nn.Module, optimizer: Any, loss: torch.Tensor, examples_seen: int, batch: int) -> None:
    """One step of the optimizer on the gradient of `loss`."""
    net.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step(examples_seen, batch)


def session_options(requested: dict[str, Any]) -> dict[str, Any]:
    session = SESSION_DEFAULTS | {k: v for k, v in requested.items() if k in SESSION_DEFAULTS}
    if session["threads"] is not None and session["threads"] < 1:
        raise NnlmError(f"--threads must be at least 1, got {session['threads']}")
    return session
