"""What one `nnlm reproduce` call asks (`ReproduceRequest`): the command's options as one typed, frozen value,
checked when it is made, which `nnlm.reproduce.reproduce` and `job.Job` take whole."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nnlm.errors import NnlmError

DEFAULT_BUDGET_MINUTES = 30.0


@dataclass(frozen=True)
class ReproduceRequest:
    """The options of one call. `corpus`: 'brown', a text directory, a text file or '-'; `out`: the report
    directory; `budget_minutes`: the whole call's wall-clock budget (None: DEFAULT_BUDGET_MINUTES; `full`:
    none, every net trains to early stopping); `models`: the nets to train (None: the table's default);
    `command`: the command line the report quotes; `table`: 'brown' (Table 1) or 'apnews' (None: brown);
    `beyond`: then the "Beyond the paper" section, within `beyond_minutes` (default 60; `full`: none), with
    the LSTM reference `beyond_reference`: 'beside' its nets (a process of its own for the section's budget),
    planned 'first' or 'last' among them, or 'none' (left out);
    `min_count` / `max_vocab` / `heldout`: the vocabulary and the held-out parts of a text corpus, as
    `nnlm train` and `nnlm ngram` take them, for every row; `loss`, `samples`, `hogwild`, `threads`, `device`:
    how the nets train."""

    corpus: str
    out: Path
    budget_minutes: float | None = None
    models: str | None = None
    full: bool = False
    command: str = ""
    progress: bool = True
    threads: int | None = None
    device: str = "auto"
    loss: str = "sampled"
    samples: int | None = None
    hogwild: int | None = None
    table: str | None = None
    beyond: bool = False
    beyond_minutes: float | None = None
    beyond_reference: str = "beside"
    min_count: int | None = None
    max_vocab: int | None = None
    heldout: int | None = None

    def __post_init__(self) -> None:
        from nnlm.neural.run.config import check_loss

        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "corpus", str(self.corpus))
        for name in ("budget_minutes", "beyond_minutes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise NnlmError(f"--{name.replace('_', '-')} must be positive, got {value}")
        from nnlm.reproduce.beyond_rows import check_reference_place

        check_reference_place(self.beyond_reference)
        if self.hogwild is not None and self.hogwild < 1:
            raise NnlmError(f"--hogwild must be at least 1 worker, got {self.hogwild}")
        check_loss(self.loss, self.samples)  # samples None: the trainer's default, min(DEFAULT_SAMPLES, |V|)

    @property
    def budget(self) -> float | None:
        """The call's budget in minutes (None: --full, no budget)."""
        return None if self.full else (self.budget_minutes or DEFAULT_BUDGET_MINUTES)
