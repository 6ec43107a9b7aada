"""Progress of long work, the one helper every command shows it through: a bar on a terminal, plain lines in a log.

A tqdm bar redraws itself several times a second: right on a terminal, wrong in a redirected log (a
training job's log grew to 1 MB of carriage-return frames). So `show_progress(...)` gives a tqdm bar only when
its stream (stderr) is a terminal; anywhere else it writes one plain line at most once a minute -- what is
done of the total, the rate since the start, the time left at that rate, and the caller's note (a running
perplexity, say) -- and nothing at all for work shorter than a minute. Disabled, it does nothing."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

LOG_INTERVAL = 60.0  # seconds between two plain progress lines, at least


class Silent:
    """No progress shown: what `show_progress` gives when it is disabled; the interface of the others."""

    def update(self, n: int) -> None:
        """`n` more units done."""

    def note(self, text: str) -> None:
        """A short status shown after the counts (replacing the previous note)."""

    def close(self) -> None:
        """The work is over (a bar is cleared)."""

    def __enter__(self) -> Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bar(Silent):
    """A tqdm bar, for a terminal."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int, stream: TextIO,
                 scaled: bool = True) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=scaled, leave=False,
                        dynamic_ncols=True, file=stream)

    def update(self, n: int) -> None:
        self.bar.update(n)

    def note(self, text: str) -> None:
        self.bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        self.bar.close()


def duration(seconds: float) -> str:
    """A time left, as a log reader wants it: "40 s", "12.5 min", "3.2 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class LogLines(Silent):
    """Plain progress lines for a log: at most one every `interval` seconds (LOG_INTERVAL), `clock` a monotonic one."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int, stream: TextIO,
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.desc, self.unit, self.stream, self.clock = total, desc, unit, stream, clock
        self.interval = LOG_INTERVAL if interval is None else interval
        self.done = self.first = initial
        self.started = self.last = clock()
        self.text = ""

    def update(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        self.text = text

    def line(self, now: float) -> str:
        """desc: done/total unit (share), rate unit/s, ETA; note."""
        rate = (self.done - self.first) / max(now - self.started, 1e-9)
        parts = [f"{self.desc}: {self.done:,}" + (f"/{self.total:,}" if self.total else "") + f" {self.unit}"
                 + (f" ({100 * self.done / self.total:.0f}%)" if self.total else ""),
                 f"{rate:,.0f} {self.unit}/s" if rate >= 1 or rate == 0 else f"{duration(1 / rate)}/{self.unit}"]
        if self.total and rate > 0:
            parts.append(f"ETA {duration(max(self.total - self.done, 0) / rate)}")
        return ", ".join(parts) + (f"; {self.text}" if self.text else "")


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def show_progress(total: int | None, desc: str, unit: str = "tok", initial: int = 0, enabled: bool = True,
                  stream: TextIO | None = None, scaled: bool = True) -> Silent:
    """Progress of `total` units (None: unknown) from `initial` on, shown on `stream` (stderr): a bar on a
    terminal, a plain line at most once a minute elsewhere, nothing when not `enabled`. `scaled`: the bar
    counts in k and M (tokens); False for a few slow units, which it then counts as whole numbers."""
    if not enabled:
        return Silent()
    stream = sys.stderr if stream is None else stream
    if is_terminal(stream):
        return Bar(total, desc, unit, initial, stream, scaled)
    return LogLines(total, desc, unit, initial, stream)
