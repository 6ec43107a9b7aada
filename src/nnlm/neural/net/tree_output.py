"""The tree (hierarchical) output layer: P(w | h) = the product of the decisions on the path from the root of a
word tree to w, each an exact softmax over the children of a node, with the paper's y = b + W x + U a.

The paper (section 6) names it as the way to a speed-up of about |V| / log |V|: a word costs the rows of
its path's decisions instead of all |V| rows. A node with k children has k - 1 output rows (child 0 scores
0: a softmax is unchanged by a shift, so k - 1 scores are all it has; a binary node is a sigmoid), so the
whole tree has |V| - 1 rows, kept in the net's b, W, U of |V| rows (the last is a spare one, where padding
points). The tree (nnlm.neural.net.output_tree: Huffman over the counts, or nested exchange classes) is
the buffer `tree_parent`, saved with the weights; its layout is recomputed from it after a load.

Every product of decisions is normalized, so the probabilities sum to 1 over V for every context by
construction (tests check it numerically). Training and exact scoring gather along the targets' paths:
one entry per (token, decision), all tokens at once -- no loop over tokens, nodes or classes -- and a
token costs its path's decisions (about the entropy in base B with the Huffman trees). `forward` returns
log P over all of V in word-id order (the whole distribution: one |V|-wide product, then the decisions'
log-probabilities summed top-down, a loop over depths): softmax(forward(.)) is the model's distribution.
"""
from __future__ import annotations

import torch
from torch import nn

from nnlm.errors import NnlmError
from nnlm.neural.net.model import NPLM, NPLMParameters
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.normalized_output import NormalizedOutput
from nnlm.neural.net.output_tree import balanced_tree, node_slots, tree_layout

LAYOUT = ("node_rows", "node_mask", "path_start", "path_node", "path_slot", "level_child", "level_parent",
          "level_edge")  # the layout's tensors: non-persistent buffers, recomputed from tree_parent


class TreeNPLM(NormalizedOutput, NPLM):
    """The NPLM with a tree output layer (module docstring). It starts with a balanced tree over the word
    ids, until `set_tree` puts the run's in (before training)."""

    layer_name = "a tree output layer"

    def __init__(self, config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        if not config.output_tree:
            raise NnlmError("TreeNPLM needs a config with output_tree (the branching) >= 2")
        super().__init__(config, dropout_x, dropout_h)
        v = config.vocab_size
        self.register_buffer("tree_parent", torch.zeros(node_slots(v), dtype=torch.int64))
        for name in LAYOUT:
            self.register_buffer(name, torch.zeros(0, dtype=torch.int64), persistent=False)
        self.branching = 2
        self.level_bounds: list[int] = [0]
        self.register_load_state_dict_post_hook(_layout_after_load)
        self.set_tree(balanced_tree(v, config.output_tree))

    @torch.no_grad()
    def set_tree(self, parent) -> None:
        """Put in the tree (`parent`, nnlm.neural.net.output_tree), and its layout."""
        self.tree_parent.copy_(torch.as_tensor(parent, dtype=torch.int64))
        self._refresh_layout()

    @torch.no_grad()
    def _refresh_layout(self) -> None:
        parent = self.tree_parent
        if parent.device.type == "meta":
            return
        layout = tree_layout(parent.cpu().numpy(), self.config.vocab_size)
        if layout.branching > self.config.output_tree:
            raise NnlmError(f"the model's output tree has a node of {layout.branching} children, more than its "
                            f"branching {self.config.output_tree}")
        for name in LAYOUT:
            setattr(self, name, torch.as_tensor(getattr(layout, name)).to(parent.device))
        self.branching, self.level_bounds = layout.branching, layout.level_bounds

    # --- the decisions along the targets' paths ------------------------------------------------------

    def decisions(self, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(token, inner node, slot) [P] of every decision on the paths of `targets` [N], token-major."""
        lengths = self.path_start[targets + 1] - self.path_start[targets]
        token = torch.repeat_interleave(torch.arange(len(targets), device=targets.device), lengths)
        before = torch.cumsum(lengths, 0) - lengths
        at = torch.arange(len(token), device=targets.device) + (self.path_start[targets] - before)[token]
        return token, self.path_node[at], self.path_slot[at]

    def target_log_probs_from_features(self, x: torch.Tensor, targets: torch.Tensor, rows_only=None) -> torch.Tensor:
        """log P(target | h) [N] (dropout when training): each decision's log softmax over its node's
        children at the path's child, summed per token. `rows_only` (a ClassRowLoss, for RowAdam): b, W, U
        are read through leaves holding just the rows the batch's decisions use, recorded in its
        `touched`, so that neither backward nor the update costs |V| rows."""
        zs, _ = self.output_operands_from_features(x)
        token, node, slot = self.decisions(targets)
        rows = self.node_rows[node]  # [P, B-1]
        b, weights = self.b, [w for w in (self.W, self.U) if w is not None]
        if rows_only is not None:
            b, weights, rows = _touched_leaves(self, rows_only, rows)
        from nnlm.neural.net import tree_kernel  # (numba: imported where used)

        if tree_kernel.applies([b, *weights, *zs]):  # exact scoring: one compiled pass (tree_kernel)
            y = tree_kernel.decision_scores(b, weights, zs, rows, token)
        else:  # a product and a sum (torch.bmm of [1, K] x [K, 1] matrices took 2x the step in its backward)
            y = b[rows]
            for z, w in zip(zs, weights, strict=True):
                y = y + (w[rows] * z.index_select(0, token)[:, None, :]).sum(2)
        return torch.zeros(len(targets), dtype=y.dtype, device=y.device).index_add_(
            0, token, self._chosen_log_probs(y, node, slot))

    def _chosen_log_probs(self, y: torch.Tensor, node: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """log softmax([0, y]) at `slot`, [P] (a binary node: log sigmoid of +-y)."""
        if self.branching == 2:
            return nn.functional.logsigmoid(torch.where(slot == 1, y[:, 0], -y[:, 0]))
        y = y.masked_fill(~self.node_mask[node], -torch.inf)
        scores = torch.cat([y.new_zeros(len(y), 1), y], dim=1)
        return scores.gather(1, slot[:, None])[:, 0] - torch.logsumexp(scores, dim=1)

    def log_probs_from_features(self, x: torch.Tensor) -> torch.Tensor:
        """log P(w | h) for every word, [N, |V|] in word-id order: all |V| - 1 scores (one product), each
        node's log softmax, and each node's log-probability its parent's plus its edge's, depth by depth."""
        y = NPLMParameters.logits_from_features(self, x)  # [N, |V|] (the spare row's score unused)
        n, inner = len(x), len(self.node_rows)
        scores = y[:, self.node_rows.flatten()].view(n, inner, -1).masked_fill(~self.node_mask, -torch.inf)
        scores = torch.cat([y.new_zeros(n, inner, 1), scores], dim=2)
        edges = (scores - torch.logsumexp(scores, dim=2, keepdim=True)).flatten(1)
        node_lp = y.new_zeros(n, self.config.vocab_size + inner)
        for lo, hi in zip(self.level_bounds[:-1], self.level_bounds[1:], strict=True):
            child = self.level_child[lo:hi]
            node_lp[:, child] = node_lp[:, self.level_parent[lo:hi]] + edges[:, self.level_edge[lo:hi]]
        return node_lp[:, :self.config.vocab_size]


def _touched_leaves(net: TreeNPLM, rows_only, rows: torch.Tensor):
    """(b, [W, U], rows) read through leaves of the distinct rows `rows` uses, recorded in rows_only.touched
    as (name, rows, leaf) for RowAdam (nnlm.neural.net.sampled), and `rows` renumbered into them."""
    distinct, inverse = torch.unique(rows, return_inverse=True)
    names = ["b"] + [name for name in ("W", "U") if getattr(net, name) is not None]
    leaves = []
    for name in names:
        if rows_only.before_read is not None:
            rows_only.before_read(name, distinct)
        leaf = getattr(net, name).detach().index_select(0, distinct).requires_grad_()
        rows_only.touched.append((name, distinct, leaf))
        leaves.append(leaf)
    return leaves[0], leaves[1:], inverse


def _layout_after_load(net: TreeNPLM, _keys) -> None:
    """After load_state_dict: the layout of the tree just loaded (a function, so the net pickles)."""
    net._refresh_layout()


def tree_output_loss(net: TreeNPLM, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean -log P(target | context) of a batch, fp32 (dense gradients: the paper's SGD, dense Adam)."""
    return -net.target_log_probs_from_features(net.features(contexts), targets).mean()
