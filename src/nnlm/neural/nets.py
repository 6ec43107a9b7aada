"""Which net a ModelConfig describes, and its LanguageModel adapter: the one place that chooses between the
NPLM (nnlm.neural.model) and the section 5.1 energy network (nnlm.neural.energy), so that training,
checkpoints and every command build either without knowing which.
"""
from __future__ import annotations

import torch
from torch import nn

from nnlm.data.vocab import Vocabulary
from nnlm.neural.energy import EnergyLM, EnergyNPLM
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM

__all__ = ["build_net", "language_model"]


def build_net(config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> nn.Module:
    """The net a config describes: an NPLM, or the energy network (config.energy)."""
    if config.energy:
        return EnergyNPLM(config, dropout_x, dropout_h)
    return NPLM(config, dropout_x, dropout_h)


def language_model(net: nn.Module, vocab: Vocabulary, pad_token: str, device: str | torch.device = "cpu",
                   unnormalized: bool = False, bf16: bool = False) -> NeuralLM:
    """`net` (from `build_net`) behind the LanguageModel interface: NeuralLM, or EnergyLM for an energy net."""
    if net.config.energy:
        return EnergyLM(net, vocab, pad_token, device, unnormalized, bf16)
    return NeuralLM(net, vocab, pad_token, device, unnormalized, bf16)
