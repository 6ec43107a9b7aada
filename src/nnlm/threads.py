"""How many CPU threads torch should use *now*: as many cores as other processes leave free.

Why: torch's OpenMP threads wait on each other at every kernel. On a 2-core machine where other
processes keep the cores busy, two threads each get a slice of a core and a step can run 10-20x
slower than with one thread (measured: 1.5k against 30k tokens/s for MLP1 at load 6-9). So the
thread count is chosen from what other processes use (measured from /proc/stat, not the load
average, which also counts this process's own recent work) and re-checked during long work.

`ThreadGovernor.check()` needs no sleep: it compares the machine's and this process's CPU time
with what they were at the previous check, so it can be called at every epoch or scoring chunk.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

# Busy cores elsewhere are rounded so that a core more than this much busy counts as taken:
# sharing a core with another CPU-bound process costs an OpenMP team far more than a missing thread.
MARGIN = 0.3
RECHECK_SECONDS = 5.0  # a clock read per check(); /proc/stat only this often


def machine_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot (every /proc/stat state but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _sample() -> tuple[float, float, float] | None:
    """(machine busy seconds, this process's CPU seconds, wall clock), or None without /proc/stat."""
    try:
        return machine_busy_seconds(), time.process_time(), time.monotonic()
    except (OSError, ValueError, IndexError):
        return None


def busy_between(before: tuple[float, float, float], after: tuple[float, float, float]) -> float:
    """Cores other processes kept busy between two samples: machine busy time minus our own."""
    wall = after[2] - before[2]
    if wall <= 0:
        return 0.0
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / wall)


def cores_busy_elsewhere(window: float = 0.2) -> float | None:
    """How many cores other processes keep busy, measured over `window` seconds; None where
    /proc/stat is missing."""
    return cores_busy_outside((), window)


def process_seconds(pid: int) -> float:
    """CPU seconds (user + system) a live process has spent; 0 for one that has gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # (its name may hold spaces)
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def cores_busy_outside(pids: Sequence[int], window: float = 0.2) -> float | None:
    """How many cores processes other than this one and `pids` (its own children: work of the same job) keep
    busy, measured over `window` seconds; None where /proc/stat is missing. (The children's CPU time is taken
    from the machine's busy time, as `ThreadGovernor.check` takes its siblings'.)"""
    def sample() -> tuple[float, float, float] | None:
        now = _sample()
        return None if now is None else (now[0] - sum(process_seconds(pid) for pid in pids), now[1], now[2])

    before = sample()
    if before is None:
        return None
    time.sleep(window)
    after = sample()
    return None if after is None else busy_between(before, after)


def free_threads(cores: int, busy: float | None) -> int:
    """Threads for the cores other processes leave free: at least 1, at most `cores`. A core
    counts as taken when more than MARGIN of it is busy (pure, for the tests)."""
    if busy is None or not math.isfinite(busy):
        return cores
    return max(1, min(cores, cores - max(0, math.ceil(busy - MARGIN))))


class ThreadGovernor:
    """Chooses torch's CPU thread count and re-chooses it as the machine's load changes.

    `requested` (the user's --threads) wins and is never changed; on CUDA the count is left to
    torch. Otherwise the count is set from the cores free now, and `check()` re-sets it when at
    least RECHECK_SECONDS have passed since the last look.

    `share` is the number of processes of one job on this machine that each run a governor (the
    local ranks of a ddp / vocab run): they get the free cores between them, and each counts its
    siblings' CPU time as its own (they do the same work), so that they do not read each other
    as load from elsewhere and take turns shrinking and growing."""

    def __init__(self, requested: int | None = None, device: torch.device | str = "cpu",
                 recheck_seconds: float = RECHECK_SECONDS, window: float = 0.2, share: int = 1) -> None:
        self.requested = requested
        self.fixed = requested is not None or torch.device(device).type != "cpu"
        self.recheck_seconds = recheck_seconds
        self.cores = machine_cores()
        self.share = max(1, share)
        self.busy: float | None = None
        self.changes = 0  # how many times check() changed the count
        self.cap: int | None = None  # at most this many threads meanwhile (`capped`: the training step's choice)
        if requested is not None:
            torch.set_num_threads(requested)
        elif not self.fixed:
            self.busy = cores_busy_elsewhere(window)
            torch.set_num_threads(self._wanted())
        self._last = _sample()
        self._due = time.monotonic() + recheck_seconds

    def _wanted(self) -> int:
        wanted = max(1, free_threads(self.cores, self.busy) // self.share)
        return wanted if self.cap is None else min(wanted, self.cap)

    @property
    def threads(self) -> int:
        return torch.get_num_threads()

    def check(self) -> int:
        """Re-measure (no sleep: the CPU time since the last check) and re-set the thread count if due.
        Costs one clock read when not due, so hot loops may call it often."""
        if self.fixed or self._last is None or time.monotonic() < self._due:
            return self.threads
        now = _sample()
        if now is None:
            return self.threads
        # the siblings of a shared job did about what this process did: not load from elsewhere
        own = now[1] - self._last[1]
        self.busy = busy_between(self._last, (now[0] - (self.share - 1) * own, now[1], now[2]))
        self._last, self._due = now, now[2] + self.recheck_seconds
        wanted = self._wanted()
        if wanted != torch.get_num_threads():
            torch.set_num_threads(wanted)
            self.changes += 1
        return wanted

    def describe(self) -> str:
        """How many threads, and why: '2 threads (--threads 2)', '1 thread (1.6 of 2 cores busy elsewhere)'."""
        count = thread_count(self.threads)
        if self.requested is not None:
            return f"{count} (--threads {self.requested})"
        if self.fixed:
            return f"{count} (torch's choice on {torch.device('cuda').type})"
        if self.busy is None:
            return f"{count} (every core: the load is unknown here)"
        each = f", {self.share} processes sharing them" if self.share > 1 else ""
        return (f"{count} (chosen from the load, re-checked every {self.recheck_seconds:.0f} s: "
                f"{self.busy:.1f} of {self.cores} cores busy elsewhere{each})")


_current: ThreadGovernor | None = None


def govern(requested: int | None = None, device: torch.device | str = "cpu", share: int = 1) -> ThreadGovernor:
    """A governor for this process's work from now on, installed so that `check()` (called by
    scoring loops deep in the library) re-checks it."""
    global _current
    _current = ThreadGovernor(requested, device, share=share)
    return _current


@contextmanager
def governing(requested: int | None = None, device: torch.device | str = "cpu") -> Iterator[ThreadGovernor]:
    """`govern` for the duration of a library call (training): afterwards the caller's governor (or
    none) and torch's thread count are back as they were."""
    global _current
    before, count = _current, torch.get_num_threads()
    try:
        yield govern(requested, device)
    finally:
        _current = before
        torch.set_num_threads(count)


@contextmanager
def capped(cap: int | None) -> Iterator[None]:
    """At most `cap` threads for the installed governor's count while the block runs (None, or no governor
    that chooses: nothing changes); its own choice again afterwards."""
    governor = _current
    if cap is None or governor is None or governor.fixed:
        yield
        return
    governor.cap = cap
    torch.set_num_threads(governor._wanted())
    try:
        yield
    finally:
        governor.cap = None
        torch.set_num_threads(governor._wanted())


def current() -> ThreadGovernor | None:
    return _current


def check() -> None:
    """Re-check the installed governor, if any (library code calls this per chunk of long work;
    without `govern()` the thread count is the caller's and is left alone)."""
    if _current is not None:
        _current.check()


def thread_count(n: int) -> str:
    """'1 thread', '2 threads': every message that counts threads says it this way."""
    return f"{n} thread{'s' if n != 1 else ''}"
