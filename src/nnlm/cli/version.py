"""`nnlm --version`: the installed package's version, and the git commit when nnlm runs from a checkout.

The commit is read from the checkout's files (.git/HEAD, a ref file or packed-refs; a worktree's `.git`
file points to its own HEAD), only when --version is asked for: no `git` subprocess, nothing at import time.
An installed wheel has no checkout above it, and shows the version alone."""
from __future__ import annotations

import re
from pathlib import Path

COMMIT = re.compile(r"[0-9a-f]{40}")
CHECKOUT = Path(__file__).resolve().parents[3]  # src/nnlm/cli/version.py -> the repository's root


def package_version() -> str:
    """The version pip installed (importlib.metadata); the source's own when nnlm is not installed."""
    from importlib import metadata  # here, not at import: ~55 ms of every command's start (nnlm score's too)

    try:
        return metadata.version("nnlm")
    except metadata.PackageNotFoundError:
        from nnlm import __version__

        return __version__


def git_dir(root: Path) -> Path | None:
    """The git directory of the checkout at `root`: .git itself, or the one a worktree's .git file names."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():
        line = dot_git.read_text(encoding="utf-8").strip()
        if line.startswith("gitdir:"):
            target = Path(line.removeprefix("gitdir:").strip())
            return target if target.is_absolute() else root / target
    return None


def checkout_commit(root: Path = CHECKOUT) -> str | None:
    """The commit the checkout at `root` has out (its first 12 hex digits), or None (no checkout, unreadable)."""
    try:
        here = git_dir(root)
        if here is None:
            return None
        head = (here / "HEAD").read_text(encoding="utf-8").strip()
        if COMMIT.fullmatch(head):  # a detached HEAD
            return head[:12]
        if not head.startswith("ref:"):
            return None
        ref = head.removeprefix("ref:").strip()
        common = here / (here / "commondir").read_text(encoding="utf-8").strip() if (here / "commondir").is_file() \
            else here  # a worktree keeps its branches in the main repository's directory
        for base in (here, common):
            if (base / ref).is_file():
                value = (base / ref).read_text(encoding="utf-8").strip()
                return value[:12] if COMMIT.fullmatch(value) else None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                value, _, name = line.partition(" ")
                if name == ref and COMMIT.fullmatch(value):
                    return value[:12]
    except (OSError, UnicodeDecodeError):
        return None
    return None


def version_line() -> str:
    """What `nnlm --version` prints: "nnlm 0.1.0", with "(git abc123def456)" from a checkout."""
    commit = checkout_commit()
    return f"nnlm {package_version()}" + (f" (git {commit})" if commit else "")
