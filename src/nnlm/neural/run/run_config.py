"""A run's resolved configuration (run.json) and the creation or re-opening of its directory.

`Run` is `RunOptions` with every None resolved -- the recipe, its values scaled to the net and the
corpus, bf16, the number of samples -- plus what the corpus and the preset decided (the model's
shape, the vocabulary's fingerprint, the pad token). run.json holds exactly these values, so a resume
trains on with them whatever the defaults have become. Run directories from before a field existed
still load: `Run.from_json` fills it the way the code of that time behaved.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from nnlm.data.corpus import Corpus
from nnlm.data.provenance import OPTION_NAMES, STDIN_RECORD, corpus_options, load_recorded_corpus, settled
from nnlm.errors import NnlmError
from nnlm.neural.net.model_config import VARIANTS, ModelConfig
from nnlm.neural.net.presets import preset
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.config import DEFAULT_CLASS_PULL, DEFAULT_SAMPLES, RunOptions, RunRecord, TrainRequest, check_loss
from nnlm.neural.run.recipes import (
    RECIPES,
    Recipe,
    decay_scale,
    default_recipe,
    learning_rate,
    recipe_values,
    regularisation_scale,
    run_recipe,
)
from nnlm.output_guard import guard_outputs
from nnlm.wording import counted


@dataclass(frozen=True)
class Run(RunRecord):
    """The resolved, stored configuration of a run (run.json): RunOptions resolved, and RunRecord's fields."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        """A run.json's values (already checked by `checkpoint.read_run`); fields it lacks get the values
        runs of that time trained with: the full softmax, and their named recipe's values."""
        data = {"loss": "full", "samples": None, "output_layer": "full",  # runs from before these options
                "init_features": "random", "feature_classes": None, "class_pull": None} | data
        if data["init_features"] == "exchange" and data.get("feature_clustering") is None:
            data["feature_clustering"] = "exchange"  # (runs from before the trigram refinement)
        if data["recipe"] not in RECIPES:
            raise NnlmError(f"this version lacks recipe {data['recipe']!r}")
        data |= {k: v for k, v in recipe_values(RECIPES[data["recipe"]]).items() if data.get(k) is None}
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def model_config(self) -> ModelConfig:
        return ModelConfig.from_dict(self.model)

    @property
    def training_recipe(self) -> Recipe:
        """The named recipe with this run's stored values."""
        return run_recipe(self.to_json())

    @property
    def learning_rate(self) -> float:
        return learning_rate(self.to_json())


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise NnlmError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    if name not in ("cpu", "cuda"):
        raise NnlmError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def bf16_is_fast(device: torch.device) -> bool:
    """bf16 autocast pays off only with hardware bf16 (CUDA, or AVX-512 BF16 / AMX on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def model_config(run: dict[str, Any] | RunOptions, vocab_size: int) -> ModelConfig:
    """The preset's architecture, with any of n, h, m, direct and the variant fields given explicitly
    taking precedence; --output-layer full / classes (with --output-classes K, default about sqrt(|V|))
    sets `output_classes`."""
    values = run if isinstance(run, dict) else dataclasses.asdict(run)
    base = preset(values["preset"], vocab_size)
    picks = {k: values[k] for k in ("order", "hidden", "features", "direct", *VARIANTS)
             if values.get(k) is not None and k != "class_context"}  # (a flag; its K: `resolve_init_features`)
    if values.get("output_layer") in ("full", "tree"):
        picks["output_classes"] = 0
    if values.get("output_layer") == "tree":
        picks["output_tree"] = values.get("tree_branching") or 2
    elif values.get("output_layer") == "classes" or base.output_classes:
        from nnlm.neural.net.output_clustering import default_class_count

        picks["output_classes"] = (values.get("output_classes") or base.output_classes
                                   or default_class_count(vocab_size))
    return ModelConfig(**(base.to_dict() | picks))


def corpus_key(value: str) -> str:
    """The corpus as run.json names it: 'brown', a directory's or a file's absolute path, '-' (standard input,
    named by its content once read: `settled`) or a recorded `stdin:<sha256>`."""
    return value if value in ("brown", "-") or value.startswith(STDIN_RECORD) else str(Path(value).resolve())


def open_corpus(run: RunOptions) -> Corpus:
    """The corpus a run records (its vocabulary options as they are: an old run's None min_count stays None)."""
    return load_recorded_corpus({name: getattr(run, name) for name in OPTION_NAMES})


def open_run(out: Path, request: TrainRequest, resume: bool, device: torch.device,
             check: Callable[[Run], None] | None = None, ties_rows: bool = True,
             progress: bool = False) -> tuple[Run, Corpus]:
    """The run in `out`: created from the request's run options, or re-opened (--resume) and checked
    against the ones it gives. Nothing is written when an option is refused. `ties_rows`: the trainer can
    tie the rows to classes (one process), which `--init-features auto` may then choose (`progress`: shown
    while it does)."""
    request = dataclasses.replace(request, run=dataclasses.replace(request.run, corpus=corpus_key(request.run.corpus)))
    if resume:
        return reopen_run(out, request, check)
    return create_run(out, request.run, device, check, ties_rows, progress)


def guard_run_directory(out: Path, corpus: str | None) -> None:
    """Refuse a run directory that is, holds or lies inside the text directory the run reads, before
    anything is written there (every face: the command line and the library alike)."""
    guard_outputs(directories=[("--out", out)], inputs=[None if corpus in (None, "brown") else corpus])


def refuse_existing(out: Path) -> None:
    """A new run never overwrites anything: a trained or unfinished run, or any other file."""
    if (out / ck.RUN).exists():
        state = ck.read_state(out)
        if state.get("finished") or (out / ck.WEIGHTS).exists():
            trained = counted(state.get("epoch", 0), "epoch")
            raise NnlmError(f"{out} already holds a trained model ({trained}); it is not "
                            "overwritten: continue it with --resume, or choose another --out")
        raise NnlmError(f"{out} holds an unfinished run; continue it with --resume or choose another --out")
    if out.exists() and any(out.iterdir()):
        raise NnlmError(f"{out} exists and is not empty; choose another --out")


def create_run(out: Path, options: RunOptions, device: torch.device,
               check: Callable[[Run], None] | None = None, ties_rows: bool = True,
               progress: bool = False) -> tuple[Run, Corpus]:
    """Check the options, read the corpus, resolve every default, write run.json and vocab.json."""
    guard_run_directory(out, options.corpus)
    refuse_existing(out)
    if options.recipe is None:
        options = dataclasses.replace(options, recipe=default_recipe(options.loss, options.preset))
    options.check()
    # unknown preset or impossible shapes: said before the corpus is loaded (K is checked against |V| once known)
    energy = model_config(dataclasses.replace(options, output_classes=None), 2).energy
    recipe = RECIPES[options.recipe]
    if options.bf16 and energy:
        raise NnlmError("--bf16 is for the MLP's output product; the energy network (--energy) trains in fp32")
    if options.bf16 is None:  # (the energy net's cost is tanh units, which bf16 does not speed up)
        options = dataclasses.replace(options, bf16=recipe.bf16 and bf16_is_fast(device) and not energy)
    # the corpus options as every command resolves them (the default --min-count of a text directory), and the corpus
    record = corpus_options(options.corpus, options.min_count, options.max_vocab, options.vocab_from, options.heldout)
    corpus = load_recorded_corpus(record)
    if len(corpus.valid) == 0:
        raise NnlmError(f"the corpus {corpus.name} has no valid part (--no-heldout), which training needs for its "
                        "learning rate and early stopping: give --heldout TOKENS instead")
    options = dataclasses.replace(options, min_count=record["min_count"], corpus=settled(record, corpus)["corpus"])
    model = model_config(options, len(corpus.vocab))
    options, model = resolve_output_layer(options, model, corpus)
    options, model, evidence = resolve_init_features(options, model, corpus, ties_rows, progress)
    if options.loss != "full" and options.samples is None:
        options = dataclasses.replace(options, samples=min(DEFAULT_SAMPLES, model.vocab_size))
    check_loss(options.loss, options.samples, model.vocab_size)
    scale = regularisation_scale(recipe, model.parameter_count(), len(corpus.train))
    decay = decay_scale(recipe, len(corpus.train))
    values = {k: v for k, v in recipe_values(recipe, scale, decay).items() if getattr(options, k) is None}
    run = Run(**dataclasses.asdict(options) | values, model=model.to_dict(), corpus_name=corpus.name,
              vocab_fingerprint=corpus.vocab.fingerprint, pad_token=corpus.pad_token, init_evidence=evidence)
    if check is not None:  # what the trainer cannot do with this run (one line), before anything is written
        check(run)
    ck.write_run(out, run.to_json(), corpus.vocab)
    return run, corpus


def resolve_output_layer(options: RunOptions, model: ModelConfig, corpus: Corpus) -> tuple[RunOptions, ModelConfig]:
    """The output layer's options as run.json stores them: full, or classes with K and the clustering
    (a default K the clustering cannot make -- more classes than train has distinct words -- is lowered;
    an explicit one is refused). A class-factored layer trains in fp32."""
    if model.output_tree:
        return resolve_output_tree(options, model, corpus), model
    if not model.output_classes:
        return dataclasses.replace(options, output_layer="full"), model
    from nnlm.neural.net.output_clustering import CLUSTERINGS, class_count_limit

    clustering = options.output_clustering or CLUSTERINGS[0]
    limit = class_count_limit(clustering, corpus.train, model.vocab_size)
    if model.output_classes > limit:
        if options.output_classes is not None:
            raise NnlmError(f"--output-classes {options.output_classes}: the {clustering} clustering of this corpus "
                            f"can make at most {limit} classes")
        model = dataclasses.replace(model, output_classes=limit)
    return dataclasses.replace(options, output_layer="classes", output_classes=model.output_classes,
                               output_clustering=clustering, bf16=False), model


def resolve_output_tree(options: RunOptions, model: ModelConfig, corpus: Corpus) -> RunOptions:
    """--output-layer tree as run.json stores it: B, the clustering and (exchange) the classes' K, a default K
    lowered to what the clustering can make, an explicit one refused past it. fp32, like the classes."""
    from nnlm.neural.net.output_clustering import CLUSTERINGS, class_count_limit, default_class_count

    clustering, k = options.output_clustering or CLUSTERINGS[0], None
    if clustering == "exchange":
        limit = class_count_limit(clustering, corpus.train, model.vocab_size)
        if options.output_classes is not None and options.output_classes > limit:
            raise NnlmError(f"--output-classes {options.output_classes}: the exchange clustering of this corpus "
                            f"can make at most {limit} classes")
        k = options.output_classes or min(limit, default_class_count(model.vocab_size))
    return dataclasses.replace(options, output_layer="tree", output_classes=k, output_clustering=clustering,
                               tree_branching=model.output_tree, bf16=False)


def resolve_init_features(options: RunOptions, model: ModelConfig, corpus: Corpus, ties_rows: bool = True,
                          progress: bool = False) -> tuple[RunOptions, ModelConfig, dict[str, float] | None]:
    """--init-features as run.json stores it: random, or exchange with K (default about sqrt(|V|), lowered to
    what the clustering can make) and the pull. It ties the rows of the full softmax's NPLM; --class-context
    gives the net the K^2 class-pair rows (`ModelConfig.class_context` = K). auto (the default) is decided
    here, from the text (nnlm.neural.net.feature_init), and what it compared is returned beside."""
    auto = options.init_features in (None, "auto")
    if auto:
        can_tie = ties_rows and options.loss == "full" and not (model.energy or model.output_classes or model.local
                                                                or model.recurrent != "none" or model.output_tree)
        if not can_tie or model.order < 3:
            return dataclasses.replace(options, init_features="random"), model, None
    elif options.init_features == "random":
        return options, model, None
    if model.energy or model.output_classes or model.output_tree or model.recurrent != "none":
        layer = "tree" if model.output_tree else "classes"
        what = ("the energy network (--energy)" if model.energy else f"--output-layer {layer}"
                if model.output_classes or model.output_tree else "the recurrent net (--recurrent)")
        raise NnlmError(f"--init-features exchange ties the full softmax's output rows U and W of each class; "
                        f"{what} has other output rows: choose one of them")
    from nnlm.neural.net.output_clustering import class_count_limit, default_class_count

    limit = class_count_limit("exchange", corpus.train, model.vocab_size)
    default_k = min(limit, default_class_count(model.vocab_size))
    evidence = None
    if auto:
        from nnlm.neural.net.feature_init import chosen_clustering, class_evidence, classes_pay

        evidence = class_evidence(corpus, default_k, limit, progress)
        if not classes_pay(evidence):
            return dataclasses.replace(options, init_features="random"), model, evidence
        options = dataclasses.replace(options, init_features="exchange", feature_classes=evidence["classes"],
                                      class_context=True, feature_clustering=chosen_clustering(evidence))
    k = options.feature_classes
    if k is not None and k > limit:
        raise NnlmError(f"--feature-classes {k}: the exchange clustering of this corpus can make at most {limit} "
                        "classes")
    k = k or default_k
    pull = DEFAULT_CLASS_PULL if options.class_pull is None else options.class_pull
    if options.class_context:
        model = dataclasses.replace(model, class_context=k)
    options = dataclasses.replace(options, feature_classes=k, class_pull=pull,
                                  class_context=bool(options.class_context),
                                  feature_clustering=options.feature_clustering or "exchange")
    return options, model, evidence


def reopen_run(out: Path, request: TrainRequest,
               check: Callable[[Run], None] | None = None) -> tuple[Run, Corpus]:
    """The saved run, if every run option the request gives agrees with it, and its corpus (same vocabulary)."""
    if not (out / ck.RUN).exists():
        raise NnlmError(f"--resume: {out} holds no run to resume (no {ck.RUN})")
    saved, _, _ = ck.read_run(out)
    if saved["recipe"] not in RECIPES:
        raise NnlmError(f"--resume: {out} was trained with recipe {saved['recipe']!r}, which this version lacks")
    run = Run.from_json(saved)
    if check is not None:  # (a resumed run may have been trained otherwise than this call asks)
        check(run)
    for key, value in request.asked().items():
        if getattr(run, key) != value:
            raise NnlmError(f"--resume: {out} was started with {key} = {getattr(run, key)!r}, not {value!r}")
    guard_run_directory(out, run.corpus)  # (before the corpus is read)
    corpus = open_corpus(run)
    if corpus.vocab.fingerprint != run.vocab_fingerprint:
        raise NnlmError(f"--resume: the corpus {run.corpus} now has another vocabulary than the run in {out}")
    return run, corpus
