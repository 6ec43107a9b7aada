"""The word tree of the tree (hierarchical) output layer (nnlm.neural.net.tree_output): built once from the
training text when a run is created, and laid out as the arrays the net gathers along each word's path.

A tree is stored as one array, `parent` [2|V| - 1]: nodes 0 .. |V|-1 are the words (the leaves), the nodes
from |V| on are the inner nodes (2 .. B children each), parent[root] = -1 and the slots a tree with wider
nodes leaves unused are -2. Its shape depends on |V| alone, so it is a buffer of the net, saved with the
weights in model.safetensors and in checkpoints, and loaded with them.

Two trees (`--output-clustering`), both functions of the training text and B alone (no randomness):

- `frequency`: the B-ary Huffman tree of the training counts (+1, so a word never seen has a place). Its
  mean path over the training tokens is within one decision of the unigram entropy in base B: the fewest
  decisions per token of any tree, and a token's decisions are what it costs to train and to score.
- `exchange`: nested word classes. The exchange clustering of train into K classes (the class-factored
  layer's, nnlm.neural.net.output_clustering), then the exchange clustering of the class sequence into
  about sqrt(K) classes of classes, and so on while more than B would remain; each group (a class's words,
  a class of classes, the top) is joined by a Huffman tree of its counts. The upper decisions then pick
  groups of words that follow the same words, and the path stays near the entropy (Huffman in each group).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from nnlm.errors import NnlmError

UNUSED, ROOT = -2, -1


def node_slots(vocab_size: int) -> int:
    """The length of `parent`: a tree over |V| leaves whose inner nodes have >= 2 children has at most |V| - 1."""
    return 2 * vocab_size - 1


class _Builder:
    """Inner nodes made one Huffman join at a time (numbered from |V| on, in the order they are made)."""

    def __init__(self, vocab_size: int, branching: int) -> None:
        self.parent = np.full(node_slots(vocab_size), UNUSED, dtype=np.int64)
        self.next = vocab_size
        self.branching = branching

    def join(self, items: np.ndarray, weights: np.ndarray) -> tuple[int, float]:
        """The root of a B-ary Huffman tree over `items` (node ids) and its weight: the lightest are joined
        first, the first join taking ((n - 2) mod (B - 1)) + 2 of them so that every later one takes B (the
        classic padding with empty leaves, without them). A single item is its own root. Ties by node id."""
        if len(items) == 1:
            return int(items[0]), float(weights[0])
        heap = [(float(w), int(i)) for w, i in zip(weights, items, strict=True)]
        heapq.heapify(heap)
        take = (len(heap) - 2) % (self.branching - 1) + 2
        while len(heap) > 1:
            joined = [heapq.heappop(heap) for _ in range(min(take, len(heap)))]
            node, self.next = self.next, self.next + 1
            self.parent[[i for _, i in joined]] = node
            heapq.heappush(heap, (sum(w for w, _ in joined), node))
            take = self.branching
        weight, root = heap[0]
        return root, weight


def huffman_tree(counts: np.ndarray, branching: int, groupings: list[np.ndarray] = ()) -> np.ndarray:
    """`parent` of the tree over len(counts) words: each grouping in turn (grouping j gives the group of
    each item of level j: words first, then the groups of the level before) joins the items of every group
    by a Huffman tree of their counts + 1; the last level's roots are joined into the root."""
    v = len(counts)
    builder = _Builder(v, branching)
    items, weights, labels = np.arange(v), counts.astype(np.float64) + 1.0, np.arange(v)
    for groups in groupings:
        group_of = np.asarray(groups)[labels]
        order = np.argsort(group_of, kind="stable")
        labels, starts = np.unique(group_of[order], return_index=True)
        roots = [builder.join(items[part], weights[part]) for part in np.split(order, starts[1:])]
        items = np.array([r for r, _ in roots], dtype=np.int64)
        weights = np.array([w for _, w in roots])
    root, _ = builder.join(items, weights)
    builder.parent[root] = ROOT
    return builder.parent


def balanced_tree(vocab_size: int, branching: int) -> np.ndarray:
    """`parent` of a balanced tree over the word ids in order (B consecutive items a node, level after level;
    a last lone item goes up a level): the shape a fresh net starts with, until the run's tree is put in."""
    parent = np.full(node_slots(vocab_size), UNUSED, dtype=np.int64)
    items, after = np.arange(vocab_size), vocab_size
    while len(items) > 1:
        groups = np.arange(len(items)) // branching
        lone = len(items) % branching == 1
        joined = len(items) - 1 if lone else len(items)
        parent[items[:joined]] = after + groups[:joined]
        made = after + np.arange(groups[joined - 1] + 1)
        items, after = np.concatenate([made, items[joined:]]), after + len(made)
    parent[items[0]] = ROOT
    return parent


def word_tree(clustering: str, train: np.ndarray, vocab_size: int, branching: int, n_classes: int | None,
              progress: bool = False) -> np.ndarray:
    """The run's tree (module docstring): `parent` [2|V| - 1]. `n_classes`: the exchange tree's K."""
    counts = np.bincount(train, minlength=vocab_size)
    if clustering == "frequency":
        return huffman_tree(counts, branching)
    if clustering != "exchange":
        raise NnlmError(f"unknown --output-clustering {clustering!r}; choose from exchange, frequency")
    from nnlm.neural.net.output_clustering import output_classes
    from nnlm.wordclasses.exchange import exchange_clusters

    classes = output_classes("exchange", train, vocab_size, n_classes, progress)
    groupings, stream, k = [classes], classes[train], n_classes
    while (fewer := round(math.sqrt(k))) > branching and fewer >= 2:
        upper = exchange_clusters(stream, k, fewer).classes.astype(np.int64)
        groupings.append(upper)
        stream, k = upper[stream], fewer
    return huffman_tree(counts, branching, groupings)


@dataclass(frozen=True)
class TreeLayout:
    """What the net gathers, from `parent` (numpy; inner node j is node |V| + j):

    - `node_rows` [I, B-1]: the output rows (of b, W, U) of each inner node's children 1 .. B-1; child 0
      scores 0 (a softmax over k children has k - 1 free scores; with B = 2 the decision is a sigmoid).
      Padding (a node with fewer than B children) points at `spare` and is masked by `node_mask`.
    - `path_start` [|V|+1], `path_node`, `path_slot`: each word's decisions, root first (the inner node and
      which of its children), one run of entries a word.
    - `level_child`, `level_parent`, `level_edge`, `level_bounds`: the non-root nodes depth by depth (node
      id, parent's node id, edge = inner index x B + slot), for the whole distribution top-down."""

    branching: int
    node_rows: np.ndarray
    node_mask: np.ndarray
    path_start: np.ndarray
    path_node: np.ndarray
    path_slot: np.ndarray
    level_child: np.ndarray
    level_parent: np.ndarray
    level_edge: np.ndarray
    level_bounds: list[int]

    @property
    def max_depth(self) -> int:
        return len(self.level_bounds) - 1


def tree_layout(parent: np.ndarray, vocab_size: int) -> TreeLayout:
    """The layout of a stored tree, or NnlmError if `parent` is no tree over the |V| words (a damaged file)."""
    v, bad = vocab_size, "the model's output tree is damaged"
    parent = np.asarray(parent, dtype=np.int64)
    used = np.flatnonzero(parent != UNUSED)
    n_nodes = len(used)
    if len(parent) != node_slots(v) or n_nodes < v + 1 or not np.array_equal(used, np.arange(n_nodes)):
        raise NnlmError(f"{bad}: its nodes are not the {v} words and the inner nodes after them")
    parent = parent[:n_nodes]
    roots = np.flatnonzero(parent == ROOT)
    if len(roots) != 1 or roots[0] < v or parent[:v].min() < v or parent.max() >= n_nodes or parent.min() < ROOT:
        raise NnlmError(f"{bad}: it needs one inner root and a parent among the inner nodes for every other node")
    inner = n_nodes - v
    children = np.bincount(parent[parent >= 0] - v, minlength=inner)
    if children.min() < 2:
        raise NnlmError(f"{bad}: an inner node has fewer than two children")
    # slots: the children of a node in node-id order
    child_ids = np.flatnonzero(parent >= 0)
    order = child_ids[np.argsort(parent[child_ids], kind="stable")]
    first = np.concatenate([[0], np.cumsum(children)[:-1]])
    slot = np.zeros(n_nodes, dtype=np.int64)
    slot[order] = np.arange(len(order)) - np.repeat(first, children)
    branching = int(children.max())
    row_start = np.concatenate([[0], np.cumsum(children - 1)[:-1]])  # |V| - 1 rows in all
    node_mask = np.arange(1, branching)[None, :] < children[:, None]
    node_rows = np.where(node_mask, row_start[:, None] + np.arange(branching - 1)[None, :], v - 1)
    # depth by depth from the root (a loop over depths; a node not reached means a cycle)
    depth = np.full(n_nodes, -1, dtype=np.int64)
    depth[roots[0]] = 0
    frontier, levels = roots, [roots[:0]]
    while len(frontier):
        reached = np.zeros(n_nodes, dtype=bool)
        reached[frontier] = True
        nxt = child_ids[reached[parent[child_ids]]]
        if len(nxt) == 0:
            break
        depth[nxt] = len(levels)
        levels.append(nxt)
        frontier = nxt
    if depth.min() < 0:
        raise NnlmError(f"{bad}: some nodes do not hang from the root")
    level_child = np.concatenate(levels)
    level_bounds = [0, *np.cumsum([len(level) for level in levels[1:]]).tolist()]
    level_parent = parent[level_child]
    level_edge = (level_parent - v) * branching + slot[level_child]
    # each word's path, root first: its ancestors' chain, read upward and reversed
    lengths = depth[:v]
    path_start = np.concatenate([[0], np.cumsum(lengths)])
    ancestor = np.arange(v)
    path_node = np.empty(path_start[-1], dtype=np.int64)
    path_slot = np.empty(path_start[-1], dtype=np.int64)
    for step in range(int(lengths.max())):
        live = np.flatnonzero(lengths > step)
        at = path_start[live + 1] - 1 - step
        path_node[at] = parent[ancestor[live]] - v
        path_slot[at] = slot[ancestor[live]]
        ancestor[live] = parent[ancestor[live]]
    return TreeLayout(branching, node_rows, node_mask, path_start, path_node, path_slot,
                      level_child, level_parent, level_edge, level_bounds)
