"""The architecture of one net (`ModelConfig`): the paper's n, h, m and direct connections, and the
variants of the same feed-forward family that go past it (issue 22).

Every variant field has a default that is the paper's net, and `to_dict` leaves out the fields at
their default, so a paper net's config (run.json, model JSON) is written as before and an old config
(without the variant fields) loads as the paper net it was.

- `layers`: hidden layers of h units; layer l > 1 computes tanh(d_l + H_l a_{l-1}) from the one before.
- `layer_norm`: each hidden layer normalises H_l a before its bias and tanh, tanh(g_l * norm(H_l a) + d_l).
- `residual`: hidden layers l > 1 add their input back, a_l = a_{l-1} + tanh(...) (needs layers >= 2).
- `local`: 0 concatenates the features of all n-1 context words (the paper); k > 0 concatenates only the
  k nearest, and the n-1-k older words enter as one m-vector, a learned weighted sum of their features
  (weights A, one per position, starting at the average): a wide context for the price of one more word,
  the cheap second branch of Sun & Iyyer (2021, "Revisiting Simple Neural Probabilistic Language Models").
- `summaries`: with `local`, the older words enter as K such learned sums (K m-vectors, rows of A [K, n-1-k]),
  starting as averages over all of them, the nearest half, quarter, ...: Sun & Iyyer's several kernels, so
  one sum can follow the topic of a long window while another keeps the last sentence.
- `sum_weights`: with `local`, "position" weighs each older word's features by one number per position (A
  [n-1-k]); "feature" by one number per position and feature (A [n-1-k, m], starting at the average), so each
  feature has its own reach into the past, as the vectorised memory of a feed-forward sequential memory network
  (Zhang et al. 2015): -1.7% validation perplexity on Brown at n = 64 for 5,900 numbers (docs/experiments/ff-net.md).
- `output_classes`: 0 is the paper's softmax over V; K > 0 factors the output layer through K word classes,
  P(w | h) = P(class(w) | h) P(w | class(w), h), each factor an exact softmax with the paper's
  y = b + W x + U a (nnlm.neural.net.class_output): O(K + |V|/K) per word instead of O(|V|).
- `energy`: the paper's energy-minimization network (its section 5.1; nnlm.neural.net.energy): the candidate
  output word's features enter the hidden layer too, and P(w | context) is the softmax of -E(w, context),
  E = v_w . tanh(d + H x + H_0 C(w)) + b_w (+ W_w . x with direct connections). One hidden layer, all
  n-1 context words concatenated.
- `energy_shared_v`: the energy net with one v for every word (h numbers) instead of v_w (|V| x h).
- `class_context`: 0 is the paper's x; K > 0 appends a learned row P[c1 K + c2] of K numbers to x for the
  pair of word classes (c1, c2) of the last two context words (the net's `context_class` map, K classes):
  the class trigram's history given to the net as a feature, so a table of K^2 class pairs needs no
  hidden units to carve it out of sums of word features. K numbers a row (not m) because with them the
  direct connections alone can hold any table of K^2 x K class logits (W_c . P[pair]); on gen-2k m-wide rows
  (m = 30 < K = 45) stopped 4% short (docs/recipes.md, "Class-pair features, classes refined by trigrams").
- `recurrent`: "none" is the feed-forward net; "lstm" or "rnn" (tanh) is the paper's section 6 "recurrent
  network for longer context" (nnlm.neural.net.recurrent): C(w_{t-1}) enters a recurrent state of `layers`
  layers of h units that carries the whole text read so far; y = b + U a_t (+ W C(w_{t-1})). n - 1 is then
  the truncation of back-propagation through time and the window a context row is read over.
- `tied`: the output weights U are C itself (Press & Wolf 2017): a word's input features are its output row.
  A recurrent net needs h = m; the feed-forward NPLM (full softmax, hidden layer) with h != m ends its hidden
  layers with a learned projection Q (m x h, no bias), so y = b + W x + C Q a: |V| h parameters fewer.
- `output_tree`: 0 is the paper's softmax over V; B >= 2 makes the output layer a tree of words with at most
  B children a node, P(w | h) the product of the softmaxes along w's path (nnlm.neural.net.tree_output): about
  (B - 1) log_B |V| rows per word. Its |V| - 1 rows live in the |V| rows of b, W, U (the count is the paper's).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from nnlm.bounds import Bounds, declare, value_error
from nnlm.errors import NnlmError

REQUIRED = ("vocab_size", "order", "hidden", "features", "direct")
VARIANTS = ("layers", "layer_norm", "residual", "local", "summaries", "sum_weights", "output_classes", "energy",
            "energy_shared_v", "class_context", "recurrent", "tied", "output_tree")  # optional in a stored config
# The limits of the architecture, declared once: ModelConfig's fields and the training options that set them
# (nnlm.neural.run.config.RunOptions: --order, --hidden, ...; run.json's schema) share these.
VOCAB = Bounds(2, integer=True)
ORDER = Bounds(2, 256, integer=True)  # 256: the wide-context nets (docs/experiments/ff-net.md)
HIDDEN = Bounds(0, 100_000, integer=True)  # 0: no hidden layer
FEATURES = Bounds(1, 100_000, integer=True)
LAYERS = Bounds(1, 16, integer=True)
LOCAL = Bounds(0, 64, integer=True)  # 0: every context word concatenated
SUMMARIES = Bounds(1, 16, integer=True)  # the learned sums of the older words (with local > 0)
SUM_WEIGHTS = ("position", "feature")  # the older words' sum: a weight per position, or per position and feature
CLASSES = Bounds(2, 1 << 24, integer=True)  # K of the class-factored output and of the class-pair features
RECURRENT_CELLS = ("none", "lstm", "rnn")  # the feed-forward net, or the recurrent state's cell
BRANCHING = Bounds(2, 1024, integer=True)  # B of the tree output layer: children of a node at most


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one net: |V|, order n, hidden units h, features per word m, direct connections,
    and the variant fields (module docstring); the defaults are the paper's net. Each field's type and
    limits are its declaration (the command line's own); `RULES` are the limits between fields."""

    vocab_size: int = declare(bounds=VOCAB)
    order: int = declare(bounds=ORDER)
    hidden: int = declare(bounds=HIDDEN)
    features: int = declare(bounds=FEATURES)
    direct: bool = declare(True, flag=True)
    layers: int = declare(1, bounds=LAYERS)
    layer_norm: bool = declare(False, flag=True)
    residual: bool = declare(False, flag=True)
    local: int = declare(0, bounds=LOCAL)
    summaries: int = declare(1, bounds=SUMMARIES)
    sum_weights: str = declare("position", choices=SUM_WEIGHTS)
    output_classes: int = declare(0, bounds=CLASSES, off=0)
    energy: bool = declare(False, flag=True)
    energy_shared_v: bool = declare(False, flag=True)
    class_context: int = declare(0, bounds=CLASSES, off=0)
    recurrent: str = declare("none", choices=RECURRENT_CELLS)
    tied: bool = declare(False, flag=True)
    output_tree: int = declare(0, bounds=BRANCHING, off=0)

    def __post_init__(self) -> None:
        for f in fields(self):
            wrong = value_error(f, getattr(self, f.name))
            if wrong is not None:
                raise NnlmError(f"model {f.name} must be {wrong}, got {getattr(self, f.name)!r}")
        for broken, message in RULES:
            if broken(self):
                raise NnlmError(message(self))

    @property
    def distant(self) -> int:
        """How many older context words enter through the weighted sum (0: none, the paper)."""
        return self.order - 1 - self.local if self.local else 0

    @property
    def input_size(self) -> int:
        """The length of x: (n-1) m, or (local + summaries) m with the wide-context branch; + K with class-pair
        features."""
        words = self.local + self.summaries if self.local else self.order - 1
        return words * self.features + self.class_context

    def parameter_count(self) -> int:
        """The paper's count |V|(1+nm+h) + h(1+(n-1)m) (minus |V|(n-1)m when W is off) for the paper's
        net; in general C, b, W, U over |V| rows, H and d, the variants' H_l, d_l, g_l and A, and the class
        factor's b, W, U over K rows, and the K^2 class-pair rows P of K numbers."""
        v, m, h, k = self.vocab_size, self.features, self.hidden, self.input_size
        if self.recurrent != "none":  # C, b, W over the last word, U unless tied; each layer's gates
            gates = 4 if self.recurrent == "lstm" else 1
            cells = sum(gates * h * ((m if layer == 0 else h) + h + 2) for layer in range(self.layers))
            return v * (m + 1) + (0 if self.tied else v * h) + (v * m if self.direct else 0) + cells
        if self.energy:  # C, b; H over the n-1 context words and H_0 over the output word; d; v (v_w or shared); W
            output = h if self.energy_shared_v else v * h
            return v * (m + 1) + h * (k + m + 1) + output + (v * k if self.direct else 0)
        count = v * (m + 1 + h) + h * (k + 1) + (v * k if self.direct else 0)
        if self.tied:  # U is C; h != m: the projection Q onto the features
            count += (m * h if h != m else 0) - v * h
        if h:
            count += (self.layers - 1) * (h * h + h) + (self.layers * h if self.layer_norm else 0)
        if self.output_classes:
            count += self.output_classes * (1 + h + (k if self.direct else 0))
        sums = self.features if self.sum_weights == "feature" else self.summaries
        return count + self.distant * sums + self.class_context ** 3

    def to_dict(self) -> dict:
        """Every field, but the variant fields only where they differ from the paper's net."""
        values = asdict(self)
        defaults = {f.name: f.default for f in fields(self) if f.name in VARIANTS}
        return {k: v for k, v in values.items() if k not in defaults or v != defaults[k]}

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        try:
            return cls(**{k: data[k] for k in REQUIRED}, **{k: data[k] for k in VARIANTS if k in data})
        except (KeyError, TypeError) as exc:
            raise NnlmError(f"incomplete model config ({exc})") from None


Rule = tuple[Callable[[ModelConfig], bool], Callable[[ModelConfig], str]]
RULES: tuple[Rule, ...] = (  # (broken, what to say), checked in this order once every field is within its limits
    (lambda c: c.hidden == 0 and (c.layers > 1 or c.layer_norm or c.residual),
     lambda c: "--layers, --layer-norm and --residual need a hidden layer (h > 0)"),
    (lambda c: c.residual and c.layers < 2,
     lambda c: "--residual needs at least 2 hidden layers (--layers 2): the first changes the width"),
    (lambda c: c.local > c.order - 3 and c.local > 0,
     lambda c: f"--local must be 0 (every context word concatenated) or from 1 to n-3 = {c.order - 3} (at least "
               f"two older words averaged), got {c.local}"),
    (lambda c: c.summaries > 1 and (c.local == 0 or c.summaries > c.distant),
     lambda c: f"--summaries {c.summaries} needs the wide-context branch (--local k) and at most n-1-k = "
               f"{c.distant} older words to sum"),
    (lambda c: c.sum_weights == "feature" and (c.local == 0 or c.summaries > 1),
     lambda c: "--sum-weights feature weighs the older words of the wide-context branch (--local k) in one sum: "
               f"not with --summaries {c.summaries}" if c.local else
               "--sum-weights feature needs the wide-context branch (--local k)"),
    (lambda c: c.energy_shared_v and not c.energy,
     lambda c: "--energy-shared-v applies to the energy network (--energy)"),
    (lambda c: c.energy and (c.hidden == 0 or c.layers > 1 or c.layer_norm or c.residual or c.local > 0),
     lambda c: "--energy needs one plain hidden layer (h > 0) over every context word: it does not combine with "
               "--layers, --layer-norm, --residual or --local"),
    (lambda c: c.energy and c.output_classes > 0,
     lambda c: "--energy and --output-layer classes are two different output layers: choose one"),
    (lambda c: c.output_tree > 0 and (c.energy or c.output_classes > 0),
     lambda c: "--output-layer tree is an output layer of its own: not with --energy or --output-layer classes"),
    (lambda c: c.class_context > 0 and (c.order < 3 or c.energy or c.output_classes > 0 or c.local > 0
                                                     or c.output_tree > 0),
     lambda c: "--class-context needs n >= 3 (two context words) and the full softmax's NPLM with every context "
               "word concatenated: not --energy, --output-layer classes or tree, or --local"),
    (lambda c: c.recurrent != "none" and (c.hidden == 0 or c.energy or c.output_classes > 0 or c.output_tree
                                          or c.local > 0 or c.layer_norm or c.residual or c.class_context > 0),
     lambda c: f"--recurrent {c.recurrent} needs a hidden state (h > 0) and the full softmax: it does not combine "
               "with --energy, --output-layer classes or tree, --local, --layer-norm, --residual or --class-context"),
    (lambda c: c.tied and c.recurrent != "none" and c.hidden != c.features,
     lambda c: f"--tied uses C as the output weights U of a recurrent net (--recurrent {c.recurrent}) with h = m, "
               f"got h = {c.hidden}, m = {c.features}"),
    (lambda c: c.tied and c.recurrent == "none" and (c.hidden == 0 or c.energy or c.output_classes > 0
                                                     or c.output_tree > 0),
     lambda c: "--tied uses C as the output weights U of the full softmax's hidden layer: it needs h > 0 and does "
               "not combine with --energy or --output-layer classes or tree"),
)
