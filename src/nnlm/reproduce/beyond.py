"""`nnlm reproduce --beyond`: the "Beyond the paper" section, built after Table 1 in the same --out.

Its rows are data (`beyond_rows.BEYOND_ROWS`): nets trained with other seeds or presets, and mixes
of named rows. The section has its own clock and budget, planned like Table 1's nets by
`planner.plan`; its rows live in the same results.json under `beyond:<id>`, keyed by the options
that built them, so a second call keeps what is done and continues cut training runs. Each part's
log-probabilities of valid and test are kept in OUT/beyond/scores, so a resumed mix scores nothing.

Modules: `beyond_rows` (the rows), `section` (its clock and budget), `beyond_nets` (training), `beyond_mixes`
(parts and mixes), `beyond_report` (the README section).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nnlm.reproduce import beyond_mixes, beyond_nets
from nnlm.reproduce.beyond_rows import BEYOND_ROWS, MixRow, NetRow, check_rows, mixes_of, nets_of
from nnlm.reproduce.section import Section

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job

DEFAULT_BEYOND_MINUTES = 60.0


def run_beyond(job: Job, minutes: float | None, rows: Sequence[NetRow | MixRow] | None = None) -> None:
    """Train the section's nets within `minutes` (None: until early stopping), then fit its mixes."""
    rows = BEYOND_ROWS if rows is None else tuple(rows)
    check_rows(rows)
    section = Section(job, minutes, rows)
    job.results.call = job.results.call | {"beyond_minutes": minutes, "beyond_rows": [r.id for r in rows]}
    job.results.save()
    for net in nets_of(rows):
        beyond_nets.net_row(section, net)
    for mix in mixes_of(rows):
        beyond_mixes.mix_row(section, mix)
    took = (time.monotonic() - section.start) / 60
    job.log(f"beyond the paper: done in {took:.1f} min"
            + ("" if minutes is None else f" of a {minutes:g}-minute budget"))
