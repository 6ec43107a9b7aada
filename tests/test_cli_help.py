"""Every option of every command says what it does and what it is when not given: a test that walks
the parsers, so that a new option without a described default fails here."""
from __future__ import annotations

import argparse
import re

import pytest

from nnlm.cli import build_parser

# tune keeps its own option definitions (train's come from the typed run configuration)
GENERATED_LATER = {"tune"}


def commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def described(action: argparse.Action) -> list[str]:
    """What is missing from an action's help: nothing, or 'help', 'default'."""
    if isinstance(action, argparse._HelpAction):
        return []
    missing = [] if action.help else ["help"]
    takes_default = action.option_strings and not action.required
    if takes_default and "default" not in (action.help or ""):
        missing.append("default")
    return missing


def test_the_walk_sees_every_command():
    assert {"stats", "ngram", "train", "eval", "tune", "mix", "reproduce", "score", "generate", "next",
            "neighbors", "map", "export"} <= set(commands())


@pytest.mark.parametrize("name", sorted(set(commands()) - GENERATED_LATER))
def test_every_option_has_help_that_states_its_default(name):
    parser = commands()[name]
    gaps = {"/".join(a.option_strings) or a.dest: described(a) for a in parser._actions if described(a)}
    assert not gaps, f"nnlm {name}: options without help or a stated default: {gaps}"
    assert parser.format_help()  # and the help renders


def test_the_walk_catches_an_undescribed_option():
    parser = argparse.ArgumentParser()
    bare = parser.add_argument("--bare", type=int, default=3)
    flag = parser.add_argument("--flag", action="store_true", help="does a thing")
    assert described(bare) == ["help", "default"] and described(flag) == ["default"]


def test_the_parallel_choices_are_the_registered_trainers():
    """cli/train.py spells the --parallel choices out (importing the trainer registry would load torch
    for `nnlm --help`); they must stay the registry's."""
    from nnlm.neural.parallel.ranks import MODES

    (action,) = [a for a in commands()["train"]._actions if a.dest == "parallel"]
    assert tuple(action.choices) == MODES


@pytest.mark.parametrize("name", sorted(commands()))
def test_no_option_states_its_default_as_none(name):
    """A default of None is resolved later (from the preset, the recipe, the corpus): the help says from what."""
    vague = ["/".join(a.option_strings) for a in commands()[name]._actions if "default: None" in (a.help or "")]
    assert not vague, f"nnlm {name}: options whose help says 'default: None': {vague}"


def test_the_recipe_help_lists_every_registered_recipe_and_its_values():
    from nnlm.neural.run.recipes import RECIPE_KEYS, RECIPES

    actions = {a.dest: a for a in commands()["train"]._actions}
    assert all(name in actions["recipe"].help for name in RECIPES)
    for key in RECIPE_KEYS:  # each field's default: every recipe named once, after the value it gives
        stated = actions[key].help.split("(default: the recipe's: ")[1]
        named = [name for group in re.findall(r"\(([^()]*)\)", stated) for name in group.split(", ")]
        assert sorted(named) == sorted(RECIPES), (key, stated)


def test_the_register_lists_every_command_with_its_modules_own_help():
    """`nnlm --help` is built from the register without importing the commands' modules: the register's lines
    must be the ones the modules give, and the help the same as with every module loaded."""
    from nnlm.cli.main import COMMANDS

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {a.dest: a.help for a in sub._choices_actions} == {name: c.help for name, c in COMMANDS.items()}
    assert build_parser(()).format_help() == build_parser().format_help()


def test_a_command_imports_its_own_module_only():
    """`nnlm --help` imports no command module; `nnlm CMD` the module of CMD (and of its family) alone."""
    import subprocess
    import sys

    probe = ("import sys\nfrom nnlm.cli.main import COMMANDS, build_parser\nbuild_parser({load})\n"
             "print(sorted(m.split('.')[-1] for m in sys.modules if m.startswith('nnlm.cli.') and m.split('.')[-1] "
             "in {{c.module for c in COMMANDS.values()}}))")
    for load, expect in (("()", "[]"), ("['train']", "['train']"), ("['generate', 'next']", "['text']")):
        out = subprocess.run([sys.executable, "-c", probe.format(load=load)], capture_output=True, text=True,
                             check=True).stdout
        assert out.strip() == expect, (load, out)
