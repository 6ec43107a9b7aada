"""The rows of the "Beyond the paper" section, as data: nets to train and mixes of named rows.

A row is a `NetRow` (a preset trained with a seed, a loss and a recipe), a `MixRow` (named rows
averaged with equal weights, or with weights fitted by EM on validation, globally or per
context-frequency bucket), or the `ReferenceRow` (the LSTM a user copies today, not an nnlm net:
trained within the section's budget for comparison, never mixed; `with_reference` places it first
(also where it trains beside the nets) or last among the nets, or leaves it out). A mix may name the
section's nets, Table 1's nets (`mlp1`) and Table 1's n-gram rows (`kn5`, `class500-3`, `interpolated`,
...: any row of `table.NGRAM_ROWS`), which are reused, not rebuilt. Adding a preset to the section is
adding a `NetRow` here, and a `MixRow` naming it. Rows are built in list order;
the nets before the mixes, in the order the budget should favour them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nnlm.errors import NnlmError
from nnlm.reproduce.table import NGRAM_ROWS

WEIGHTINGS = ("equal", "em", "em-buckets")
KEY = "beyond:"  # prefix of the section's rows in results.json
NGRAM_BY_ID = {r.id: r for r in NGRAM_ROWS}  # Table 1's n-gram rows a mix may name, by id
NGRAM_PARTS = tuple(NGRAM_BY_ID)


@dataclass(frozen=True)
class NetRow:
    """A net trained for the section; `twin` names the Table 1 net it is the same run as (reused)."""

    id: str
    label: str
    preset: str
    seed: int = 0
    loss: str = "sampled"
    recipe: str | None = None  # None: the loss's default recipe
    twin: str = ""
    dropout: float | None = None  # None: the recipe's
    order: int | None = None  # n; None: the preset's
    samples: int | None = None  # the sampled loss's samples; None: the call's
    lr_factor: float | None = None  # the schedule's factor; None: the recipe's
    batch_size: int | None = None  # None: nnlm train's default
    # the share of the section's budget the row wants (trained to early stopping or its grant, whatever its
    # epochs); None: its recipe's expected epochs at its timed speed (planner.EXPECTED_EPOCHS)
    share: float | None = None

    def request(self) -> dict[str, Any]:
        """What the row asks `nnlm train` for beside its preset and loss: its seed, and its recipe,
        dropout, order, samples, batch size and rate factor where it names them."""
        named = {"recipe": self.recipe, "dropout": self.dropout, "order": self.order, "samples": self.samples,
                 "batch_size": self.batch_size, "lr_factor": self.lr_factor}
        return {"seed": self.seed} | {k: v for k, v in named.items() if v is not None}


@dataclass(frozen=True)
class ReferenceRow:
    """A model that is not nnlm's, trained on the section's files and planned as its nets are, to compare them
    with: the LSTM of `nnlm.reproduce.lstm_reference`. No mix names it; it is never the section's best net."""

    id: str
    label: str


LSTM_REFERENCE = ReferenceRow("lstm-reference", "LSTM reference (PyTorch's word_language_model recipe: 2 x 200, "
                                                "tied; not an nnlm net)")
# beside the nets (a process of its own for the section's budget), before them, after them, or left out
REFERENCE_PLACES = ("beside", "first", "last", "none")
DEFAULT_REFERENCE = "beside"  # the budget the nets share, on a core of its own: the nets keep theirs


@dataclass(frozen=True)
class MixRow:
    """Named rows mixed: `equal` weights (an ensemble), `em` (global) or `em-buckets` (per bucket)."""

    id: str
    label: str
    parts: tuple[str, ...]
    weighting: str


def ngram_save_command(part: str) -> str:
    """The `nnlm ngram` that saves Table 1's n-gram row `part` where a mix command names it (ngrams/<part>)."""
    row = NGRAM_BY_ID[part]
    classes = f" --classes {row.classes}" if row.classes is not None else ""
    return f"nnlm ngram --kind {row.kind} --order {row.n}{classes} --save ngrams/{part}"


def row_key(row_id: str) -> str:
    """A section row's key in results.json (apart from Table 1's row ids)."""
    return KEY + row_id


def mlp1_seed(seed: int) -> NetRow:
    return NetRow(f"mlp1-seed{seed}", f"MLP1, seed {seed}", "mlp1", seed=seed, twin="mlp1" if seed == 0 else "")


# Seeds 3-4 did not fit the hour beside the context nets, and more seeds bought little: ensembles of 2 and 3
# MLP1 measured 249.4 / 248.0 test, mixed with the n-grams 226.5 / 226.1 (docs/experiments/beyond.md).
MLP1_SEEDS = tuple(f"mlp1-seed{s}" for s in range(3))
NGRAMS = ("kn5", "class500-3", "interpolated")

Row = NetRow | MixRow | ReferenceRow

BEYOND_ROWS: tuple[NetRow | MixRow, ...] = (
    # the paper's section-6 recurrent net (issue 51): 2 LSTM layers of 200 fed by C and tied to it, trained with the
    # sampled loss (512 words; 4x the full softmax's tokens/s), 20 streams of 35 steps as the LSTM reference;
    # first, as the row the budget should favour; recipe adaptive-sampled (the rate halved only when validation
    # stalls): valid 205.2 after 13 epochs in 40 minutes on one thread, test 182.9 = 0.595 x KN5, against 223.3 /
    # 0.652 with the sampled recipe's x 0.7 an epoch (docs/experiments/recurrent-nplm.md). It wants 70% of the
    # budget (42 of 60 minutes), not the 10 epochs a Table 1 net early-stops after: at 65% the 60-minute section
    # stopped it after 12 epochs in 38.1 minutes (valid 209.1, test 0.609); at 70% (docs/beyond-report) 15 epochs,
    # valid 203.5, test 181.1 = 0.590 (the reference beside it 0.609), mixed 0.541; the tied net after it: 13.0 min
    NetRow("lstm", "recurrent NPLM (2 LSTM layers of 200, tied, sampled loss, rate halved on a stall)", "lstm",
           recipe="adaptive-sampled", dropout=0.3, samples=512, batch_size=700, share=0.7),
    mlp1_seed(0),
    # long-context with its output rows tied to C (Press & Wolf 2017; a projection of the last hidden layer onto m),
    # seeing 255 words back, the 251 older ones in one sum weighted per feature (each feature its own reach), the
    # rate x 0.5 an epoch: valid 217.3, test 197.4 = 0.642 x KN5 (6 epochs of 1.7 min, AVX-512 host, beside another
    # run), against 219.3 / 0.651 at n = 128, 226.6 / 0.673 at n = 64 with one weight a position and 231.3 / 0.685
    # at n = 32 (the section of docs/beyond-report); untied n = 32: 243.1 / 0.712 (docs/experiments/ff-net.md)
    NetRow("long-context-256-tied", "long-context, n = 256, per-feature sum, tied output weights, dropout 0.2",
           "long-context-256-tied", dropout=0.2, lr_factor=0.5),
    # long-context (below) seeing 31 words back, with dropout 0.2: valid 243.1 against 255.5 at n = 12 (n = 16:
    # 250.5, n = 24: 245.6; dropout 0.3 at n = 16: 253.0), the best feed-forward net (docs/experiments/beyond.md):
    # before n = 12, so that a slower host builds it first
    NetRow("long-context-n32", "long-context, n = 32, dropout 0.2", "long-context", dropout=0.2, order=32),
    # presets.BEYOND: the 4 nearest words concatenated, the older ones as one learned sum (Sun & Iyyer 2021),
    # h = 200, m = 100, recipe sampled-large; long-context n = 12 (deep-context and wide-context, n = 9, left
    # the section for the time of the longer contexts: docs/experiments/beyond.md has their figures)
    NetRow("long-context", "long-context (n = 12, 2 residual layer-normed hidden layers)", "long-context"),
    mlp1_seed(1),
    # the paper's own extensions (section 5; issue 35): its energy network with MLP1's direct connections,
    # and MLP1 with the class-factored output layer (both factors exact softmaxes: the full softmax's loss)
    NetRow("energy-direct", "energy network (section 5.1) with MLP1's direct connections", "energy-direct"),
    NetRow("mlp1-classes", "MLP1 with the class-factored output layer", "mlp1-classes", loss="full"),
    mlp1_seed(2),
    # a second long-context (the best single net; 4.6 min idle): its seed-to-seed spread is ~1% on validation
    NetRow("long-context-seed1", "long-context, seed 1", "long-context", seed=1),
    # the same with more dropout: valid 255.5 against 258.9 in one run (docs/experiments/beyond.md)
    NetRow("long-context-dropout", "long-context, dropout 0.2", "long-context", dropout=0.2),
    NetRow("long-context-dropout-seed1", "long-context, dropout 0.2, seed 1", "long-context", seed=1, dropout=0.2),
    MixRow("long-mlp1-ngrams-em", "long-context + MLP1 + KN5 + class c = 500 + trigram, EM by context frequency",
           ("long-context", "mlp1-seed0", *NGRAMS), "em-buckets"),
    MixRow("extensions-ngrams-em", "energy-direct + class-factored MLP1 + MLP1 + KN5 + class c = 500 + trigram, "
           "EM by context frequency", ("energy-direct", "mlp1-classes", "mlp1-seed0", *NGRAMS), "em-buckets"),
    MixRow("long-extensions-ngrams-em", "long-context + energy-direct + class-factored MLP1 + KN5 + class c = 500 "
           "+ trigram, EM by context frequency", ("long-context", "energy-direct", "mlp1-classes", *NGRAMS),
           "em-buckets"),
    MixRow("long2-extensions-ngrams-em", "2 long-context + energy-direct + class-factored MLP1 + KN5 + class "
           "c = 500 + trigram, EM by context frequency",
           ("long-context", "long-context-seed1", "energy-direct", "mlp1-classes", *NGRAMS), "em-buckets"),
    MixRow("long3-extensions-ngrams-em", "3 long-context (seeds 0, 1; dropout 0.2) + energy-direct + class-factored "
           "MLP1 + KN5 + class c = 500 + trigram, EM by context frequency",
           ("long-context", "long-context-seed1", "long-context-dropout", "energy-direct", "mlp1-classes", *NGRAMS),
           "em-buckets"),
    MixRow("long4-extensions-ngrams-em", "4 long-context (seeds 0, 1; dropout 0.05, 0.2) + energy-direct + "
           "class-factored MLP1 + KN5 + class c = 500 + trigram, EM by context frequency",
           ("long-context", "long-context-seed1", "long-context-dropout", "long-context-dropout-seed1",
            "energy-direct", "mlp1-classes", *NGRAMS), "em-buckets"),
    # every n-gram of Table 1 beside them (built for Table 1 already): the class models of other sizes
    # bring what the nets and KN5 miss (valid 220.2 -> 217.0 in one fit; docs/experiments/beyond.md)
    MixRow("long4-extensions-allngrams-em", "4 long-context + energy-direct + class-factored MLP1 + every n-gram "
           "of Table 1 (KN 3-5, class c = 150-2000, trigram), EM by context frequency",
           ("long-context", "long-context-seed1", "long-context-dropout", "long-context-dropout-seed1",
            "energy-direct", "mlp1-classes", *NGRAM_PARTS), "em-buckets"),
    MixRow("long5-extensions-allngrams-em", "4 long-context + long-context n = 32 + energy-direct + class-factored "
           "MLP1 + every n-gram of Table 1, EM by context frequency",
           ("long-context", "long-context-seed1", "long-context-dropout", "long-context-dropout-seed1",
            "long-context-n32", "energy-direct", "mlp1-classes", *NGRAM_PARTS), "em-buckets"),
    MixRow("n32-ngrams-em", "long-context n = 32 + KN5 + class c = 500 + trigram, EM by context frequency",
           ("long-context-n32", *NGRAMS), "em-buckets"),
    MixRow("lstm-ngrams-em", "recurrent NPLM + KN5 + class c = 500 + trigram, EM by context frequency",
           ("lstm", *NGRAMS), "em-buckets"),
    MixRow("lstm-n32-allngrams-em", "recurrent NPLM + long-context n = 32 + every n-gram of Table 1, EM by context "
           "frequency", ("lstm", "long-context-n32", *NGRAM_PARTS), "em-buckets"),
    MixRow("lstm-tied-allngrams-em", "recurrent NPLM + tied long-context n = 256 + every n-gram of Table 1, EM by "
           "context frequency", ("lstm", "long-context-256-tied", *NGRAM_PARTS), "em-buckets"),
    MixRow("lstm-nets-allngrams-em", "recurrent NPLM + tied n = 256 + 4 long-context + n = 32 + energy-direct + "
           "class-factored MLP1 + every n-gram of Table 1, EM by context frequency",
           ("lstm", "long-context-256-tied", "long-context", "long-context-seed1", "long-context-dropout",
            "long-context-dropout-seed1", "long-context-n32", "energy-direct", "mlp1-classes", *NGRAM_PARTS),
           "em-buckets"),
    MixRow("ens-mlp1x2", "ensemble of 2 MLP1 (seeds 0-1), equal weights", MLP1_SEEDS[:2], "equal"),
    MixRow("ens-mlp1x3", "ensemble of 3 MLP1 (seeds 0-2), equal weights", MLP1_SEEDS[:3], "equal"),
    MixRow("mlp1-ngrams-em", "MLP1 + KN5 + class c = 500 + trigram, EM by context frequency",
           ("mlp1-seed0", *NGRAMS), "em-buckets"),
    MixRow("ens2-ngrams-em", "2 MLP1 + KN5 + class c = 500 + trigram, EM by context frequency",
           (*MLP1_SEEDS[:2], *NGRAMS), "em-buckets"),
    MixRow("ens3-trigram-em", "3 MLP1 + trigram, EM by context frequency", (*MLP1_SEEDS[:3], "interpolated"),
           "em-buckets"),
    MixRow("ens3-ngrams-em", "3 MLP1 + KN5 + class c = 500 + trigram, EM by context frequency",
           (*MLP1_SEEDS[:3], *NGRAMS), "em-buckets"),
)


def check_reference_place(place: str) -> None:
    if place not in REFERENCE_PLACES:
        raise NnlmError(f"--beyond-reference must be one of {', '.join(REFERENCE_PLACES)}, got {place!r}")


def with_reference(rows: tuple[Row, ...], place: str) -> tuple[Row, ...]:
    """`rows` with the LSTM reference first among the nets, last among them (before the mixes), or without it."""
    check_reference_place(place)
    kept = tuple(r for r in rows if not isinstance(r, ReferenceRow))
    if place == "none":
        return kept
    nets, mixes = tuple(r for r in kept if not isinstance(r, MixRow)), tuple(mixes_of(kept))
    return (LSTM_REFERENCE, *nets, *mixes) if place in ("first", "beside") else (*nets, LSTM_REFERENCE, *mixes)


def check_rows(rows: tuple[Row, ...]) -> None:
    """Row ids unique; a mix names rows before it (nets of the section) or Table 1's n-gram rows, never a
    reference."""
    seen: set[str] = set()
    references = {r.id for r in rows if isinstance(r, ReferenceRow)}
    for row in rows:
        if row.id in seen or row.id in NGRAM_PARTS:
            raise NnlmError(f"beyond row {row.id!r} is defined twice")
        if isinstance(row, MixRow):
            if row.weighting not in WEIGHTINGS:
                raise NnlmError(f"beyond row {row.id!r}: weighting {row.weighting!r} is not one of {WEIGHTINGS}")
            mixed = [p for p in row.parts if p in references]
            if mixed:
                raise NnlmError(f"beyond row {row.id!r} mixes {', '.join(mixed)}: a reference is not an nnlm net "
                                "and is not mixed")
            unknown = [p for p in row.parts if p not in seen and p not in NGRAM_PARTS]
            if unknown or len(row.parts) < 2:
                raise NnlmError(f"beyond row {row.id!r} mixes {', '.join(unknown) or 'fewer than 2 rows'}: "
                                "a mix names at least two nets defined before it or Table 1's n-gram rows")
        if isinstance(row, NetRow) and row.share is not None and not 0 < row.share <= 1:
            raise NnlmError(f"beyond row {row.id!r}: share {row.share!r} is not a share of the budget (0 to 1]")
        seen.add(row.id)


def nets_of(rows: tuple[Row, ...]) -> list[NetRow]:
    return [r for r in rows if isinstance(r, NetRow)]


def trained_of(rows: tuple[Row, ...]) -> list[NetRow | ReferenceRow]:
    """The rows that train, nets and reference, in the order they are planned (before every mix)."""
    return [r for r in rows if isinstance(r, (NetRow, ReferenceRow))]


def mixes_of(rows: tuple[Row, ...]) -> list[MixRow]:
    return [r for r in rows if isinstance(r, MixRow)]
