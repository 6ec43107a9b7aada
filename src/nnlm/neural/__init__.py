"""The neural probabilistic language model (Bengio et al. 2003), in four packages: the network (net/), a training
run from options to checkpoints (run/), parallel training (parallel/), and a trained net as a LanguageModel (lm/).
(Names imported on first use, nnlm.lazy: the command-line parser reads nnlm.neural.run.config without torch.)"""
from __future__ import annotations

from nnlm.lazy import lazy_getattr

_EXPORTS = {"NPLM": "nnlm.neural.net.model", "ModelConfig": "nnlm.neural.net.model_config",
            "NeuralLM": "nnlm.neural.lm.neural_lm",
            "PRESETS": "nnlm.neural.net.presets", "preset": "nnlm.neural.net.presets"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr("nnlm.neural", _EXPORTS, globals())
