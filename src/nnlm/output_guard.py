"""Outputs never overlap inputs: before any work, every output a command names is compared with every path
it reads, links resolved; an output that is, contains or lies inside an input is refused, and so is an
existing regular file nnlm did not write (the mark `nnlm.io` sets on what it writes) unless the command
has --force and it is given. Every command that writes calls `guard_outputs` first, and so does the
library's training entry."""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from nnlm.errors import NnlmError
from nnlm.io import check_output, written_by_nnlm

__all__ = ["guard_outputs"]


def _resolved(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _same(a: Path, b: Path) -> bool:
    try:
        return a == b or os.path.samefile(a, b)
    except OSError:
        return False


def _overlap(out: Path, inp: Path) -> str | None:
    """How output `out` overlaps input `inp` (both resolved), or None."""
    if _same(out, inp):
        return "is"
    if inp.is_dir() and out.is_relative_to(inp):
        return "lies inside"
    if inp.is_relative_to(out) or any(_same(out, parent) for parent in inp.parents if parent.exists()):
        return "contains"
    return None


def guard_outputs(files: Iterable[tuple[str, Path | str | None]] = (),
                  directories: Iterable[tuple[str, Path | str | None]] = (),
                  inputs: Iterable[Path | str | None] = (), force: bool | None = None) -> None:
    """Refuse, before any work, an output that would write over what the command reads or over a file
    nnlm did not write. `files` / `directories`: (option, path) pairs of the command's outputs (None:
    not given). `inputs`: every path it reads (files or directories; None, '-' and missing ones are
    skipped: reading them fails on its own). Links are resolved and hard links compared by samefile:
    an output that is an input, contains one or lies inside an input directory is refused. An existing
    regular file among `files` that lacks nnlm's mark is refused unless `force` is True (`force=None`:
    the command has no --force). Devices and FIFOs are written into, never replaced, so they pass that
    test; directory outputs are checked for ownership by their own commands (a run directory, a saved
    model, a report)."""
    resolved_inputs = [(str(p), _resolved(p)) for p in inputs
                       if p is not None and str(p) != "-" and os.path.lexists(p)]
    named = [(o, p, True) for o, p in files if p is not None] + [(o, p, False) for o, p in directories
                                                                   if p is not None]
    for i, (option, path, _) in enumerate(named):
        for other, other_path, _ in named[i + 1:]:
            if _overlap(_resolved(path), _resolved(other_path)) or _overlap(_resolved(other_path), _resolved(path)):
                raise NnlmError(f"{option} {path} and {other} {other_path} overlap; give two separate paths")
    for option, path, is_file in named:
        out = _resolved(path)
        for given, inp in resolved_inputs:
            how = _overlap(out, inp)
            if how == "is":
                raise NnlmError(f"{option} {path} is the input {given}; nnlm never writes over an input: "
                                "give another path")
            if how is not None:
                raise NnlmError(f"{option} {path} {how} the input {given}; nnlm never writes over or beside what it "
                                "reads there: give a path outside it")
        if not is_file:
            continue
        check_output(path)
        if os.path.isfile(path) and not written_by_nnlm(path) and not force:
            hint = " (or --force to replace it)" if force is False else ""
            raise NnlmError(f"{option} {path} exists and was not written by nnlm; it is not replaced: give a new "
                            f"name{hint}")
