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

import math
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlm.reproduce import planner
from nnlm.reproduce.beyond_nets import section_grant
from nnlm.reproduce.beyond_rows import ReferenceRow, row_key
from nnlm.reproduce.lstm_reference import (
    LstmCheckpoint,
    LstmRecipe,
    TiedLstm,
    epochs_of,
    load_checkpoint,
    measure_rates,
    save_checkpoint,
    train_lstm_reference,
)
from nnlm.reproduce.net_run import GUARD
from nnlm.reproduce.results import RowResult, options_tag

if TYPE_CHECKING:
    from nnlm.reproduce.reference_lane import Lane
    from nnlm.reproduce.section import Section

RECIPE = LstmRecipe()  # the example's, with --tied and 6 epochs
def options_of() -> dict[str, Any]:
    """The row's results key: which reference, and its recipe (another recipe is another row)."""
    return {"reference": "lstm", "recipe": asdict(RECIPE)}


def run_dir(section: Section) -> Path:
    return section.job.out / "runs" / f"lstm-reference-{options_tag(options_of())}"


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
    plan = None if grant is None else grant.to_dict()
    if grant is not None:
        job.log(f"    plan: {grant.reason}")
    if grant is not None and grant.status == "skipped":
        if resume is not None and key in job.results.rows:
            job.log("    no budget left to continue it: keeping what it had")
            return
        parameters = sum(p.numel() for p in TiedLstm(len(job.corpus.vocab), RECIPE).parameters())
        job.results.put(key, RowResult({}, parameters, 0.0, "skipped", grant.reason, options, plan,
                                       {"reference": "lstm", "run": str(where.relative_to(job.out)),
                                        "command": command(section, 0.0)}))
        return
    log = section.row_log(row.id)
    if resume is not None:
        log(f"continuing its run in {where.name} from {epochs_of(resume.progress, len(job.corpus.train), RECIPE):.2f} "
            "epochs")
    budget, epochs = limits(grant, epoch, resume)
    result = train_lstm_reference(job.corpus, budget, RECIPE, resume=resume, epochs=epochs,
                                  progress=lambda e, v, lr: log(f"epoch {e:.2f}: valid {v:.1f} (lr {lr:g})"),
                                  save=lambda checkpoint: save_checkpoint(where, checkpoint))
    put_result(section, row, result.as_dict(), plan, None if grant is None else grant.work)


def put_result(section: Section, row: ReferenceRow, result: dict[str, Any], plan: dict | None,
               budget: float | None) -> None:
    """The reference's row in results.json from its `LstmResult.as_dict()`, planned `plan` with `budget` seconds
    of training (None: no budget)."""
    job, where = section.job, run_dir(section)
    note = f"{result['epochs']:.2f} of its recipe's {RECIPE.epochs} epochs"
    if not result["finished"]:
        note = f"shortened: {note}, all the budget held"
    minutes = result["seconds"] / 60 if budget is None or not math.isfinite(budget) else budget / 60
    job.results.put(row_key(row.id), RowResult({"train": None, "valid": result["valid"], "test": result["test"]},
                                               result["parameters"], result["seconds"],
                                               "done" if result["finished"] else "shortened", note, options_of(), plan,
                                               {"reference": "lstm", "run": str(where.relative_to(job.out)),
                                                "epochs": round(result["epochs"], 2), "finished": result["finished"],
                                                "command": command(section, minutes)}))
    job.log(f"    valid {result['valid']:.1f}  test {result['test']:.1f}  ({note})")


def start_beside(section: Section, row: ReferenceRow) -> Lane | None:
    """`--beyond-reference beside`: the reference's process started before the nets, for the section's budget
    less the mixes' reserve (None: done by an earlier call)."""
    from nnlm.reproduce import reference_lane
    from nnlm.reproduce.beyond_nets import mix_reserve

    if not section.job.results.pending(row_key(row.id), options_of()):
        section.announce(row.label, "done already")
        return None
    lane = reference_lane.start(section, mix_reserve(section), run_dir(section), RECIPE)
    minutes = f"{lane.seconds / 60:.1f} min" if math.isfinite(lane.seconds) else "its recipe's epochs"
    section.announce(row.label, f"beside the nets, in a process of its own on one thread, for {minutes}")
    return lane


def finish_beside(section: Section, row: ReferenceRow, lane: Lane | None) -> None:
    """After the nets: the reference's process joined and its row put."""
    from nnlm.reproduce import reference_lane

    if lane is None:
        return
    result = reference_lane.finish(section, lane)
    plan = {"beside": True} | ({"work_minutes": lane.seconds / 60} if math.isfinite(lane.seconds) else {})
    put_result(section, row, result, plan, lane.seconds)
