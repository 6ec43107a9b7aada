"""A second process of `nnlm reproduce` on the other core (a lane), as its two kinds share it: the net trained beside
the others (`net_lane`) and the LSTM reference beside the section's nets (`reference_lane`).

Why one shape: both must start without the parent's torch state, leave Ctrl-C to the parent (which ends them with
one SIGTERM, on which a trainer saves), run on one thread while the parent's nets run on the other, end by themselves
when the call that started them is gone (killed with no chance to end them: its next call continues their runs),
and hand their progress lines to the parent, the one process that prints and writes results.json.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nnlm.errors import NnlmError
from nnlm.neural.run.stop_signals import StoppedBySignal


def spawn(target: Callable[..., None], *args: Any) -> multiprocessing.process.BaseProcess:
    """`target(*args)` started in a fresh interpreter (spawn: no torch thread pool or state inherited), as a daemon:
    it ends with the call."""
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    process.start()
    return process


def enter() -> int:
    """In the child, first: Ctrl-C ignored (the parent's: it ends this child with one SIGTERM, which a second
    signal, the terminal's SIGINT, could cut short while a checkpoint is saved), one thread; the parent's pid."""
    from nnlm.threads import govern

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    govern(requested=1, device="cpu")
    return os.getppid()


@contextmanager
def ended_quietly(log_file: Path) -> Iterator[None]:
    """The child's work: a stop on the parent's signal (its run's checkpoint saved) ends it with that signal's exit
    status, and a clear error (NnlmError) as the last line of its log and status 1 -- not the traceback that
    multiprocessing would print under the parent's own one-line message."""
    try:
        yield
    except StoppedBySignal as stop:
        raise SystemExit(128 + stop.signum) from None
    except NnlmError as error:
        with open(log_file, "a", encoding="utf-8") as fh:
            fh.write(f"error: {error}\n")
        raise SystemExit(1) from None


def end_if_orphaned(parent: int) -> None:
    """End the child here (at a point where its run is saved or may be cut) if the call that started it is gone."""
    if os.getppid() != parent:
        raise SystemExit(0)


def join(process: multiprocessing.process.BaseProcess, log_file: Path, log: Callable[[str], None],
         tag: str) -> int | None:
    """Wait for the child; its log lines printed with `tag`; its exit code."""
    process.join()
    for line in (log_file.read_text(encoding="utf-8").splitlines() if log_file.exists() else []):
        log(f"    {line}  [{tag}]")
    return process.exitcode
