"""The section's LSTM reference row (`beyond_rows.LSTM_REFERENCE`): the LSTM a user copies today
(`nnlm.reproduce.lstm_reference`), trained on the section's files within the section's budget so that its
nets are compared with it on the same host in the same report.

Why planned as a net: the comparison is only fair if the reference is given what a section net is given.
Its grant is `beyond_nets.section_grant`'s, the nets' rule: all its recipe's epochs (6) if they are left
after the rows before it and the mixes' reserve, else what is left, skipped below MIN_EPOCHS epochs; its
speeds are measured on a few windows in the call, as a net's are. Where it stands among the nets (first
or last) is the call's `--beyond-reference`.

Kept as the nets are: its row in results.json (beyond:lstm-reference) is keyed by its recipe, so a second
call keeps a done row; a run the budget cut is kept in OUT/runs/lstm-reference-<tag> (weights in
safetensors, progress in JSON) and continued there by the next call. Not an nnlm net: no mix names it and
no scores are kept for mixing. It trains on the CPU whatever the call's --device (as the benchmark does).
"""
from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.neural.run import checkpoint as ck
from nnlm.reproduce import planner
from nnlm.reproduce.beyond_nets import section_grant
from nnlm.reproduce.beyond_rows import ReferenceRow, row_key
from nnlm.reproduce.lstm_reference import (
    LstmCheckpoint,
    LstmProgress,
    LstmRecipe,
    TiedLstm,
    epochs_of,
    measure_rates,
    train_lstm_reference,
)
from nnlm.reproduce.net_run import GUARD
from nnlm.reproduce.results import RowResult, options_tag

if TYPE_CHECKING:
    from nnlm.reproduce.section import Section

RECIPE = LstmRecipe()  # the example's, with --tied and 6 epochs
PROGRESS, WEIGHTS, BEST = "progress.json", "weights.safetensors", "best.safetensors"
TIED = ("out.weight", "embed.weight")  # the output weights are the embedding's: saved once, restored from it


def _untied(weights: dict) -> dict:
    return {k: v for k, v in weights.items() if k != TIED[0]}


def _tied(weights: dict) -> dict:
    return weights | {TIED[0]: weights[TIED[1]]}


def options_of() -> dict[str, Any]:
    """The row's results key: which reference, and its recipe (another recipe is another row)."""
    return {"reference": "lstm", "recipe": asdict(RECIPE)}


def run_dir(section: Section) -> Path:
    return section.job.out / "runs" / f"lstm-reference-{options_tag(options_of())}"


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


def need(section: Section, resume: LstmCheckpoint | None) -> tuple[planner.Need, float]:
    """(what the reference asks of the plan, the seconds of one epoch with its validation): the recipe's epochs
    still to train, each with its validation, and the scoring of test after them; speeds measured now."""
    c = section.job.corpus
    train_rate, score_rate = measure_rates(c, RECIPE)
    rates = planner.Rates(planner.finite(train_rate), planner.finite(score_rate), path="lstm")
    train, valid = planner.epoch_parts(rates, len(c.train), len(c.valid))
    done = 0.0 if resume is None else epochs_of(resume.progress, len(c.train), RECIPE)
    want = max(RECIPE.epochs - done, 0.0) * (train + valid)
    fixed = planner.SAFETY * (len(c.valid) + len(c.test)) / rates.score
    return planner.Need("lstm-reference", fixed, (want,), unit="training with its validation"), train + valid


def limits(grant: planner.Grant | None, epoch: float, resume: LstmCheckpoint | None) -> tuple[float, int | None]:
    """(seconds, whole epochs in all) for a grant, as a net's run gets them (net_run.run_limits): the whole epochs
    the grant holds, with GUARD x the grant as a time limit only against a low estimate; a grant of less than an
    epoch is a time limit alone. No grant (no budget): the recipe's epochs; a full grant: the recipe's epochs too
    (a run continued from within an epoch wants a part epoch more than its whole ones)."""
    if grant is None:
        return math.inf, None
    if grant.status == "full":
        return GUARD * grant.work, None
    whole = int(grant.work / epoch + 1e-9)
    if whole < 1:
        return grant.work, None
    return GUARD * grant.work, (0 if resume is None else resume.progress.epochs_done) + whole


def command(section: Section, minutes: float) -> str:
    """The benchmark a user runs for the same reference alone (beside KN5), from a source checkout."""
    words = ["python", "benchmarks/lstm_reference.py", "--minutes", f"{max(minutes, 0.1):.1f}"]
    if section.job.threads:
        words += ["--threads", str(section.job.threads)]
    if section.job.corpus_source != "brown":
        words += ["--corpus", section.job.corpus_source]
    return " ".join(shlex.quote(w) for w in words)


def reference_row(section: Section, row: ReferenceRow) -> None:
    """Keep (done by an earlier call), or train (continuing a cut run) and score the reference."""
    from nnlm.threads import govern

    job, key, options = section.job, row_key(row.id), options_of()
    if not job.results.pending(key, options):
        section.announce(row.label, "done already")
        return
    where = run_dir(section)
    resume = load_checkpoint(where)
    govern(requested=job.threads, device="cpu")
    grant, epoch = None, math.inf
    if section.left() is not None:
        wanted, epoch = need(section, resume)
        grant = section_grant(section, wanted, epoch)
    section.announce(row.label, "" if grant is None else f"{grant.work / 60:.1f} min of training ({grant.status})")
    extra = {"reference": "lstm", "run": str(where.relative_to(job.out))}
    plan = None if grant is None else grant.to_dict()
    if grant is not None:
        job.log(f"    plan: {grant.reason}")
    if grant is not None and grant.status == "skipped":
        if resume is not None and key in job.results.rows:
            job.log("    no budget left to continue it: keeping what it had")
            return
        parameters = sum(p.numel() for p in TiedLstm(len(job.corpus.vocab), RECIPE).parameters())
        job.results.put(key, RowResult({}, parameters, 0.0, "skipped", grant.reason, options, plan,
                                       extra | {"command": command(section, 0.0)}))
        return
    log = section.row_log(row.id)
    if resume is not None:
        log(f"continuing its run in {where.name} from {epochs_of(resume.progress, len(job.corpus.train), RECIPE):.2f} "
            "epochs")
    budget, epochs = limits(grant, epoch, resume)
    result = train_lstm_reference(job.corpus, budget, RECIPE, resume=resume, epochs=epochs,
                                  progress=lambda e, v, lr: log(f"epoch {e:.2f}: valid {v:.1f} (lr {lr:g})"),
                                  save=lambda checkpoint: save_checkpoint(where, checkpoint))
    note = f"{result.epochs:.2f} of its recipe's {RECIPE.epochs} epochs"
    if not result.finished:
        note = f"shortened: {note}, all the budget held"
    job.results.put(key, RowResult({"train": None, "valid": result.valid, "test": result.test}, result.parameters,
                                   result.seconds, "done" if result.finished else "shortened", note, options, plan,
                                   extra | {"epochs": round(result.epochs, 2), "finished": result.finished,
                                            "command": command(section, result.seconds / 60 if grant is None
                                                               else grant.work / 60)}))
    job.log(f"    valid {result.valid:.1f}  test {result.test:.1f}  ({note})")
