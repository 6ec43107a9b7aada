"""The limits and allowed values of an option, declared once and applied wherever a value arrives.

A training option's value reaches nnlm three ways: parsed from the command line, passed to the library
(`nnlm.train(..., lr=...)`, `nnlm tune`), and read back from a run's run.json. One `Bounds` per numeric option
checks all three, so a value the command line refuses is refused by the library and by the run.json reader too,
with the same words.

Fields declared once (`declare`): a dataclass field's metadata holds its limits (`Bounds`), its allowed values
and whether it is a true/false switch, and everything that checks a value reads them from there. The training
options (nnlm.neural.run.config: RunOptions, SessionOptions, and the stored run `RunRecord`) and the
architecture of a net (nnlm.neural.net.model_config.ModelConfig) declare their fields so. From one declaration
come the command line's option (its argparse type and choices: `config.add_train_options`), the library's check
of a value (`check_values`, `ModelConfig.__post_init__`) and what run.json may hold for it (`schema`, which
`checkpoint.read_run` applies).

It imports neither numpy nor torch: the command-line parser builds its options from these declarations.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from nnlm.errors import NnlmError

SEED_MAX = 2**63 - 1  # numpy and torch both take seeds in [0, 2^64); one bound for all commands
_INT = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def parse_int(text: str) -> int:
    """An integer written in ASCII digits ('١٢' parses in Python: refused), else argparse's type error."""
    if not _INT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(text)


def parse_float(text: str) -> float:
    """A finite number written in ASCII (never nan or inf), else argparse's type error."""
    if not _FLOAT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


@dataclass(frozen=True)
class Bounds:
    """A number in [lo, hi] (an open end with lo_open / hi_open; hi None: no upper bound); `integer`
    asks for an int (bools are refused either way)."""

    lo: float
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        """'an integer in [1, 16]', 'a finite number in (0, 10]', 'an integer >= 1'."""
        kind = "an integer" if self.integer else "a finite number"
        lo = self._show(self.lo)
        if self.hi is None:
            return f"{kind} {'>' if self.lo_open else '>='} {lo}"
        return f"{kind} in {'(' if self.lo_open else '['}{lo}, {self._show(self.hi)}{')' if self.hi_open else ']'}"

    def _show(self, x: float) -> str:
        return f"{int(x):,}" if self.integer else f"{x:g}"

    def holds(self, value: object) -> bool:
        """Whether `value` is a number of the right kind within the bounds."""
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if not math.isfinite(value) or value < self.lo or (self.lo_open and value == self.lo):
            return False
        return self.hi is None or value < self.hi or (value == self.hi and not self.hi_open)

    def check(self, name: str, value: object) -> None:
        """One-line NnlmError naming the option (`--lr`) unless `value` holds."""
        if not self.holds(value):
            raise NnlmError(f"{name} must be {self.describe()}, got {value!r}")

    def parser(self) -> Callable[[str], int | float]:
        """An argparse `type=`: the text as a number (ASCII digits only, never nan or inf), within the bounds."""
        convert = parse_int if self.integer else parse_float

        def parse(text: str) -> int | float:
            value = convert(text)
            if not self.holds(value):
                raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text}")
            return value
        parse.__name__ = "integer" if self.integer else "number"  # argparse names the type in its message
        return parse


Check = Callable[[Any], bool]
Schema = dict[str, tuple[bool, Check, str]]  # field -> (required in the file, check, what it must be)


def declare(default: Any = MISSING, *, bounds: Bounds | None = None, choices: tuple | None = None,
            flag: bool = False, off: Any = None, required: bool = False, stored_choices: tuple | None = None,
            stored_check: tuple[Check, str] | None = None, factory: Callable[[], Any] | Any = MISSING,
            **more: Any) -> Any:
    """A dataclass field with its declaration. `bounds`: a number's limits; `choices`: the allowed values;
    `flag`: true or false; `off`: a value allowed besides the bounds (0: the variant is off). What run.json
    holds for it (`schema`): null as well when the default is None; `required`: every run.json has it;
    `stored_choices`: the values a resolved run stores (never null); `stored_check`: (check, words) for a
    value of another kind; `factory`: a mutable default's maker. `more`: the command line's own metadata
    (nnlm.neural.run.config.option)."""
    meta = {"bounds": bounds, "choices": choices, "flag": flag, "off": off, "required": required,
            "stored_choices": stored_choices, "stored_check": stored_check} | more
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


def check_choice(name: str, value: Any, choices: tuple, required: bool = False) -> None:
    """One-line NnlmError unless `value` is one of the option's `choices` (or None, not given, unless `required`)."""
    if value not in (choices if required else (None, *choices)):
        raise NnlmError(f"unknown --{name.replace('_', '-')} {value!r}; choose from {', '.join(map(str, choices))}")


def check_values(options: type, values: dict[str, Any]) -> None:
    """Each value of a field of `options` (None: not given) within its declared bounds and among its
    declared choices, else a one-line NnlmError naming the option: the same limits as the command line's."""
    for f in fields(options):
        bounds = f.metadata.get("bounds")
        if bounds is not None and values.get(f.name) is not None:
            bounds.check("--" + f.name.replace("_", "-"), values[f.name])
        if f.metadata.get("choices"):
            check_choice(f.name, values.get(f.name), f.metadata["choices"])


def value_error(f: Field, value: Any) -> str | None:
    """What is wrong with a value that may not be None (the words of the first problem), or None if it holds."""
    meta = f.metadata
    if meta.get("flag"):
        return None if isinstance(value, bool) else "true or false"
    if meta.get("off") is not None and value == meta["off"] and type(value) is type(meta["off"]):
        return None
    bounds = meta.get("bounds")
    if bounds is not None and not bounds.holds(value):
        return (f"{meta['off']!r} (off) or " if meta.get("off") is not None else "") + bounds.describe()
    if meta.get("choices") and value not in meta["choices"]:
        return " or ".join(map(repr, meta["choices"]))
    return None


def _words(values: tuple, nullable: bool) -> str:
    shown = ["null"] * nullable + [repr(v) for v in values]
    return ", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]


def stored(f: Field) -> tuple[bool, Check, str]:
    """run.json's entry for a declared field: (required, check, what it must be). Null passes when the
    field's default is None; a resolved field (`stored_choices`) holds one of those, never null."""
    meta, nullable = f.metadata, f.default is None
    required = meta.get("required", False)
    if meta.get("stored_check") is not None:
        return (required, *meta["stored_check"])
    if meta.get("stored_choices") is not None:
        values = meta["stored_choices"]
        return required, (lambda v: v in values), _words(values, False)
    if meta.get("bounds") is None and not meta.get("choices") and not meta.get("flag"):  # a name or a path
        return required, (lambda v: isinstance(v, str) and v != ""), "a non-empty string"
    if meta.get("choices") or meta.get("flag"):
        what = _words(meta["choices"], nullable) if meta.get("choices") else ("null, " if nullable else "") + \
            "true or false"
    else:
        what = ("null or " if nullable else "") + meta["bounds"].describe()
    return required, (lambda v: (nullable and v is None) or value_error(f, v) is None), what


def schema(record: type) -> Schema:
    """The file schema of a dataclass whose fields are declared (`declare`): field -> (required, check, what)."""
    return {f.name: stored(f) for f in fields(record)}
