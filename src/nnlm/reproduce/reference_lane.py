"""The LSTM reference beside the section's nets (`--beyond-reference beside`, the default): a second process
that trains it on a core of its own for the whole section's budget while the nnlm nets train on the other.

Why: on a 2-core host the reference's 6 epochs take most of an hour (its full softmax over |V| words is
most of its step), so planned among the nets (`first`/`last`) either it or they get the hour. Beside them, it
has what the nets share (the section's budget, less the mixes' reserve and its own test scoring), and the
nets keep theirs: the same budget, on the same host, in the same report. Each side gets one thread
(`nnlm.threads.govern` in the child, `Job.threads` = 1 for the nets while the lane runs).

The child is a `multiprocessing` spawn of `train_beside`: it trains and saves as `beyond_reference`'s row does
(continuing a run an earlier call cut), writes its result as JSON in its run directory and its progress lines
to a log there; the parent collects both when the nets are done (`finish`) and puts the row in results.json
itself, so only one process ever writes it. The child is a daemon: it ends with the call (Ctrl-C is left to
the parent, which saves its nets and exits; a child whose parent was killed ends at its next save).
"""
from __future__ import annotations

import json
import math
import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.reproduce import lane_process

if TYPE_CHECKING:
    from nnlm.data.corpus import Corpus
    from nnlm.reproduce.lstm_reference import LstmRecipe
    from nnlm.reproduce.section import Section

RESULT, LOG = "result.json", "lane.log"


def train_beside(corpus: Corpus, where: Path, budget_seconds: float, recipe: LstmRecipe) -> None:
    """The child: the reference (`recipe`) trained within `budget_seconds` (training, validations and the test
    scoring) on one thread, continuing `where`'s run if an earlier call left one; its result written to `where`."""
    from nnlm.reproduce.lstm_reference import load_checkpoint, measure_rates, train_lstm_reference

    parent = lane_process.enter()
    where.mkdir(parents=True, exist_ok=True)
    (where / RESULT).unlink(missing_ok=True)
    _, score_rate = measure_rates(corpus, recipe)
    testing = len(corpus.test) / max(score_rate, 1e-9)  # the scoring of test comes after the budget's training
    lines: list[str] = []

    def progress(epochs: float, valid: float, lr: float) -> None:
        lines.append(f"epoch {epochs:.2f}: valid {valid:.1f} (lr {lr:g})")
        atomic_write_text(where / LOG, "\n".join(lines) + "\n")

    with lane_process.ended_quietly(where / LOG):
        result = train_lstm_reference(corpus, max(budget_seconds - testing, 0.0), recipe,
                                      resume=load_checkpoint(where), progress=progress,
                                      save=lambda checkpoint: saved(where, checkpoint, parent))
    atomic_write_text(where / RESULT, json.dumps(result.as_dict(), indent=1) + "\n")


def saved(where: Path, checkpoint, parent: int) -> None:
    """Save, then end here if the call that started this child is gone (killed without a chance to end it): its
    next call continues the run from what was just saved, and no orphan trains beside it meanwhile."""
    from nnlm.reproduce.lstm_reference import save_checkpoint

    save_checkpoint(where, checkpoint)
    lane_process.end_if_orphaned(parent)


@dataclass
class Lane:
    """A reference training beside the nets: its process, where it writes, its budget, and the nets' threads to
    give back."""

    process: multiprocessing.process.BaseProcess
    where: Path
    seconds: float
    threads: int | None


def start(section: Section, reserve: float, where: Path, recipe: LstmRecipe) -> Lane:
    """Start the child (`recipe`, its run in `where`) for the section's budget less `reserve` seconds (the
    mixes', after the nets); the nets train on one thread meanwhile."""
    left = section.left()
    seconds = math.inf if left is None else max(left - reserve, 0.0)
    process = lane_process.spawn(train_beside, section.job.corpus, where, seconds, recipe)
    lane = Lane(process, where, seconds, section.job.threads)
    section.job.threads = 1
    return lane


def finish(section: Section, lane: Lane) -> dict:
    """Wait for the child; give the nets' threads back; its result (NnlmError if it failed)."""
    exitcode = lane_process.join(lane.process, lane.where / LOG, section.job.log, "lstm-reference")
    section.job.threads = lane.threads
    if exitcode != 0 or not (lane.where / RESULT).exists():
        raise NnlmError(f"the LSTM reference beside the nets failed (exit code {exitcode}); "
                        f"its run is in {lane.where}")
    return json.loads((lane.where / RESULT).read_text())
