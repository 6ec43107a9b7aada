"""The "Beyond the paper" section's clock and budget (`Section`): what `beyond_nets` and `beyond_mixes` are
given, apart from `beyond`, which runs them, so that neither imports the module that imports it."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nnlm.lm import LanguageModel
from nnlm.reproduce.beyond_rows import Row

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job


class Section:
    """The section's clock and budget, the Table 1 job it follows, and the parts loaded so far."""

    def __init__(self, job: Job, minutes: float | None, rows: Sequence[Row]) -> None:
        self.job, self.rows = job, tuple(rows)
        self.budget = None if minutes is None else 60.0 * minutes
        self.start = time.monotonic()
        self.models: dict[str, LanguageModel] = {}  # part id -> loaded or built in this call
        self.done = 0

    def left(self) -> float | None:
        return None if self.budget is None else self.budget - (time.monotonic() - self.start)

    def announce(self, label: str, extra: str = "") -> None:
        self.done += 1
        left = self.left()
        tail = ", ".join(t for t in ("" if left is None else f"budget left {max(left, 0) / 60:.1f} min", extra) if t)
        self.job.log(f"[beyond {self.done}/{len(self.rows)}] {label}" + (f" - {tail}" if tail else ""))

    def row_log(self, row_id: str):
        return lambda line: self.job.log(f"    {line}  [{row_id}]")
