"""Typed training options: what defines a run, what only one invocation chooses, and one call's request.

`RunOptions` are the options a run is defined by (a resumed run must be given the same, or none);
`SessionOptions` may change from one invocation to the next; `TrainRequest` is one call of training,
both of them and the names of the run options the caller gave, which the command line builds
(`request_from_args`) and every training function takes. Each field is declared once, with its
default, its limits and allowed values and its command-line help (field metadata, nnlm.bounds),
so the defaults, the help text, the command line's checks, the library's and run.json's schema
(`RunRecord`, the stored run's fields) cannot drift apart. A value of None means "resolved when the
run is created" (from the preset, the recipe or the corpus); the resolved values are what run.json
holds (`nnlm.neural.run.run_config.Run`).

It imports no torch itself, so that the command-line parser can build its options from it cheaply.
"""
from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from nnlm.bounds import SEED_MAX, Bounds, check_choice, check_values, declare
from nnlm.errors import NnlmError
from nnlm.neural.net import model_config as architecture  # its bounds (--order, --hidden, ...)
from nnlm.neural.run.recipes import LR_SCHEDULES, RECIPE_KEYS, RECIPES, recipe_defaults

LOSSES = ("full", "sampled", "nce")  # the training losses (nnlm.neural.net.sampled builds them); declared here once
OUTPUT_LAYERS = ("full", "classes", "tree")
CLUSTERINGS = ("exchange", "frequency")  # nnlm.neural.net.output_clustering.CLUSTERINGS, repeated (numpy-free)
ROW_DECAYS = ("touched", "exact")  # nnlm.neural.net.sampled.RowAdam's two rules for the rows a batch did not touch
INIT_FEATURES = ("auto", "random", "exchange")  # nnlm.neural.net.feature_init
FEATURE_CLUSTERINGS = ("exchange", "trigram")  # the classes --init-features exchange ties rows to
DEFAULT_SAMPLES = 128  # --loss sampled / nce's K (nnlm.neural.net.sampled): Brown, MLP1: 2.4x faster steps than K = 512
# and a lower valid perplexity (README); here, numpy-free, so that a full-softmax run does not import the sampled loss
DEFAULT_CLASS_PULL = 1.0  # --init-features exchange: the measured best on gen-500 / gen-2k (docs/recipes.md)
DEVICES = ("auto", "cpu", "cuda")
VOCAB_FROM = ("train", "all")  # where a text directory's vocabulary is counted (nnlm.data.corpus)
MINUTES = Bounds(0.0, 60.0 * 24 * 365, lo_open=True)  # at most a year
BUDGET_MINUTES = Bounds(0.0, 60.0 * 24 * 365)  # 0: one batch, then stop and checkpoint (how tests cut a run short)
RUN_FORMAT = "nnlm-neural-run/1"  # run.json's format (nnlm.neural.run.checkpoint)
RECIPE_GROUP = "recipe fields (default: the recipe's; stored in run.json, kept by --resume)"


def option(default: Any, help: str, *, bounds: Bounds | None = None, parse: Callable[[str], Any] | None = None,
           choices: tuple | None = None, flag: bool = False, shown: str | None = None, metavar: str | None = None,
           group: str | None = None, cli: bool = True, **stored: Any) -> Any:
    """A declared field (nnlm.bounds.declare: `bounds`, `choices`, `flag`, and what run.json holds
    for it in `stored`) that is also a command-line option: `parse`: another argparse type than the
    bounds' parser; `shown`: how the help states the default (when the bare value would not say it);
    `flag`: a --x/--no-x switch; `cli` False: not on the command line (set by other options or by the library)."""
    if bounds is not None and parse is None:
        parse = bounds.parser()
    return declare(default, bounds=bounds, choices=choices, flag=flag, help=help, parse=parse, shown=shown,
                   metavar=metavar, group=group, cli=cli, **stored)


@dataclass(frozen=True)
class RunOptions:
    """The options that define a run (None: resolved from the preset, the recipe or the corpus)."""

    corpus: str = option("brown", "'brown' (the bengio2003 protocol) or a directory with train.txt, valid.txt, "
                                  "test.txt", cli=False, required=True)
    min_count: int | None = option(None, "text directories: tokens seen fewer times become <unk>", cli=False,
                                   bounds=Bounds(1, integer=True), required=True)
    max_vocab: int | None = option(None, "text directories: keep at most this many tokens", cli=False,
                                   bounds=Bounds(1, integer=True), required=True)
    vocab_from: str = option("train", "text directories: count the vocabulary on train or on all splits", cli=False,
                             choices=VOCAB_FROM, required=True)
    heldout: int | None = option(None, "a text file or stdin: valid and test size in tokens (0: none)", cli=False,
                                 bounds=Bounds(0, integer=True))
    preset: str = option("mlp1", "mlp1 ... mlp10 (the paper's Table 1), apnews (Table 2), energy (its section 5.1 "
                                   "energy network, docs/experiments/energy.md), lstm or rnn (its section 6 "
                                   "recurrent net, docs/experiments/recurrent-nplm.md), wide-context, deep-context, "
                                   "long-context, long-context-32-tied, long-context-256-tied (past the paper, "
                                   "docs/experiments/beyond.md, ff-net.md), or mlp1-classes (class-factored MLP1)",
                         required=True)
    order: int | None = option(None, "n, overriding the preset", bounds=architecture.ORDER, shown="the preset's")
    hidden: int | None = option(None, "h (0 = no hidden layer), overriding the preset",
                                bounds=architecture.HIDDEN, shown="the preset's")
    features: int | None = option(None, "m, overriding the preset", bounds=architecture.FEATURES, shown="the preset's")
    direct: bool | None = option(None, "direct connections W, overriding the preset", flag=True,
                                 shown="the preset's")
    layers: int | None = option(None, "hidden layers of h units, overriding the preset",
                                bounds=architecture.LAYERS, shown="the preset's (1 in the paper)")
    layer_norm: bool | None = option(None, "layer normalisation in each hidden layer, overriding the preset",
                                     flag=True, shown="the preset's (off in the paper)")
    residual: bool | None = option(None, "hidden layers after the first add their input back (needs --layers 2 or "
                                         "more), overriding the preset", flag=True, shown="the preset's (off)")
    local: int | None = option(None, "0: all n-1 context words concatenated; k: only the k nearest, the older ones "
                                     "as one learned weighted sum of their features (wide context, 1 <= k <= n-3), "
                                     "overriding the preset", bounds=architecture.LOCAL,
                                shown="the preset's (0)")
    summaries: int | None = option(None, "with --local: the older words as K learned weighted sums instead of one "
                                         "(starting as averages over all of them, the nearest half, quarter, ...)",
                                   bounds=architecture.SUMMARIES, metavar="K", shown="the preset's (1)")
    sum_weights: str | None = option(None, "with --local: the older words' sum weighted per position, or per position "
                                           "and feature (each feature its own reach)",
                                     choices=architecture.SUM_WEIGHTS, shown="the preset's (position)")
    energy: bool | None = option(None, "the paper's energy-minimization network (section 5.1): the output word's "
                                       "features enter the hidden layer, P(w | context) = softmax(-E); "
                                       "overriding the preset", flag=True, shown="the preset's (off but for energy)")
    energy_shared_v: bool | None = option(None, "--energy: one output vector v for every word instead of v_w",
                                          flag=True, shown="off")
    recurrent: str | None = option(None, "lstm or rnn: the paper's recurrent net for longer context (section 6): "
                                         "C(w_{t-1}) feeds --layers recurrent layers of h units carrying the "
                                         "text, trained by truncated back-propagation over n-1 steps; none: the "
                                         "feed-forward net; overriding the preset",
                                   choices=architecture.RECURRENT_CELLS,
                                   shown="the preset's (none but for lstm and rnn)")
    tied: bool | None = option(None, "output weights U = C (recurrent: h = m; feed-forward: Q projects h to m)",
                               flag=True, shown="the preset's")
    output_layer: str | None = option(None, "full: one softmax over V (the paper); classes: P(class | h) x "
                                            "P(w | class, h), two exact softmaxes, O(K + |V|/K) per word; tree: the "
                                            "product of exact softmaxes down a word tree, O((B-1) log_B |V|)",
                                      choices=OUTPUT_LAYERS, shown="the preset's: full, classes for mlp1-classes",
                                      stored_choices=OUTPUT_LAYERS)
    output_classes: int | None = option(None, "--output-layer classes (or tree with exchange clustering): the "
                                              "number of word classes K",
                                        bounds=architecture.CLASSES, metavar="K", shown="about sqrt(|V|)")
    output_clustering: str | None = option(None, "--output-layer classes / tree: exchange (the class-based "
                                                 "n-gram's clustering of train; tree: nested classes of classes) "
                                                 "or frequency (bins of equal token mass; tree: Huffman's)",
                                           choices=CLUSTERINGS, shown="exchange")
    tree_branching: int | None = option(None, "--output-layer tree: at most B children a node (2: binary)",
                                        bounds=architecture.BRANCHING, metavar="B", shown="2")
    row_decay: str | None = option(None, "--loss sampled / nce or --output-layer classes (Adam on the rows a batch "
                                         "touched): touched: a row's weight decay and moments move only at the "
                                         "steps that touch it (torch's SparseAdam); exact: dense AdamW's weight "
                                         "decay and moments on every row at every step, applied when the row is "
                                         "next touched (one process only)",
                                   choices=ROW_DECAYS, shown="touched")
    init_features: str | None = option(None, "random: C uniform in +-0.1 (the paper); exchange: the words of each "
                                             "class of the exchange clustering of train (the class-based n-gram's) "
                                             "start from one shared random row of C, U and W, and --class-pull "
                                             "holds each word's rows near its class's mean (full softmax, one "
                                             "process); auto: exchange with --class-context where the class "
                                             "trigram beats the word trigram on validation by a tenth, else random",
                                       choices=INIT_FEATURES, shown="auto", stored_choices=INIT_FEATURES[1:])
    feature_classes: int | None = option(None, "--init-features exchange: the number of classes K",
                                         bounds=architecture.CLASSES, metavar="K",
                                         shown="about sqrt(|V|)")
    class_pull: float | None = option(None, "--init-features exchange: PULL/2 x the squared distance of every word's "
                                            "rows of C, U and W from their class's mean rows is added to each "
                                            "batch's mean loss (0: the classes only start the net)",
                                      bounds=Bounds(0.0, 1e6), metavar="PULL", shown=str(DEFAULT_CLASS_PULL))
    feature_clustering: str | None = option(None, "--init-features exchange: exchange (the class-based n-gram's "
                                                  "classes, class bigram likelihood) or trigram (those classes "
                                                  "refined by the class trigram's likelihood)",
                                            choices=FEATURE_CLUSTERINGS, shown="exchange; auto: the better on "
                                                                                 "validation")
    class_context: bool | None = option(None, "--init-features exchange: x also holds a learned row of K numbers for "
                                              "the pair of classes of the last two context words (the class "
                                              "trigram's history as a feature; n >= 3)", flag=True, shown="off")
    recipe: str | None = option(None, "how the net is trained, one of " + ", ".join(RECIPES),
                                shown="adaptive with --loss full; sampled with --loss sampled / nce, "
                                      "sampled-large for the presets past the paper", required=True,
                                stored_check=(lambda v: (isinstance(v, str) and v != "") or isinstance(v, dict),
                                              "a recipe name"))
    batch_size: int = option(256, "examples per update", bounds=Bounds(1, 1 << 24, integer=True), required=True)
    seed: int = option(0, "random seed", bounds=Bounds(0, SEED_MAX, integer=True), required=True)
    lr: float | None = option(None, "learning rate", bounds=Bounds(0.0, 10.0, lo_open=True))
    patience: int = option(3, "early stopping: epochs without a better valid perplexity",
                         bounds=Bounds(1, integer=True), required=True)
    bf16: bool | None = option(None, "bf16 output layer and softmax in training", flag=True,
                               shown="the recipe's, on bf16 hardware")
    loss: str = option("full", "output layer in training: full softmax, sampled (importance-sampled softmax) or "
                               "nce (noise-contrastive estimation); validation and eval are always exact",
                       choices=LOSSES)
    samples: int | None = option(None, "--loss sampled/nce: words drawn per batch from unigram^0.75",
                                 bounds=Bounds(1, integer=True), metavar="K", shown="128, at most |V|")
    lr_schedule: str | None = option(None, "epoch: lr x --lr-factor after every epoch; plateau: x --lr-factor when "
                                           "validation stalls; newbob: on a stall the best weights back, then x "
                                           "--lr-factor every epoch; constant; paper: the paper recipe's eps_t, "
                                           "its only schedule",
                                     choices=LR_SCHEDULES, group=RECIPE_GROUP)
    lr_factor: float | None = option(None, "the schedule's factor", group=RECIPE_GROUP,
                                     bounds=Bounds(0.0, 1.0, lo_open=True))
    weight_decay: float | None = option(None, "(decoupled) weight decay on C, H, U, W", group=RECIPE_GROUP,
                                        bounds=Bounds(0.0, 100.0))
    dropout: float | None = option(None, "dropout on x and on the hidden layer", group=RECIPE_GROUP,
                                   bounds=Bounds(0.0, 1.0, hi_open=True))
    min_improvement: float | None = option(None, "an epoch counts as better only if valid perplexity < best x "
                                                 "(1 - FRACTION)", group=RECIPE_GROUP, metavar="FRACTION",
                                           bounds=Bounds(0.0, 1.0, hi_open=True))
    plateau_patience: int | None = option(None, "plateau: epochs without a --min-improvement better validation "
                                                "before the rate drops", group=RECIPE_GROUP,
                                          bounds=Bounds(1, integer=True))

    def check(self) -> None:
        """Values no run can have -> one-line NnlmError (before anything is read or written)."""
        from nnlm.neural.run.recipes import RECIPES, check_recipe_values

        recipe = self.recipe
        if recipe not in RECIPES:
            raise NnlmError(f"unknown recipe {recipe!r}; choose from {', '.join(RECIPES)}")
        check_values(RunOptions, dataclasses.asdict(self))
        check_loss(self.loss, self.samples)
        check_recipe_values(dataclasses.asdict(self))
        self.check_output_layer()
        self.check_init_features()
        if self.row_decay is not None and (RECIPES[recipe].optimizer != "adam" or (
                self.loss == "full" and self.asked_output_layer() not in ("classes", "tree"))):
            raise NnlmError("--row-decay applies to the runs that update only the rows a batch touched: --loss "
                            "sampled or nce, or --output-layer classes or tree, with an Adam recipe")
        if self.loss != "full" and RECIPES[recipe].optimizer != "adam":
            raise NnlmError(f"--loss {self.loss} trains with the modern recipe (Adam on the touched rows), "
                            f"not {recipe!r}")

    def refuse_given(self, names: tuple[str, ...], needs: str) -> None:
        """One-line NnlmError if any of the options `names` was given without the choice `needs` they apply to."""
        for name in names:
            if getattr(self, name) is not None:
                raise NnlmError(f"--{name.replace('_', '-')} applies to {needs} only")

    def check_init_features(self) -> None:
        """--init-features and its options agree with each other and with the loss and the output layer (its
        value is among its choices: `check_values`)."""
        if self.init_features != "exchange":
            self.refuse_given(("feature_classes", "class_pull", "class_context", "feature_clustering"),
                              "--init-features exchange")
            return
        if self.loss != "full":
            raise NnlmError(f"--init-features exchange pulls every word's output rows towards its class's: it trains "
                            f"the full softmax, not --loss {self.loss}")

    def asked_output_layer(self) -> str:
        """The output layer these options ask for: --output-layer, else the preset's."""
        from nnlm.neural.net.presets import has_class_output

        if self.output_layer is not None:
            return self.output_layer
        return "classes" if has_class_output(self.preset) else "full"

    def asks_energy(self) -> bool:
        """Whether these options ask for the energy network (--energy, else a preset that has it)."""
        from nnlm.neural.net.presets import has_energy

        return bool(self.energy) if self.energy is not None else has_energy(self.preset)

    def check_output_layer(self) -> None:
        """--output-layer and its options agree with each other and with --loss and --bf16."""
        from nnlm.neural.net.presets import has_class_output

        classes = self.output_layer == "classes" or (self.output_layer is None and has_class_output(self.preset))
        tree = self.output_layer == "tree"
        if not tree:
            self.refuse_given(("tree_branching",), "--output-layer tree")
        if not (classes or tree):
            self.refuse_given(("output_classes", "output_clustering"), "--output-layer classes or tree")
            return
        if tree and self.output_clustering == "frequency":
            self.refuse_given(("output_classes",), "--output-layer classes, or tree with exchange clustering,")
        layer = "classes" if classes else "tree"
        if self.loss != "full":
            raise NnlmError(f"--loss {self.loss} samples the full softmax; --output-layer {layer} computes its "
                            "exact softmaxes instead: choose one of them")
        if self.bf16:
            raise NnlmError(f"--bf16 applies to the full softmax's output layer; --output-layer {layer} trains in "
                            "fp32 (its products are small)")


@dataclass(frozen=True)
class SessionOptions:
    """The options of one invocation: they may change when a run is resumed."""

    epochs: int = option(30, "stop after this many epochs", bounds=Bounds(1, 1_000_000, integer=True))
    time_budget: float | None = option(None, "stop after this much training time", bounds=BUDGET_MINUTES,
                                       metavar="MINUTES", shown="none")
    threads: int | None = option(None, "torch CPU threads", bounds=Bounds(1, 1024, integer=True),
                                 shown="the cores other processes leave free, re-checked as the load changes")
    device: str = option("auto", "auto: CUDA when present", choices=DEVICES)
    checkpoint_minutes: float = option(5.0, "checkpoint every this many minutes", bounds=MINUTES)

    def check(self) -> None:
        check_values(SessionOptions, dataclasses.asdict(self))


def check_loss(loss: str, samples: int | None, vocab_size: int | None = None) -> None:
    """Bad --loss / --samples -> NnlmError (vocab_size None: the |V| bound is checked later)."""
    check_choice("loss", loss, LOSSES, required=True)
    if loss == "full":
        if samples is not None:
            raise NnlmError("--samples applies to --loss sampled or nce, not to the full softmax")
        return
    if samples is None and vocab_size is None:
        return  # the default, min(DEFAULT_SAMPLES, |V|), is filled in once |V| is known
    bounds_of("samples").check("--samples", samples)
    if vocab_size is not None and samples > vocab_size:
        raise NnlmError(f"--samples {samples} exceeds the vocabulary size {vocab_size}")


def bounds_of(name: str) -> Bounds | None:
    """The declared limits of a RunOptions or SessionOptions field (None: not a number)."""
    for f in fields(RunOptions) + fields(SessionOptions):
        if f.name == name:
            return f.metadata["bounds"]
    raise KeyError(name)


def defaults(options: type) -> dict[str, Any]:
    """{field: default} of RunOptions or SessionOptions, in declaration order."""
    return {f.name: f.default for f in fields(options)}


RUN_DEFAULTS: dict[str, Any] = defaults(RunOptions)
SESSION_DEFAULTS: dict[str, Any] = defaults(SessionOptions)


@dataclass(frozen=True)
class RunRecord(RunOptions):
    """What run.json holds besides the resolved options (`nnlm.neural.run.run_config.Run` adds the methods):
    its format, the net's architecture (ModelConfig.to_dict()), the corpus's name and vocabulary, and what
    --init-features auto compared. With RunOptions' fields it declares run.json's schema
    (`nnlm.neural.run.checkpoint.RUN_SCHEMA`)."""

    format: str = declare(RUN_FORMAT, stored_choices=(RUN_FORMAT,), required=True)
    model: dict[str, Any] = declare(factory=dict, required=True,
                                    stored_check=(lambda v: isinstance(v, dict), "an object (the model config)"))
    corpus_name: str = declare("", stored_check=(lambda v: isinstance(v, str), "a string"))
    vocab_fingerprint: str = declare("", required=True)
    pad_token: str = declare("", required=True)
    init_evidence: dict[str, float] | None = declare(None, stored_check=(lambda v: v is None or (
        isinstance(v, dict) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v.values())),
        "null or an object of numbers"))  # --init-features auto: what it compared (class_evidence)


@dataclass(frozen=True)
class TrainRequest:
    """One call of training, typed: the run's options, the session's, and which run options the caller
    gave (`given`): a new run resolves the others, a resumed run is checked against exactly these."""

    run: RunOptions = dataclasses.field(default_factory=RunOptions)
    session: SessionOptions = dataclasses.field(default_factory=SessionOptions)
    given: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.session.check()

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> TrainRequest:
        """The request of option names and values (the library's keyword form): every run option named is
        given, even as None; an unknown name is refused."""
        unknown = sorted(set(values) - set(RUN_DEFAULTS) - set(SESSION_DEFAULTS))
        if unknown:
            raise NnlmError(f"unknown training option {unknown[0]!r}; the options are the fields of "
                            "nnlm.neural.run.config.RunOptions and SessionOptions")
        run = {k: v for k, v in values.items() if k in RUN_DEFAULTS}
        session = {k: v for k, v in values.items() if k in SESSION_DEFAULTS}
        return cls(RunOptions(**run), SessionOptions(**session), frozenset(run))

    def asked(self) -> dict[str, Any]:
        """The run options given, by name (in declaration order)."""
        return {k: getattr(self.run, k) for k in RUN_DEFAULTS if k in self.given}

    def with_session(self, **changes: Any) -> TrainRequest:
        return dataclasses.replace(self, session=dataclasses.replace(self.session, **changes))


def as_request(request: TrainRequest | Mapping[str, Any]) -> TrainRequest:
    """The library's entry points (`train`, `train_parallel`) take the typed request or, for convenience,
    its keyword form (`TrainRequest.of`), read here once."""
    return request if isinstance(request, TrainRequest) else TrainRequest.of(request)


def help_text(f: dataclasses.Field) -> str:
    """The field's help with its default, as `--help` shows it: a recipe field's, each recipe's value."""
    shown = f.metadata["shown"] or (recipe_defaults(f.name) if f.name in RECIPE_KEYS
                                    else "on" if f.default is True else "off" if f.default is False else f.default)
    return f"{f.metadata['help']} (default: {shown})"


def add_train_options(parser: argparse.ArgumentParser, skip: tuple[str, ...] = (),
                      only: tuple[str, ...] | None = None) -> None:
    """Every command-line field of RunOptions and SessionOptions (or `only` these) as an option of
    `parser`. Each option's argparse default is None, so that only what was given is in the request's
    `given` (a resume compares exactly those with the run's); the help states the real default."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in fields(RunOptions) + fields(SessionOptions):
        meta = f.metadata
        if not meta["cli"] or f.name in skip or (only is not None and f.name not in only):
            continue
        target = parser if meta["group"] is None else groups.setdefault(meta["group"],
                                                                         parser.add_argument_group(meta["group"]))
        name = "--" + f.name.replace("_", "-")
        extra: dict[str, Any] = {"help": help_text(f), "default": None}
        if meta["flag"]:
            extra["action"] = argparse.BooleanOptionalAction
        else:
            extra |= {k: v for k, v in (("type", meta["parse"]), ("choices", meta["choices"]),
                                        ("metavar", meta["metavar"])) if v is not None}
        target.add_argument(name, **extra)


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """The training request of a parsed command line: the options given (None: not given), typed."""
    return TrainRequest.of({k: getattr(args, k) for k in list(RUN_DEFAULTS) + list(SESSION_DEFAULTS)
                            if getattr(args, k, None) is not None})
