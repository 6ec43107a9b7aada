"""The neural probabilistic language model (Bengio et al. 2003): model, presets, trainer, checkpoints.
(Names imported on first use, nnlm.lazy: the command-line parser reads nnlm.neural.config without torch.)"""
from __future__ import annotations

from nnlm.lazy import lazy_getattr

_EXPORTS = {"NPLM": "nnlm.neural.model", "ModelConfig": "nnlm.neural.model_config", "NeuralLM": "nnlm.neural.neural_lm",
            "PRESETS": "nnlm.neural.presets", "preset": "nnlm.neural.presets"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr("nnlm.neural", _EXPORTS, globals())
