"""Which net, and which LanguageModel adapter, a ModelConfig needs: the NPLM with the paper's softmax
over V, or its class-factored version (`output_classes` > 0, nnlm.neural.class_output). Every place
that builds a net from a config (training, parallel ranks, loading) asks here, so both kinds go
through the same training loop, checkpoints and commands.
"""
from __future__ import annotations

import torch

from nnlm.data.vocab import Vocabulary
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM


def build_net(config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> NPLM:
    """A freshly initialised net of this architecture (torch's global RNG)."""
    if config.output_classes:
        from nnlm.neural.class_output import ClassNPLM

        return ClassNPLM(config, dropout_x, dropout_h)
    return NPLM(config, dropout_x, dropout_h)


def language_model(net: NPLM, vocab: Vocabulary, pad_token: str, device: str | torch.device = "cpu",
                   bf16: bool = False) -> NeuralLM:
    """`net` as a LanguageModel (a class-factored net always scores exactly, in fp32)."""
    if net.config.output_classes:
        from nnlm.neural.class_lm import ClassNeuralLM

        return ClassNeuralLM(net, vocab, pad_token, device=device)
    return NeuralLM(net, vocab, pad_token, device=device, bf16=bf16)
