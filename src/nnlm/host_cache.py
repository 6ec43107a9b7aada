"""Choices measured on this host, kept for the next process: a JSON file per kind of choice in the nnlm cache
directory, each entry under a key of the host and a key of the work's shape.

Why: some choices are a matter of speed on this CPU, not of flags in /proc/cpuinfo (the training step's thread
count, `nnlm.neural.run.step_threads`; the library that multiplies the exact pass's slices,
`nnlm.neural.lm.exact_product`), so they are measured, and a measurement costs a fraction of a second worth paying
once per host and shape rather than in every process. The host key changes with the CPU model and flags, the cores
this process may use, the machine type and torch's version: another host, or another torch, measures again. A
cache that cannot be read or written is only a cache: the choice is measured again next time.
"""
from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from nnlm import threads
from nnlm.data.corpus import cache_root
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text


def host_key() -> str:
    """What a measured speed depends on besides the work's shape: the CPU model and flags, the cores this process
    may use, the machine type and torch's version (its kernels and BLAS)."""
    model = flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        model = platform.processor()
    text = f"{model}|{flags}|{threads.machine_cores()}|{platform.machine()}|{torch.__version__}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shape_key(shape: dict[str, Any]) -> str:
    """A short digest of the work's shape (any JSON-able description of it)."""
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(name: str) -> Path:
    return cache_root() / name


def read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def entry(path: Path, host: str, shape: str) -> dict | None:
    """The entry recorded for this host and shape, if any."""
    found = read_cache(path).get(host, {}).get(shape)
    return found if isinstance(found, dict) else None


def store(path: Path, host: str, shape: str, record: dict) -> None:
    """Record an entry (stamped with the time it was measured), written atomically beside the others."""
    data = read_cache(path)
    data.setdefault(host, {})[shape] = record | {"measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))
    except (OSError, NnlmError):
        pass


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Only one process (or thread) of this host at a time in the block, by an advisory lock on `path`'s
    `.lock` beside it: where a choice changes numbers, processes that would measure it at once (a run's ranks)
    measure it once, and the others read the answer. Without a lock file (no fcntl, a directory that cannot be
    made) the block runs unlocked."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 (closed below)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # (releases the lock)
