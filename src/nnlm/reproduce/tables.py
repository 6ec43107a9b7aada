"""The paper's tables as data: which rows `nnlm reproduce --table NAME` builds and what the paper reports.

The job, the planner, the row runners and the report are the same for every table; a table only
says which n-gram rows it has (and in what order they are built), which nets it trains and how
their rows are labelled, and the paper's figures its ratios are compared with.
Table 1 (Brown) lives in `table`, Table 2 (AP News) in `apnews`; Table 1 is read from `table` at
each call, so the module stays the single source of its rows."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nnlm.errors import NnlmError
from nnlm.reproduce.planner import NET_TIERS
from nnlm.reproduce.table import NgramRow, Row

DEFAULT_TABLE = "brown"


@dataclass(frozen=True)
class PaperTable:
    """One of the paper's tables, as `nnlm reproduce` builds it."""

    name: str  # the --table value
    title: str  # the report's heading: "Table 1 of Bengio et al. (2003)"
    ngram_rows: tuple[NgramRow, ...]
    build_order: tuple[str, ...]  # n-gram rows built before the nets
    after_nets: tuple[str, ...]  # n-gram rows built with what the nets leave
    best_ngram: str  # the paper's best n-gram, as the ratio sentence names it
    best_ngram_test: float  # its test perplexity: the paper's ratios divide by it
    paper_corpus: str  # the paper's corpus and what to compare, for the report's corpus line
    net_rows: Callable[[str], tuple[Row, ...]]  # a net -> (alone, mixed 0.5, mixed EM, other mixes ...)
    parse_nets: Callable[[str | None, bool], list[str]]  # --models, --full -> the nets to train
    net_floor_epochs: float = NET_TIERS[0]  # the least training (in epochs) the planner grants a net a row for
    # the net's shapes in order of preference: {} is its preset; a later one (ModelConfig fields over it)
    # trains when the ones before it do not fit the budget (the report says so)
    net_shapes: tuple[dict, ...] = ({},)

    def rows(self, nets: list[str]) -> list[Row]:
        """The report's rows in order: each net with its two mixes, then the n-gram rows."""
        return [row for net in nets for row in self.net_rows(net)] + list(self.ngram_rows)


def brown() -> PaperTable:
    from nnlm.reproduce import table

    return PaperTable("brown", "Table 1 of Bengio et al. (2003)", table.NGRAM_ROWS, table.NGRAM_BUILD_ORDER,
                      table.NGRAM_AFTER_NETS, "class-based c = 500", table.PAPER_BEST_NGRAM_TEST,
                      "the paper's Brown: 800,000 / 200,000 / 181,041, |V| = 16,383; another tokenization, "
                      "so compare ratios",
                      table.mlp_rows, table.parse_models)


def apnews() -> PaperTable:
    from nnlm.reproduce import apnews as ap

    return PaperTable("apnews", "Table 2 of Bengio et al. (2003) (AP News)", ap.NGRAM_ROWS,
                      tuple(r.id for r in ap.NGRAM_ROWS), (), "Kneser-Ney back-off n = 5", ap.PAPER_BEST_NGRAM_TEST,
                      "the paper's AP News: 13,994,528 / 963,138 / 963,071, |V| = 17,964; licensed and not here, "
                      "so compare ratios to the n-grams of the same corpus",
                      ap.net_rows, ap.parse_nets, ap.NET_FLOOR_EPOCHS, ap.NET_SHAPES)


TABLES: dict[str, Callable[[], PaperTable]] = {"brown": brown, "apnews": apnews}


def get_table(name: str | None) -> PaperTable:
    """The table called `name` (None: Table 1, the default)."""
    key = (name or DEFAULT_TABLE).lower()
    if key not in TABLES:
        raise NnlmError(f"unknown table {name!r}; choose from {', '.join(TABLES)}")
    return TABLES[key]()
