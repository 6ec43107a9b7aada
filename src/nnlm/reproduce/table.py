"""Table 1 of Bengio et al. (2003): its rows, the paper's figures, and the order they are built in.

The nets' architectures come from `nnlm.neural.net.presets` (one source of truth); this module only
adds what the paper reports for them and how the report labels them."""
from __future__ import annotations

from dataclasses import dataclass

from nnlm.errors import NnlmError
from nnlm.neural.net.presets import PRESETS

PAPER_BEST_NGRAM_TEST = 312.0  # class-based back-off, c = 500 (Table 1)
DEFAULT_MODELS = ("mlp1", "mlp3")
ALL_MODELS = ("mlp1", "mlp3", "mlp5", "mlp7", "mlp9")


@dataclass(frozen=True)
class Row:
    id: str
    label: str
    n: int
    paper: tuple[float | None, float | None, float | None]  # train, valid, test
    h: int | None = None
    m: int | None = None
    direct: bool | None = None
    mix: str = ""  # "", "0.5" (the paper's mix) or "EM"
    net: str = ""  # the net a neural or mix row is built from
    partner: str = ""  # the n-gram row a mix row mixes the net with ("": the interpolated trigram)


@dataclass(frozen=True)
class NgramRow(Row):
    kind: str = ""
    classes: int | None = None


NGRAM_ROWS: tuple[NgramRow, ...] = (
    NgramRow("interpolated", "deleted interpolation trigram", 3, (31, 352, 336), kind="interpolated"),
    NgramRow("kn3", "Kneser-Ney back-off", 3, (None, 334, 323), kind="kn"),
    NgramRow("kn4", "Kneser-Ney back-off", 4, (None, 332, 321), kind="kn"),
    NgramRow("kn5", "Kneser-Ney back-off", 5, (None, 332, 321), kind="kn"),
    *(NgramRow(f"class{c}-3", f"class-based back-off, c = {c}", 3, (None, v, t), kind="class", classes=c)
      for c, v, t in ((150, 348, 334), (200, 354, 340), (500, 326, 312), (1000, 335, 319), (2000, 343, 326))),
    NgramRow("class500-4", "class-based back-off, c = 500", 4, (None, 327, 312), kind="class", classes=500),
    NgramRow("class500-5", "class-based back-off, c = 500", 5, (None, 327, 312), kind="class", classes=500),
)

# Before the nets: the mixing partner, Kneser-Ney (the ratios' usual denominator), and the paper's
# best n-gram c = 500 (one clustering for its three orders). The other class counts are the slowest
# rows and the least telling: they come after the nets and get what the nets leave.
NGRAM_BUILD_ORDER = ("interpolated", "kn3", "kn4", "kn5", "class500-3", "class500-4", "class500-5")
NGRAM_AFTER_NETS = ("class150-3", "class200-3", "class1000-3", "class2000-3")

# The paper's figures for each net: (train, valid, test) alone, (valid, test) mixed 0.5 with the trigram.
PAPER_NETS: dict[str, tuple[tuple[float, float, float], tuple[float, float]]] = {
    "mlp1": ((182, 284, 268), (275, 257)),
    "mlp3": ((201, 327, 310), (286, 272)),
    "mlp5": ((209, 296, 279), (273, 259)),
    "mlp7": ((210, 309, 293), (284, 270)),
    "mlp9": ((175, 280, 276), (265, 252)),
}


def mlp_rows(name: str) -> tuple[Row, Row, Row]:
    """The net alone, its paper mix (0.5 with the interpolated trigram, MLP k+1), and an EM mix."""
    n, h, m, direct = PRESETS[name]
    alone, mixed = PAPER_NETS[name]
    k = int(name[3:])
    base = dict(n=n, h=h, m=m, direct=direct, net=name)
    return (Row(name, f"MLP{k}", paper=alone, **base),
            Row(f"mlp{k + 1}", f"MLP{k + 1} (MLP{k} + trigram, 0.5)", paper=(None, *mixed), mix="0.5", **base),
            Row(f"mlp{k}-em", f"MLP{k} + trigram, EM weights by context frequency", paper=(None, None, None), mix="EM",
                **base))


def parse_models(text: str | None, full: bool) -> list[str]:
    """'mlp1,mlp3' -> nets to train; an even name (a mix row) asks for the net it mixes."""
    if text is None:
        return list(ALL_MODELS if full else DEFAULT_MODELS)
    nets: list[str] = []
    for name in (t.strip().lower() for t in text.split(",") if t.strip()):
        if not (name.startswith("mlp") and name[3:].isdigit() and 1 <= int(name[3:]) <= 10):
            raise NnlmError(f"unknown model {name!r} in --models; choose from mlp1 ... mlp10")
        k = int(name[3:])
        net = f"mlp{k if k % 2 else k - 1}"
        if net not in nets:
            nets.append(net)
    if not nets:
        raise NnlmError("--models names no model")
    return nets


def table_rows(nets: list[str]) -> list[Row]:
    """The report's rows in order: each net with its two mixes, then the n-gram rows."""
    return [row for net in nets for row in mlp_rows(net)] + list(NGRAM_ROWS)
