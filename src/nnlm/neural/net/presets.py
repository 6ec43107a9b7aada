"""Named nets: Table 1's (Brown) n, h, m and direct connections for MLP1 ... MLP10, Table 2's AP News
net (`apnews`), larger nets of the same feed-forward family that go past the paper (`BEYOND`,
issue 22; docs/experiments/beyond.md), the paper's own proposed extension (`EXTENSIONS`: `energy`, its
section 5.1 energy-minimization network, docs/experiments/energy.md, and its section 6 recurrent net, `lstm`
and `rnn`, docs/experiments/recurrent-nplm.md), and Table 1 nets with the
class-factored output layer (`CLASS_OUTPUT`: K = about sqrt(|V|) classes, nnlm.neural.net.class_output;
docs/experiments/class-output.md).

Even-numbered Table 1 nets are the odd net just before them, mixed 0.5/0.5 with the interpolated
trigram. The architecture is the same, so both names map to it here; the mixing itself is
done by the mixtures module, not by the network or its trainer.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from nnlm.errors import NnlmError
from nnlm.neural.net.model_config import ModelConfig

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

# Past the paper: ModelConfig fields (all but vocab_size), chosen on Brown's validation set
# (docs/experiments/beyond.md, "single nets"). With --loss sampled they train with recipe `sampled-large`.
# wide-context: n = 9 with the 4 nearest words concatenated and the 4 older ones as one learned weighted
# sum (--local 4), h = 200, m = 100; deep-context: the same with two hidden layers, layer norm, residual;
# long-context: deep-context seeing 11 words back (the 7 older ones as the learned sum); long-context-32-tied:
# long-context seeing 31 words back with tied output weights, U = C through a projection of the hidden layer onto
# the m features (docs/experiments/ff-net.md; trained with --dropout 0.2 there); long-context-256-tied: seeing 255
# words back, the 251 older ones in one sum weighted per feature (--sum-weights feature), tied (with --dropout 0.2
# --lr-factor 0.5 there: Brown test 197.4 = 0.642 x KN5).
BEYOND: dict[str, dict[str, Any]] = {
    "wide-context": dict(order=9, hidden=200, features=100, direct=True, local=4),
    "deep-context": dict(order=9, hidden=200, features=100, direct=True, local=4, layers=2, layer_norm=True,
                         residual=True),
    "long-context": dict(order=12, hidden=200, features=100, direct=True, local=4, layers=2, layer_norm=True,
                         residual=True),
    "long-context-32-tied": dict(order=32, hidden=200, features=100, direct=True, local=4, layers=2,
                                 layer_norm=True, residual=True, tied=True),
    "long-context-256-tied": dict(order=256, hidden=200, features=100, direct=True, local=4, layers=2,
                                  layer_norm=True, residual=True, tied=True, sum_weights="feature"),
}

# A Table 1 net with the class-factored output layer: name -> the net it factors.
CLASS_OUTPUT: dict[str, str] = {"mlp1-classes": "mlp1"}


def has_class_output(name: str) -> bool:
    """Whether the named preset has the class-factored output layer."""
    return name.lower() in CLASS_OUTPUT


# The paper's section 5.1: MLP1's n, h, m with the output word's features in the hidden layer and E's
# formula as the paper writes it (no direct connections); `energy-direct` keeps MLP1's direct connections
# (`--preset mlp1 --energy`), the better of the two on Brown's validation (docs/experiments/energy.md).
EXTENSIONS: dict[str, dict[str, Any]] = {
    "energy": dict(order=5, hidden=50, features=60, direct=False, energy=True),
    "energy-direct": dict(order=5, hidden=50, features=60, direct=True, energy=True),
    # its section 6 "recurrent network for longer context" (nnlm.neural.net.recurrent) in the shape of the LSTM
    # reference (nnlm.reproduce.lstm_reference): 2 layers of 200, tied, BPTT over 35 steps; `rnn`: tanh cells
    "lstm": dict(order=36, hidden=200, features=200, direct=False, layers=2, recurrent="lstm", tied=True),
    "rnn": dict(order=36, hidden=200, features=200, direct=False, layers=2, recurrent="rnn", tied=True),
}


def has_energy(name: str) -> bool:
    """Whether the named preset is an energy network (nnlm.neural.net.energy)."""
    return bool(EXTENSIONS.get(name.lower(), {}).get("energy"))


def preset(name: str, vocab_size: int) -> ModelConfig:
    """The ModelConfig of a named net (Table 1, BEYOND, EXTENSIONS or CLASS_OUTPUT) for `vocab_size` words."""
    key = name.lower()
    if key in BEYOND or key in EXTENSIONS:
        return ModelConfig(vocab_size=vocab_size, **(BEYOND.get(key) or EXTENSIONS[key]))
    if key in CLASS_OUTPUT:
        from nnlm.neural.net.output_clustering import default_class_count

        return dataclasses.replace(preset(CLASS_OUTPUT[key], vocab_size),
                                   output_classes=default_class_count(vocab_size))
    if key not in PRESETS:
        raise NnlmError(f"unknown preset {name!r}; choose from "
                        f"{', '.join([*PRESETS, *BEYOND, *EXTENSIONS, *CLASS_OUTPUT])}")
    n, h, m, direct = PRESETS[key]
    return ModelConfig(vocab_size=vocab_size, order=n, hidden=h, features=m, direct=direct)


def run_name(preset_name: str, config: ModelConfig) -> str:
    """The preset's name when the run has its shape; else the shape itself (n5-h50-m60-direct, with the
    variants after it: -l2-ln-res-local4), so that a run trained with its own --order/--hidden/--features
    (or variant options) is not reported as the preset it started from."""
    key = preset_name.lower()
    if (key in PRESETS or key in BEYOND or key in EXTENSIONS or key in CLASS_OUTPUT) \
            and preset(key, config.vocab_size) == config:
        return preset_name
    name = f"n{config.order}-h{config.hidden}-m{config.features}" + ("-direct" if config.direct else "")
    return name + (f"-l{config.layers}" if config.layers > 1 else "") + ("-ln" if config.layer_norm else "") \
        + ("-res" if config.residual else "") + (f"-local{config.local}" if config.local else "") \
        + (f"-sums{config.summaries}" if config.summaries > 1 else "") \
        + ("-featsum" if config.sum_weights == "feature" else "") \
        + (f"-classes{config.output_classes}" if config.output_classes else "") \
        + (f"-tree{config.output_tree}" if config.output_tree else "") \
        + ("-energy" if config.energy else "") + ("-shared-v" if config.energy_shared_v else "") \
        + (f"-{config.recurrent}" if config.recurrent != "none" else "") + ("-tied" if config.tied else "")
