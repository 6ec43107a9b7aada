"""Atomic file writes: a crash never leaves a half-written file under the final name."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is renamed onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; the result is an ordinary file
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextmanager
def atomic_dir(path: Path | str, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; on success it becomes `path` in one rename.

    If `path` exists meanwhile: with replace=False another writer won and ours is dropped (caches);
    with replace=True the old directory is swapped out and removed (a user saving again)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the result is an ordinary directory
    try:
        yield tmp
        if replace and path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
            return
        try:
            os.replace(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
            # Another process finished the same directory first: keep theirs, drop ours.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
