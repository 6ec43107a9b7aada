"""`nnlm reproduce --beyond`: the "Beyond the paper" section, built after Table 1 in the same --out.

Its rows are data (`beyond_rows.BEYOND_ROWS`): nets trained with other seeds or presets, and mixes
of named rows. The section has its own clock and budget, planned like Table 1's nets by
`planner.plan`; its rows live in the same results.json under `beyond:<id>`, keyed by the options
that built them, so a second call keeps what is done and continues cut training runs. Each part's
log-probabilities of valid and test are kept in OUT/beyond/scores, so a resumed mix scores nothing.

The LSTM reference (`beyond_reference`, not an nnlm net) trains beside the nets in a process of its own for the
section's budget (`reference_lane`; the default), or is planned among them, first or last, as the call's
`reference` says (or left out); it is shown beside them, never mixed.

Modules: `beyond_rows` (the rows), `section` (its clock and budget), `beyond_nets` (training), `beyond_reference`
(the LSTM reference), `beyond_mixes` (parts and mixes), `beyond_report` and `beyond_plot` (the README section).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nnlm.reproduce import beyond_mixes, beyond_nets
from nnlm.reproduce.beyond_rows import (
    BEYOND_ROWS,
    DEFAULT_REFERENCE,
    NetRow,
    ReferenceRow,
    Row,
    check_rows,
    mixes_of,
    trained_of,
    with_reference,
)
from nnlm.reproduce.section import Section

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job

DEFAULT_BEYOND_MINUTES = 60.0


def run_beyond(job: Job, minutes: float | None, rows: Sequence[Row] | None = None,
               reference: str = DEFAULT_REFERENCE) -> None:
    """Train the section's nets and the LSTM reference (placed `reference`: first, last or none) within
    `minutes` (None: until early stopping, the reference its recipe's epochs), then fit its mixes."""
    from nnlm.reproduce.beyond_reference import finish_beside, reference_row, start_beside

    rows = with_reference(BEYOND_ROWS if rows is None else tuple(rows), reference)
    check_rows(rows)
    section = Section(job, minutes, rows)
    job.results.call = job.results.call | {"beyond_minutes": minutes, "beyond_rows": [r.id for r in rows],
                                           "beyond_reference": reference}
    job.results.save()
    beside = [r for r in trained_of(rows) if isinstance(r, ReferenceRow)] if reference == "beside" else []
    lanes = [start_beside(section, r) for r in beside]  # (its own process, on the other core)
    for row in trained_of(rows):
        if isinstance(row, NetRow):
            beyond_nets.net_row(section, row)
        elif row not in beside:
            reference_row(section, row)
    for row, lane in zip(beside, lanes, strict=True):
        finish_beside(section, row, lane)
    for mix in mixes_of(rows):
        beyond_mixes.mix_row(section, mix)
    took = (time.monotonic() - section.start) / 60
    job.log(f"beyond the paper: done in {took:.1f} min"
            + ("" if minutes is None else f" of a {minutes:g}-minute budget"))
