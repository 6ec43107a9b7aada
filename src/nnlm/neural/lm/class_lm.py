"""A class-factored net (nnlm.neural.net.class_output) behind the LanguageModel interface.

`NeuralLM` with its scoring paths replaced by the exact factored one: log P(w | h) = log P(class | h)
+ log P(w | class, h), in blocks of SCORE_TOKENS contexts, each block's tokens grouped by class. It is
always exact and normalized, in fp32: the bf16 product and the direct connections' per-position
tables speed up the |V|-wide product, which this model does not compute, so a bf16 Scoring scores
exactly and no tables are built; an unnormalized Scoring (`--unnormalized`: one score without the
softmax sum) has no meaning here and is refused. The stateful API (begin_state/advance) takes the
LanguageModel default, which scores each step through `log_prob`; `distribution` is the whole factored
distribution.
"""
from __future__ import annotations

import numpy as np
import torch

from nnlm import threads
from nnlm.errors import NnlmError
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import EVAL_ROWS, Scoring
from nnlm.neural.net.class_output import ClassNPLM

SCORE_TOKENS = 16384  # contexts per block: a class's product is then large enough to run near GEMM rate


class ClassNeuralLM(NeuralLM):
    """A ClassNPLM as a LanguageModel (module docstring)."""

    def __init__(self, net: ClassNPLM, *args, **kwargs) -> None:
        if not isinstance(net, ClassNPLM):
            raise NnlmError("ClassNeuralLM scores a net with a class-factored output layer")
        super().__init__(net, *args, **kwargs)

    def check_scoring(self, scoring: Scoring) -> None:
        super().check_scoring(scoring)
        if not scoring.normalized:
            raise NnlmError("--unnormalized: this model's class-factored output layer is normalized exactly at "
                            "the cost of K + |V|/K scores per word; score it without --unnormalized")

    output_is_one_product = False  # states step through log_prob; no per-position tables

    @torch.no_grad()
    def _score_ids(self, ctx: torch.Tensor, targets: torch.Tensor, table: torch.Tensor) -> tuple[np.ndarray, None]:
        """(log P(target | context), None), float64, block by block (memory bounded, threads re-checked per
        block): the factored scores never form log Z."""
        self.net.eval()
        out = np.empty(len(targets), dtype=np.float64)
        for lo in range(0, len(targets), SCORE_TOKENS):
            threads.check()
            x = self.net.embed(ctx[lo:lo + SCORE_TOKENS], table)
            scores = self.net.target_log_probs_from_features(x, targets[lo:lo + SCORE_TOKENS])
            out[lo:lo + len(x)] = scores.double().cpu().numpy()
        return out, None

    @torch.no_grad()
    def log_partition(self, contexts: np.ndarray) -> np.ndarray:
        """log sum_w P(w | h) of the fp32 factored probabilities: 0 up to rounding (normalized by construction)."""
        ctx = self._check(contexts)
        self.net.eval()
        out = np.empty(len(ctx), dtype=np.float64)
        for lo in range(0, len(ctx), EVAL_ROWS):
            threads.check()
            out[lo:lo + EVAL_ROWS] = torch.logsumexp(self.net(ctx[lo:lo + EVAL_ROWS]).double(), 1).cpu().numpy()
        return out
