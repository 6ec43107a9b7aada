"""`nnlm reproduce`: Table 1 of Bengio et al. (2003) on Brown (or Table 2, AP News, on a corpus of
its size: `table="apnews"`), next to the paper's figures.

One call builds the n-gram rows, trains the requested MLPs (each in its own resumable run directory),
mixes every MLP with the interpolated trigram (0.5/0.5 as the paper, and EM weights per
context-frequency bucket), and writes `OUT/README.md` with two plots. Finished rows are kept in
`OUT/results.json` with the options that built them, so a second call skips them and continues
unfinished training runs.

Modules: `tables` (the registry of the paper's tables), `table` and `apnews` (their rows and the
paper's figures), `planner` (who gets how much of the budget; pure),
`rates` (measured speeds), `results` (results.json and its row key), `ngram_rows` and `net_rows`
(the row runners), `net_run` (a net row of any table), `net_lane` (the last net trained beside the
others; `lane_process`: how such a second process starts and ends), `job` (one call), `report` and `plots`
(from results.json alone); `beyond` and its modules the "Beyond the paper" section.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nnlm.errors import NnlmError
from nnlm.reproduce.request import DEFAULT_BUDGET_MINUTES, ReproduceRequest
from nnlm.reproduce.table import ALL_MODELS, DEFAULT_MODELS, NGRAM_ROWS, NgramRow, Row, mlp_rows, parse_models

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job

__all__ = ["ALL_MODELS", "DEFAULT_BUDGET_MINUTES", "DEFAULT_MODELS", "NGRAM_ROWS", "NgramRow", "ReproduceRequest",
           "Row", "mlp_rows", "parse_models", "reproduce", "report_only"]


def reproduce(request: ReproduceRequest, log: Callable[[str], None] = print) -> Path:
    """Build/train/mix every row the request asks for, write OUT/README.md; returns its path. With
    `request.beyond`, then the "Beyond the paper" section (`beyond.run_beyond`, Brown's Table 1 only)
    within `request.beyond_minutes` (default 60; --full: no budget)."""
    from nnlm.reproduce.job import Job
    from nnlm.reproduce.tables import get_table

    if request.beyond and get_table(request.table).name != "brown":
        raise NnlmError(f"--beyond builds on Table 1 (--table brown), not --table {request.table}")
    job = Job(request, log)
    run_table(job)
    if request.beyond:
        from nnlm.reproduce.beyond import DEFAULT_BEYOND_MINUTES, run_beyond
        from nnlm.reproduce.report import write_report

        minutes = request.beyond_minutes
        run_beyond(job, None if request.full and minutes is None else (minutes or DEFAULT_BEYOND_MINUTES),
                   reference=request.beyond_reference)
        write_report(request.out)
    return request.out / "README.md"


def run_table(job: Job) -> None:
    """The order of a table's work: the cheap n-gram rows and the trigram, the nets and their mixes, the
    class rows the nets leave time for (their clusterings in a second process from the start), the nets'
    train split; then the report."""
    from nnlm.reproduce import net_rows, ngram_rows
    from nnlm.reproduce.report import write_report

    ngram_rows.start_background_clusterings(job)
    try:
        trigram = ngram_rows.early_rows(job)
        net_rows.neural_rows(job, trigram)
        ngram_rows.late_rows(job)
    finally:
        if job.background is not None:
            job.background.stop()
    net_rows.train_split_rows(job)
    job.record_peak_memory()
    write_report(job.out)
    left = job.left()
    job.log(f"done in {(time.monotonic() - job.start) / 60:.1f} min"
            + ("" if left is None else f" of a {job.budget / 60:.1f}-minute budget"))


def report_only(out: Path | str) -> Path:
    """Rewrite OUT/README.md and its plots from OUT/results.json, building nothing."""
    from nnlm.reproduce.report import write_report

    return write_report(Path(out))
