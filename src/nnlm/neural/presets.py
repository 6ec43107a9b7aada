"""The paper's neural nets: n, h, m and direct connections for Table 1's MLP1 ... MLP10 (Brown) and
Table 2's AP News net (`apnews`).

Even-numbered nets are the odd net just before them, mixed 0.5/0.5 with the interpolated
trigram. The architecture is the same, so both names map to it here; the mixing itself is
done by the mixtures module, not by the network or its trainer.
"""
from __future__ import annotations

from nnlm.errors import NnlmError
from nnlm.neural.model import ModelConfig

_TABLE1 = {  # name: (n, h, m, direct)
    "mlp1": (5, 50, 60, True),
    "mlp3": (5, 0, 60, True),
    "mlp5": (5, 50, 30, True),
    "mlp7": (3, 50, 30, True),
    "mlp9": (5, 100, 30, False),
}
for _k in (1, 3, 5, 7, 9):
    _TABLE1[f"mlp{_k + 1}"] = _TABLE1[f"mlp{_k}"]

PRESETS: dict[str, tuple[int, int, int, bool]] = dict(sorted(_TABLE1.items(), key=lambda kv: int(kv[0][3:])))
PRESETS["apnews"] = (6, 60, 100, True)  # Table 2's net (AP News), mixed with the trigram there
MIXED = frozenset(f"mlp{k}" for k in (2, 4, 6, 8, 10))


def preset(name: str, vocab_size: int) -> ModelConfig:
    """The ModelConfig of a Table 1 net for a vocabulary of `vocab_size` words."""
    key = name.lower()
    if key not in PRESETS:
        raise NnlmError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    n, h, m, direct = PRESETS[key]
    return ModelConfig(vocab_size=vocab_size, order=n, hidden=h, features=m, direct=direct)


def run_name(preset_name: str, config: ModelConfig) -> str:
    """The preset's name when the run has its shape; else the shape itself (n5-h50-m60-direct), so that a
    run trained with its own --order/--hidden/--features is not reported as the preset it started from."""
    shape = (config.order, config.hidden, config.features, config.direct)
    if PRESETS.get(preset_name.lower()) == shape:
        return preset_name
    return f"n{config.order}-h{config.hidden}-m{config.features}" + ("-direct" if config.direct else "")
