"""Which net a ModelConfig describes, and its LanguageModel adapter: the one place that chooses between the
NPLM with the paper's softmax over V (nnlm.neural.net.model), its class-factored version (`output_classes` > 0,
nnlm.neural.net.class_output), its tree output layer (`output_tree`, nnlm.neural.net.tree_output), the
section 5.1 energy network (`energy`, nnlm.neural.net.energy) and the section 6 recurrent net (`recurrent`,
nnlm.neural.net.recurrent). Every place
that builds a net from a config (training, parallel ranks, loading) asks here, so each kind goes through
the same training loop, checkpoints and commands without knowing which it is.
"""
from __future__ import annotations

import torch
from torch import nn

from nnlm.data.vocab import Vocabulary
from nnlm.lm import LanguageModel
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import EXACT, Scoring
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig

__all__ = ["build_net", "language_model"]


def build_net(config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> nn.Module:
    """A freshly initialised net of this architecture (torch's global RNG)."""
    if config.recurrent != "none":
        from nnlm.neural.net.recurrent import RecurrentNPLM

        return RecurrentNPLM(config, dropout_x, dropout_h)
    if config.energy:
        from nnlm.neural.net.energy import EnergyNPLM

        return EnergyNPLM(config, dropout_x, dropout_h)
    if config.output_classes:
        from nnlm.neural.net.class_output import ClassNPLM

        return ClassNPLM(config, dropout_x, dropout_h)
    if config.output_tree:
        from nnlm.neural.net.tree_output import TreeNPLM

        return TreeNPLM(config, dropout_x, dropout_h)
    return NPLM(config, dropout_x, dropout_h)


def language_model(net: nn.Module, vocab: Vocabulary, pad_token: str, device: str | torch.device = "cpu",
                   scoring: Scoring = EXACT) -> LanguageModel:
    """`net` (from `build_net`) behind the LanguageModel interface, scoring by `scoring` (nnlm.neural.lm.scoring):
    NeuralLM, ClassNeuralLM / TreeNeuralLM (always exact fp32 scoring), EnergyLM or RecurrentLM."""
    if net.config.recurrent != "none":
        from nnlm.neural.lm.recurrent_lm import RecurrentLM

        return RecurrentLM(net, vocab, pad_token, device, scoring)
    if net.config.energy:
        from nnlm.neural.net.energy import EnergyLM

        return EnergyLM(net, vocab, pad_token, device, scoring)
    if net.config.output_classes:
        from nnlm.neural.lm.class_lm import ClassNeuralLM

        return ClassNeuralLM(net, vocab, pad_token, device, scoring)
    if net.config.output_tree:
        from nnlm.neural.lm.class_lm import TreeNeuralLM

        return TreeNeuralLM(net, vocab, pad_token, device, scoring)
    return NeuralLM(net, vocab, pad_token, device, scoring)
