"""What every net whose output layer gives log P(w | context) over V directly shares: the class-factored
layer (nnlm.neural.net.class_output) and the word tree (nnlm.neural.net.tree_output). Their scores are
normalized by construction (products of exact softmaxes), so the forward pass is `log_probs_from_features`
itself, and no single unnormalized score per word exists to read."""
from __future__ import annotations

import torch

from nnlm.errors import NnlmError


class NormalizedOutput:
    """Mixed in before NPLM by a net that defines `log_probs_from_features(x) -> [N, |V|]` and names its
    layer in `layer_name` (for the one-line refusal of unnormalized scoring)."""

    layer_name = "this output layer"

    def forward(self, contexts: torch.Tensor) -> torch.Tensor:
        """log P [N, |V|] of the next word (normalized: softmax of it is itself exponentiated)."""
        return self.log_probs_from_features(self.features(contexts))

    def expected_features(self, contexts: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i C(i) P(i | context), [N, m]: the paper's feature vector for a word outside V."""
        log_probs = self.log_probs_from_features(self.features(contexts) if x is None else x)
        return log_probs.double().exp().to(self.C.dtype) @ self.C

    def target_logits(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NnlmError(f"{self.layer_name} has no single score per word to read unnormalized")
