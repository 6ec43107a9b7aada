"""The neural probabilistic language model (Bengio et al. 2003): model, presets, trainer, checkpoints."""
from nnlm.neural.model import NPLM, ModelConfig, NeuralLM
from nnlm.neural.presets import PRESETS, preset

__all__ = ["NPLM", "ModelConfig", "NeuralLM", "PRESETS", "preset"]
