"""A class-factored net (nnlm.neural.net.class_output) or a tree one (nnlm.neural.net.tree_output) behind the
LanguageModel interface.

`NeuralLM` with its scoring paths replaced by the exact factored one: log P(w | h) = log P(class | h)
+ log P(w | class, h), in blocks of SCORE_TOKENS contexts, each block's tokens grouped by class. It is
always exact and normalized, in fp32: the bf16 product and the direct connections' per-position
tables speed up the |V|-wide product, which this model does not compute, so a bf16 Scoring scores
exactly and no tables are built; an unnormalized Scoring (`--unnormalized`: one score without the
softmax sum) has no meaning here and is refused. The stateful API (begin_state/advance) takes the
LanguageModel default, which scores each step through `log_prob`; `distribution` is the whole factored
distribution. TreeNeuralLM is the same for the tree output layer: the product of the decisions on the path.
"""
from __future__ import annotations

import numpy as np
import torch

from nnlm import threads
from nnlm.errors import NnlmError
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import EVAL_ROWS, Scoring
from nnlm.neural.net.class_output import ClassNPLM
from nnlm.neural.net.tree_output import TreeNPLM

SCORE_TOKENS = 16384  # contexts per block: a class's product is then large enough to run near GEMM rate
TREE_SCORE_TOKENS = 2048  # a tree's block gathers its paths' rows (~ tokens x path x (n-1)m + h floats): ~25 MB


class ClassNeuralLM(NeuralLM):
    """A ClassNPLM as a LanguageModel (module docstring)."""

    net_class, layer, cost, score_tokens = ClassNPLM, "class-factored", "K + |V|/K scores", SCORE_TOKENS

    def __init__(self, net: ClassNPLM, *args, **kwargs) -> None:
        if not isinstance(net, self.net_class):
            raise NnlmError(f"{type(self).__name__} scores a net with a {self.layer} output layer")
        super().__init__(net, *args, **kwargs)

    def check_scoring(self, scoring: Scoring) -> None:
        super().check_scoring(scoring)
        if not scoring.normalized:
            raise NnlmError(f"--unnormalized: this model's {self.layer} output layer is normalized exactly at "
                            f"the cost of {self.cost} per word; score it without --unnormalized")

    output_is_one_product = False  # states step through log_prob; no per-position tables

    @torch.no_grad()
    def _score_ids(self, ctx: torch.Tensor, targets: torch.Tensor, table: torch.Tensor) -> tuple[np.ndarray, None]:
        """(log P(target | context), None), float64, block by block (memory bounded, threads re-checked per
        block): the factored scores never form log Z."""
        self.net.eval()
        out = np.empty(len(targets), dtype=np.float64)
        block = self.score_tokens
        for lo in range(0, len(targets), block):
            threads.check()
            x = self.net.embed(ctx[lo:lo + block], table)
            scores = self.net.target_log_probs_from_features(x, targets[lo:lo + block])
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


class TreeNeuralLM(ClassNeuralLM):
    """A TreeNPLM as a LanguageModel: ClassNeuralLM's exact paths, each target scored along its tree path."""

    net_class, layer, cost, score_tokens = TreeNPLM, "tree", "its path's decisions", TREE_SCORE_TOKENS
