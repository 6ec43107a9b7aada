"""Table 2 of Bengio et al. (2003), AP News: its rows and the paper's figures.

The paper trained one net there (n = 6, h = 60, m = 100, direct connections; preset `apnews`) and
reports it only mixed with the trigram; the n-gram rows are deleted interpolation and Kneser-Ney
back-off of orders 3 to 5. No class-based rows: the paper did not run them on AP News."""
from __future__ import annotations

from nnlm.errors import NnlmError
from nnlm.neural.net.presets import PRESETS
from nnlm.reproduce.table import NgramRow, Row

NET = "apnews"
PAPER_BEST_NGRAM_TEST = 117.0  # Kneser-Ney back-off, n = 5 (Table 2)
# The least training that earns the net a row: a tenth of an AP-News-sized epoch (1.4M examples) is
# more than a whole Brown epoch; Table 1's half epoch would be hours on a shared machine.
NET_FLOOR_EPOCHS = 0.1
# The net's shapes, in order of preference (`nnlm.reproduce.shape_plan` picks among them by measured rates).
# With a natural vocabulary (|V| > 100k) the direct connections make exact scoring cost |V| (h + (n-1) m)
# multiply-adds a token (66 M at 117k: tens of minutes for valid and test on 2 cores) and their per-position
# tables ((n-1) |V|^2 floats) do not fit; without them it is |V| h, 9x less at h = 60. The sampled loss
# trains all of these at nearly the same rate whatever |V| (docs/large-vocab.md), so a shape without direct
# connections can afford a wider hidden layer (h = 120: |V| h still 4.5x below the preset's scoring).
# Last, the class-factored output layer (K ~ sqrt(|V|) frequency classes, trained with the full softmax's
# loss, scored exactly through its two softmaxes): cheap to score, but 2.9x slower to train at 119k.
CLASS_OUTPUT = {"output_layer": "classes", "output_clustering": "frequency", "loss": "full"}
WIDE_NO_DIRECT = {"direct": False, "hidden": 120}
NET_SHAPES: tuple[dict, ...] = ({}, WIDE_NO_DIRECT, {"direct": False}, CLASS_OUTPUT)

NGRAM_ROWS: tuple[NgramRow, ...] = (
    NgramRow("interpolated", "deleted interpolation trigram", 3, (None, 126, 132), kind="interpolated"),
    NgramRow("kn3", "Kneser-Ney back-off", 3, (None, 121, 127), kind="kn"),
    NgramRow("kn4", "Kneser-Ney back-off", 4, (None, 113, 119), kind="kn"),
    NgramRow("kn5", "Kneser-Ney back-off", 5, (None, 112, 117), kind="kn"),
)


def net_rows(net: str) -> tuple[Row, ...]:
    """The AP News net alone (no paper figure), mixed 0.5 with the trigram (104 / 109), an EM mix with it,
    and an EM mix with KN5 (the best n-gram: what --beyond gives Brown)."""
    n, h, m, direct = PRESETS[net]
    base = dict(n=n, h=h, m=m, direct=direct, net=net)
    return (Row(net, "MLP (AP News net)", paper=(None, None, None), **base),
            Row(f"{net}-mix", "MLP + trigram, 0.5", paper=(None, 104, 109), mix="0.5", **base),
            Row(f"{net}-em", "MLP + trigram, EM weights by context frequency", paper=(None, None, None), mix="EM",
                **base),
            Row(f"{net}-kn5-em", "MLP + KN5, EM weights by context frequency", paper=(None, None, None), mix="EM",
                partner="kn5", **base))


def parse_nets(text: str | None, full: bool) -> list[str]:
    """Table 2 has one net: --models may name only it."""
    if text is not None and {t.strip().lower() for t in text.split(",") if t.strip()} != {NET}:
        raise NnlmError(f"--table apnews trains one net, {NET!r}; --models {text!r} names others")
    return [NET]
