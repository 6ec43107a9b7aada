"""The LSTM a user copies today, trained on this project's files as a reference for nnlm's nets.

Why: nnlm's nets are measured against the n-grams of the paper, but a user choosing a model asks how they
compare with the recurrent nets people reach for first: PyTorch's `word_language_model` example. This module
is written here after that example's recipe (nothing copied), so the comparison is re-run on any host:
  - the net: word embeddings of `size`, `layers` LSTM layers of `size`, dropout `dropout` on the embeddings,
    between the layers and on the output, a linear output layer whose weights are the embeddings (tied);
    weights drawn from U(-0.1, 0.1), output bias 0;
  - training: the train split as one stream cut into `batch` parallel rows, truncated back-propagation
    through `bptt` steps (the state carried across windows, detached), plain SGD at rate `lr` with the
    gradient's norm clipped to `clip`, the rate divided by 4 after an epoch that does not improve
    validation; the weights that did best on validation are the ones tested;
  - for the recipe's epochs, within a wall-clock budget for training and validation, like every nnlm row:
    training stops where the time left is what a validation takes (timed on one window at the start, then
    on the last validation); a run the budget cut can be continued (`LstmCheckpoint`) where it stopped.

Scored as nnlm scores every model (nnlm.lm.perplexity_from_log_probs over every token of a split, markers
and `<unk>` included): each split is cut into `EVAL_ROWS` contiguous rows, each row starts from a zero state
after the start-of-text token (nnlm's pad before a text's first token), and every token of the split is
predicted exactly once.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.lm import perplexity_from_log_probs
from nnlm.neural.run import checkpoint as ck

EVAL_ROWS = 10   # rows a split is cut into for scoring (the example's evaluation batch)
EVAL_WINDOW = 256  # steps scored per call (no gradient: only the memory of the logits bounds it)


@dataclass(frozen=True)
class LstmRecipe:
    """The example's defaults with `--tied`, and the 6 epochs the issue ran it for."""
    size: int = 200
    layers: int = 2
    dropout: float = 0.2
    batch: int = 20
    bptt: int = 35
    lr: float = 20.0
    clip: float = 0.25
    seed: int = 1111
    epochs: int = 6  # the run of the example (`--epochs 6`): training ends here or at the budget


class TiedLstm(nn.Module):
    """Embedding -> dropout -> LSTM -> dropout -> the embedding's transpose (tied output weights) + bias."""

    def __init__(self, vocab_size: int, recipe: LstmRecipe) -> None:
        super().__init__()
        self.drop = nn.Dropout(recipe.dropout)
        self.embed = nn.Embedding(vocab_size, recipe.size)
        self.lstm = nn.LSTM(recipe.size, recipe.size, recipe.layers, dropout=recipe.dropout)
        self.out = nn.Linear(recipe.size, vocab_size)
        self.out.weight = self.embed.weight  # tied
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.zeros_(self.out.bias)

    def forward(self, inputs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None):
        """inputs [T, B] ids -> (log-softmax [T, B, V], the state after the last step)."""
        hidden, state = self.lstm(self.drop(self.embed(inputs)), state)
        return torch.log_softmax(self.out(self.drop(hidden)), dim=-1), state




@dataclass
class LstmProgress:
    """Where training stands, for a later call to continue it: whole epochs done, the window its current epoch
    reached (0: an epoch's start), the rate, the best validation perplexity so far, tokens and seconds spent."""
    epochs_done: int = 0
    offset: int = 0
    lr: float = LstmRecipe.lr
    best: float | None = None
    trained: int = 0
    seconds: float = 0.0


@dataclass
class LstmCheckpoint:
    """A run to continue: its progress, its weights now and the best weights (None before a validation).
    The dropout's random state is not kept: a continued run is not the uncut run bit for bit."""
    progress: LstmProgress
    weights: dict[str, torch.Tensor]
    best_weights: dict[str, torch.Tensor] | None


@dataclass
class LstmResult:
    valid: float          # perplexity of the weights tested
    test: float
    train_tokens: int     # tokens trained on (epochs x train, the last one possibly cut)
    epochs: float         # epochs of training (fractional when the budget cut one)
    seconds: float        # training and validation, wall clock, over every call that trained the run
    parameters: int
    recipe: dict
    finished: bool = False  # the recipe's epochs were all trained

    def as_dict(self) -> dict:
        return asdict(self)


def _rows(ids: np.ndarray, rows: int) -> torch.Tensor:
    """The stream cut into `rows` contiguous rows, as [T, rows] (the tail that does not fill a row dropped)."""
    length = len(ids) // rows
    return torch.from_numpy(np.ascontiguousarray(ids[:length * rows], dtype=np.int64)).view(rows, length).t()


def split_log_probs(model: TiedLstm, ids: np.ndarray, start: int) -> np.ndarray:
    """ln P of every token of `ids`, in order: EVAL_ROWS rows of ceil(N / EVAL_ROWS) tokens (the last one shorter)
    scored side by side, each from a zero state after `start`, in windows of EVAL_WINDOW steps."""
    model.eval()
    n = len(ids)
    if n == 0:
        return np.zeros(0)
    length = -(-n // EVAL_ROWS)
    body = np.full(EVAL_ROWS * length, start, dtype=np.int64)  # the last row's tail past the split: padding
    body[:n] = ids
    grid = np.concatenate([np.full((EVAL_ROWS, 1), start, dtype=np.int64), body.reshape(EVAL_ROWS, length)], axis=1)
    grid = torch.from_numpy(grid).t().contiguous()  # [length + 1, rows]
    out = torch.empty(length, EVAL_ROWS, dtype=torch.float64)
    state = None
    with torch.no_grad():
        for at in range(0, length, EVAL_WINDOW):
            window = grid[at:at + EVAL_WINDOW + 1]
            log_probs, state = model(window[:-1], state)
            out[at:at + len(window) - 1] = log_probs.gather(2, window[1:].unsqueeze(2)).squeeze(2)
    return out.t().reshape(-1)[:n].numpy()


def _step(model: TiedLstm, inputs: torch.Tensor, targets: torch.Tensor, state, recipe: LstmRecipe, lr: float):
    """One window of truncated back-propagation and a plain SGD step; the state after it, detached."""
    model.zero_grad(set_to_none=True)
    log_probs, state = model(inputs, state)
    loss = -log_probs.gather(2, targets.unsqueeze(2)).mean()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-lr)
    return tuple(s.detach() for s in state)


def _epoch(model: TiedLstm, data: torch.Tensor, recipe: LstmRecipe, lr: float, deadline: float,
           offset: int = 0) -> tuple[int, int]:
    """A pass over the [T, batch] train rows in bptt windows from step `offset`, until the deadline:
    (tokens trained, the step to continue from; 0 when the epoch was finished)."""
    model.train()
    state = None
    trained = 0
    for at in range(offset, data.shape[0] - 1, recipe.bptt):
        if time.monotonic() >= deadline:
            return trained, at
        inputs, targets = data[at:at + recipe.bptt], data[at + 1:at + 1 + recipe.bptt]
        state = _step(model, inputs[:len(targets)], targets, state, recipe, lr)
        trained += targets.numel()
    return trained, 0


def measure_rates(corpus: Corpus, recipe: LstmRecipe = LstmRecipe(), windows: int = 8) -> tuple[float, float]:
    """(training, scoring) tokens per second at the current torch threads, timed on a few windows after one
    unmeasured warm-up (the planner's estimates; a net's rates are measured so too)."""
    torch.manual_seed(recipe.seed)
    model = TiedLstm(len(corpus.vocab), recipe)
    data = _rows(corpus.split("train"), recipe.batch)
    steps = min(windows + 1, max((data.shape[0] - 1) // recipe.bptt, 1))
    t0, timed = 0.0, 0
    model.train()
    for i in range(steps):
        if i == min(1, steps - 1):
            t0, timed = time.perf_counter(), 0
        at = i * recipe.bptt
        targets = data[at + 1:at + 1 + recipe.bptt]
        _step(model, data[at:at + len(targets)], targets, None, recipe, 0.0)
        timed += targets.numel()
    train = timed / max(time.perf_counter() - t0, 1e-9)
    sample = corpus.split("valid")[:EVAL_ROWS * EVAL_WINDOW]
    t0 = time.perf_counter()
    split_log_probs(model, sample, corpus.pad_id)
    return train, max(len(sample), 1) / max(time.perf_counter() - t0, 1e-9)


def epochs_of(progress: LstmProgress, train_tokens: int, recipe: LstmRecipe) -> float:
    """Epochs trained so far, the current one in part."""
    steps = max(train_tokens // recipe.batch - 1, 1)
    return progress.epochs_done + min(progress.offset / steps, 1.0)


def train_lstm_reference(corpus: Corpus, budget_seconds: float, recipe: LstmRecipe = LstmRecipe(),
                         threads: int | None = None, progress=None, resume: LstmCheckpoint | None = None,
                         save=None, epochs: int | None = None) -> LstmResult:
    """Train the reference on `corpus`'s train split for the recipe's epochs within `budget_seconds` (training
    and validation; the test scoring comes after) and score its best weights on valid and test.
    `progress(epochs, valid, lr)` is called after each validation; `save(LstmCheckpoint)` too, so that a run
    the budget cut is continued from `resume` by a later call (its seconds and epochs counted on). `epochs`
    stops it sooner, after that many whole epochs in all (a plan that holds fewer than the recipe's)."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(recipe.seed)
    start = corpus.pad_id
    model = TiedLstm(len(corpus.vocab), recipe)
    state, best_state = LstmProgress(lr=recipe.lr), None
    if resume is not None:
        model.load_state_dict(resume.weights)
        state, best_state = resume.progress, resume.best_weights
    data = _rows(corpus.split("train"), recipe.batch)
    valid_ids = corpus.split("valid")
    began, before = time.monotonic(), state.seconds
    deadline = began + budget_seconds
    sample = valid_ids[:EVAL_ROWS * EVAL_WINDOW]
    t0 = time.monotonic()
    split_log_probs(model, sample, start)  # a validation's time, from one window: kept free at the budget's end
    validation = (time.monotonic() - t0) * len(valid_ids) / max(len(sample), 1)
    last = recipe.epochs if epochs is None else min(epochs, recipe.epochs)
    while state.epochs_done < last and time.monotonic() < deadline - validation:
        tokens, state.offset = _epoch(model, data, recipe, state.lr, deadline - validation, state.offset)
        if tokens == 0:
            break
        state.trained += tokens
        state.epochs_done += state.offset == 0
        t0 = time.monotonic()
        valid = perplexity_from_log_probs(split_log_probs(model, valid_ids, start))
        validation = time.monotonic() - t0
        if state.best is None or valid < state.best:
            state.best, best_state = valid, {k: v.clone() for k, v in model.state_dict().items()}
        elif state.offset == 0:  # a whole epoch that did not improve validation
            state.lr /= 4.0
        state.seconds = before + time.monotonic() - began
        if progress is not None:
            progress(epochs_of(state, len(corpus.train), recipe), valid, state.lr)
        if save is not None:
            save(LstmCheckpoint(state, model.state_dict(), best_state))
    state.seconds = before + time.monotonic() - began
    if best_state is not None:
        model.load_state_dict(best_state)
        best = state.best
    else:  # no window was trained within the budget: the untrained net, scored as it is
        best = perplexity_from_log_probs(split_log_probs(model, valid_ids, start))
    test = perplexity_from_log_probs(split_log_probs(model, corpus.split("test"), start))
    parameters = sum(p.numel() for p in model.parameters())
    return LstmResult(best, test, state.trained, epochs_of(state, len(corpus.train), recipe), state.seconds,
                      parameters, asdict(recipe), finished=state.epochs_done >= recipe.epochs)


# A run kept on disk (the --beyond row continues it): weights in safetensors, progress in JSON.
PROGRESS, WEIGHTS, BEST = "progress.json", "weights.safetensors", "best.safetensors"
TIED = ("out.weight", "embed.weight")  # the output weights are the embedding's: saved once, restored from it


def _untied(weights: dict) -> dict:
    return {k: v for k, v in weights.items() if k != TIED[0]}


def _tied(weights: dict) -> dict:
    return weights | {TIED[0]: weights[TIED[1]]}


def load_checkpoint(where: Path) -> LstmCheckpoint | None:
    """The run an earlier call left (None: none), checked as a training run's files are."""
    if not (where / PROGRESS).exists():
        return None
    data = ck.read_json(where / PROGRESS, "LSTM reference progress")
    try:
        progress = LstmProgress(**data)
    except TypeError:
        raise NnlmError(f"{where / PROGRESS} is not an LSTM reference's progress; remove {where}") from None
    weights = _tied(ck.load_tensors(where / WEIGHTS)[0])
    best = _tied(ck.load_tensors(where / BEST)[0]) if progress.best is not None else None
    return LstmCheckpoint(progress, weights, best)


def save_checkpoint(where: Path, checkpoint: LstmCheckpoint) -> None:
    """Weights first, progress last (atomically each): the progress file names a state whose weights exist."""
    where.mkdir(parents=True, exist_ok=True)
    ck.save_tensors(where / WEIGHTS, _untied(checkpoint.weights))
    if checkpoint.best_weights is not None:
        ck.save_tensors(where / BEST, _untied(checkpoint.best_weights))
    atomic_write_text(where / PROGRESS, json.dumps(asdict(checkpoint.progress), indent=1) + "\n")
