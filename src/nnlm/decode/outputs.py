"""Where `nnlm decode` writes: a directory that is not, does not contain, and does not lie inside any of
its inputs (links resolved), filled in a temporary sibling and renamed into place at the end, so a
failed run writes nothing. `check_apart` defers to nnlm.output_guard.guard_outputs, the check every command makes."""
from __future__ import annotations

import json
from pathlib import Path

from nnlm.errors import NnlmError

OWN_FILES = {"transcripts.txt", "decode.json"}


def check_apart(out: str | Path, inputs: list[str | Path]) -> None:
    """Refuse an --out that is an input, holds one, or sits inside one: nnlm's one output guard."""
    from nnlm.output_guard import guard_outputs

    guard_outputs(directories=[("--out", out)], inputs=inputs)


def check_replaceable(out: str | Path) -> bool:
    """Whether --out exists; refuse one that is a file or holds files `nnlm decode` did not write."""
    path = Path(out)
    if not path.exists() and not path.is_symlink():
        return False
    if not path.is_dir() or path.is_symlink():
        raise NnlmError(f"--out {out} exists and is not a directory: give a new directory")
    foreign = sorted(p.name for p in path.iterdir() if p.name not in OWN_FILES)
    if foreign:
        raise NnlmError(f"--out {out} holds files nnlm decode did not write ({foreign[0]}, ...): give a new directory")
    return True


def write_outputs(out: str | Path, transcripts: dict[str, list[str]], summary: dict) -> None:
    """DIR/transcripts.txt (`uttid words`) and DIR/decode.json, all at once (temporary sibling, rename)."""
    from nnlm.io import atomic_dir, atomic_write_text

    replace = check_replaceable(out)
    text = "".join(f"{uid} {' '.join(words)}\n" for uid, words in transcripts.items())
    with atomic_dir(out, replace=replace) as tmp:
        atomic_write_text(tmp / "transcripts.txt", text)
        atomic_write_text(tmp / "decode.json", json.dumps(summary, indent=2) + "\n")
