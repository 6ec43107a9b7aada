"""Typed training options (nnlm.neural.run.config), the resolved run (run_config.Run) and the trainer registry."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from nnlm.cli import build_parser
from nnlm.cli.main import main
from nnlm.errors import NnlmError
from nnlm.neural.run.config import (
    RUN_DEFAULTS,
    SESSION_DEFAULTS,
    RunOptions,
    SessionOptions,
    TrainRequest,
    add_train_options,
    request_from_args,
)
from nnlm.neural.run.pipeline import TRAINERS, trainer_spec
from nnlm.neural.run.recipes import RECIPES, recipe_values
from nnlm.neural.run.run_config import Run
from nnlm.neural.run.trainer import Trainer

CORPUS_OPTIONS = ("corpus", "min_count", "max_vocab", "vocab_from", "heldout")  # the CLI's shared corpus group
ARGVS = [
    [],
    ["--order", "4", "--no-direct", "--lr", "0.01", "--loss", "sampled", "--samples", "5", "--epochs", "2"],
    ["--time-budget", "1.5", "--dropout", "0.1", "--lr-schedule", "plateau", "--bf16", "--threads", "1",
     "--seed", "7", "--batch-size", "32", "--patience", "2", "--device", "cpu", "--checkpoint-minutes", "0.5"],
    ["--preset", "mlp3", "--hidden", "0", "--features", "9", "--direct", "--recipe", "paper", "--lr-factor", "0.5",
     "--weight-decay", "0", "--min-improvement", "0.01", "--plateau-patience", "2"],
]


def from_fields(argv: list[str]) -> TrainRequest:
    parser = argparse.ArgumentParser()
    add_train_options(parser)
    return request_from_args(parser.parse_args(argv))


@pytest.mark.parametrize("argv", ARGVS)
def test_the_options_built_from_the_fields_parse_as_the_cli_does(argv):
    args = build_parser().parse_args(["train", "--out", "x", *argv])
    today = {k: getattr(args, k) for k in list(RUN_DEFAULTS) + list(SESSION_DEFAULTS)
             if getattr(args, k, None) is not None and k not in CORPUS_OPTIONS}
    assert from_fields(argv) == TrainRequest.of(today)
    assert from_fields(argv).given == {k for k in today if k in RUN_DEFAULTS}  # a resume compares exactly these


def test_every_train_option_of_the_cli_comes_from_a_field_and_its_help_states_the_default():
    parser = argparse.ArgumentParser()
    add_train_options(parser)
    ours = {a.dest: a for a in parser._actions if a.dest != "help"}
    cli_train = build_parser()._subparsers._group_actions[0].choices["train"]
    theirs = {a.dest for a in cli_train._actions} & (set(RUN_DEFAULTS) | set(SESSION_DEFAULTS))
    assert set(ours) == theirs - set(CORPUS_OPTIONS)
    for action in ours.values():
        assert action.default is None  # only what is given reaches `requested` (a resume compares those)
        assert "(default: " in action.help, action.dest
    assert "(default: 256)" in ours["batch_size"].help and "(default: 30)" in ours["epochs"].help


def test_bad_values_are_one_line_errors():
    with pytest.raises(NnlmError, match="unknown recipe 'fancy'"):
        RunOptions(recipe="fancy").check()
    with pytest.raises(NnlmError, match=r"--batch-size must be an integer in \[1, 16,777,216\], got 0"):
        RunOptions(recipe="adaptive", batch_size=0).check()
    with pytest.raises(NnlmError, match="--samples applies to --loss sampled"):
        RunOptions(recipe="adaptive", samples=4).check()
    with pytest.raises(NnlmError, match="trains with the modern recipe"):
        RunOptions(recipe="paper", loss="nce").check()
    with pytest.raises(NnlmError, match=r"--threads must be an integer in \[1, 1,024\]"):
        SessionOptions(threads=0).check()
    with pytest.raises(NnlmError, match="unknown --device 'gpu'; choose from auto, cpu, cuda"):
        SessionOptions(device="gpu").check()  # declared choices hold for the library as for the CLI
    with pytest.raises(NnlmError, match="must be epoch, plateau, newbob or constant, got 'paper'"):
        RunOptions(recipe="modern", lr_schedule="paper").check()
    RunOptions(recipe="paper", lr_schedule="paper").check()  # the paper recipe's own schedule, named
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunOptions().seed = 1  # type: ignore[misc]


def test_an_old_run_json_loads_with_the_values_it_trained_with(neural_run):
    run_dir, _ = neural_run
    saved = json.loads((run_dir / "run.json").read_text())
    run = Run.from_json(saved)
    assert run.to_json() == {k: saved[k] for k in run.to_json()}  # today's run.json: every value as written
    old = {k: v for k, v in saved.items() if k not in ("loss", "samples", *recipe_values(RECIPES["modern"]))}
    old |= {"recipe": "modern", "added_by_a_newer_version": 1}  # unknown keys are tolerated
    before = Run.from_json(old)
    assert (before.loss, before.samples) == ("full", None)
    assert before.training_recipe == RECIPES["modern"]
    assert before.learning_rate == RECIPES["modern"].lr


def test_trainers_are_chosen_by_name():
    for name, spec in TRAINERS.items():
        assert spec.name == name and issubclass(spec.trainer_class(), Trainer)
    with pytest.raises(NnlmError, match="unknown trainer 'mpi'"):
        trainer_spec("mpi")
    with pytest.raises(NnlmError, match="--parallel vocab trains the full softmax only"):
        trainer_spec("vocab").check("sampled")
    with pytest.raises(NnlmError, match="runs on the CPU"):
        trainer_spec("hogwild").check("full", "cuda")


# (field, a value just inside its bounds, one just outside): the command line, the library and the run.json
# reader must agree on each -- they once disagreed (--lr <= 1e6 / <= 10 / any > 0, dropout [0, 1] / [0, 1)).
EDGES = [("lr", 10.0, 10.5), ("lr", 1e-9, 0.0), ("weight_decay", 100.0, 100.5), ("dropout", 0.99, 1.0),
         ("lr_factor", 1.0, 1.01), ("min_improvement", 0.0, 1.0), ("seed", 2**63 - 1, 2**63),
         ("batch_size", 1, 0), ("samples", 1, 0), ("plateau_patience", 1, 0), ("order", 256, 257)]


@pytest.mark.parametrize("name, inside, outside", EDGES)
def test_every_face_applies_the_same_bounds(name, inside, outside):
    from nnlm.neural.run.checkpoint import RUN_SCHEMA
    from nnlm.neural.run.config import add_train_options, check_values

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_train_options(parser)
    flag = "--" + name.replace("_", "-")
    assert getattr(parser.parse_args([flag, str(inside)]), name) == inside  # the command line takes it ...
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args([flag, str(outside)])  # ... and refuses the other
    check_values(RunOptions, {name: inside})  # the library: the same
    with pytest.raises(NnlmError, match=f"{flag} must be"):
        check_values(RunOptions, {name: outside})
    _, holds, what = RUN_SCHEMA[name]  # run.json: the same
    assert holds(inside) and not holds(outside), what


# the architecture's fields: the CLI's option, the library's ModelConfig and run.json's entry share one limit
MODEL_EDGES = [("order", 256, 257), ("order", 2, 1), ("hidden", 100_000, 100_001), ("features", 1, 0),
               ("layers", 16, 17), ("output_classes", 2, 1)]


@pytest.mark.parametrize("name, inside, outside", MODEL_EDGES)
def test_the_model_config_refuses_what_the_command_line_refuses(name, inside, outside):
    from nnlm.neural.net.model_config import ModelConfig
    from nnlm.neural.run.checkpoint import RUN_SCHEMA

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_train_options(parser)
    flag = "--" + name.replace("_", "-")
    assert getattr(parser.parse_args([flag, str(inside)]), name) == inside
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args([flag, str(outside)])
    base = {"vocab_size": 50, "order": 3, "hidden": 4, "features": 3}
    assert getattr(ModelConfig(**base | {name: inside}), name) == inside
    with pytest.raises(NnlmError, match=f"model {name} must be .*, got {outside}"):
        ModelConfig(**base | {name: outside})
    _, holds, _ = RUN_SCHEMA[name]
    assert holds(inside) and not holds(outside)


def test_model_order_300_is_refused_by_the_library_as_by_the_command_line(capsys):
    from nnlm.neural.net.model_config import ModelConfig

    with pytest.raises(NnlmError, match=r"model order must be an integer in \[2, 256\], got 300"):
        ModelConfig(vocab_size=50, order=300, hidden=4, features=3)
    with pytest.raises(SystemExit) as stop:
        main(["train", "--out", "x", "--order", "300"])
    assert stop.value.code == 2 and "--order: must be an integer in [2, 256], got 300" in capsys.readouterr().err


def test_run_json_schema_covers_every_stored_field_from_its_declaration():
    from nnlm.neural.run.checkpoint import RUN_SCHEMA
    from nnlm.neural.run.config import INIT_FEATURES, LR_SCHEDULES, RUN_FORMAT

    assert set(RUN_SCHEMA) == {f.name for f in dataclasses.fields(Run)}
    required = {k for k, (needed, _, _) in RUN_SCHEMA.items() if needed}
    assert required == {"format", "corpus", "min_count", "max_vocab", "vocab_from", "preset", "recipe", "batch_size",
                        "seed", "patience", "model", "vocab_fingerprint", "pad_token"}
    holds = {k: check for k, (_, check, _) in RUN_SCHEMA.items()}
    assert all(holds["lr_schedule"](v) for v in (None, *LR_SCHEDULES)) and not holds["lr_schedule"]("cosine")
    assert holds["init_features"]("exchange") and not holds["init_features"](INIT_FEATURES[0])  # resolved: no auto
    assert not holds["output_layer"](None) and holds["output_clustering"](None)  # resolved / optional
    assert holds["format"](RUN_FORMAT) and not holds["format"]("nnlm-neural-run/2")
    assert holds["min_count"](None) and not holds["min_count"](0) and holds["recipe"]({"name": "old"})


def test_a_typed_request_keeps_what_was_given():
    request = TrainRequest.of({"corpus": "brown", "lr": None, "epochs": 2})
    assert request.given == {"corpus", "lr"} and request.asked() == {"corpus": "brown", "lr": None}
    assert request.session.epochs == 2 and request.run.batch_size == RUN_DEFAULTS["batch_size"]
    with pytest.raises(NnlmError, match="unknown training option 'epoch'"):
        TrainRequest.of({"epoch": 2})
    with pytest.raises(NnlmError, match=r"--threads must be an integer in \[1, 1,024\]"):
        TrainRequest.of({"threads": 0})


def test_losses_are_declared_once():
    from nnlm.cli.main import build_parser
    from nnlm.neural.run import config
    from nnlm.neural.run.checkpoint import RUN_SCHEMA

    _, holds, _ = RUN_SCHEMA["loss"]
    assert all(holds(name) for name in config.LOSSES) and not holds("hinge")
    source = "\n".join(p.read_text() for p in Path(config.__file__).parents[1].rglob("*.py"))
    assert source.count('"full", "sampled", "nce"') == 1  # the one declaration
    tune = build_parser()._subparsers._group_actions[0].choices["tune"]
    assert next(a for a in tune._actions if a.dest == "loss").choices == config.LOSSES
