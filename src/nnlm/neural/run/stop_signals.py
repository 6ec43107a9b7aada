"""Stopping a training run by a signal without losing work.

Ctrl-C, `kill`, a batch scheduler's SIGTERM before it reclaims the machine: the first SIGINT or
SIGTERM only asks the loop to stop after the batch it is computing; the loop then writes a
checkpoint (atomically, like every checkpoint) and raises `StoppedBySignal`, which the command line
turns into one line and exit status 128 + the signal's number. `--resume` continues from that
checkpoint as from any other. A second signal is not caught: it stops the process at once.

A validation pass can take minutes on a large corpus, longer than a scheduler waits between SIGTERM
and SIGKILL; inside `interrupting()` a signal stops it at once (`Interrupted`), and the checkpoint
written then holds the finished epoch without its validation, which `--resume` runs first.

A SIGINT that the shell set to be ignored (a job started with `&` in a script) stays ignored.
Handlers can only be installed in the main thread; elsewhere (a library user's worker thread)
nothing is installed and signals keep their usual effect.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

CAUGHT = (signal.SIGINT, signal.SIGTERM)


class StoppedBySignal(Exception):
    """Training stopped on a signal after saving a checkpoint. Not an NnlmError: the input was fine,
    and the exit status says which signal it was (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class Interrupted(Exception):
    """A signal arrived inside `StopRequest.interrupting()`: what ran there was abandoned."""


class StopRequest:
    """While entered, the first SIGINT/SIGTERM is recorded in `signum` (and then the previous handlers
    are back, so a second signal acts as usual). Checked by the training loop after each batch."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._interrupt = False

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self._restore()
        if self._interrupt:
            raise Interrupted(signum)

    @contextmanager
    def interrupting(self) -> Iterator[None]:
        """Within: a signal (or one already received) raises Interrupted instead of waiting for the loop.
        Only for work this process does alone (a collective left half-done would hang the other ranks)."""
        if self.requested:
            raise Interrupted(self.signum)
        self._interrupt = True
        try:
            yield
        finally:
            self._interrupt = False

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in CAUGHT:
                previous = signal.getsignal(signum)
                if signum == signal.SIGINT and previous == signal.SIG_IGN:
                    continue
                self._previous[signum] = previous
                signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()


def ignore_interrupts_in_worker() -> None:
    """For worker processes (Hogwild): Ctrl-C reaches the whole process group, but only the parent
    decides how to stop, so that it can save the shared parameters first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
