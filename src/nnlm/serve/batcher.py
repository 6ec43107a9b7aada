"""Requests from many clients merged into one model call: a worker thread per model takes every job
waiting (up to a row budget), stacks their context rows, calls `log_prob` or `distribution` once, and
hands each client its slice. A network call costs nearly the same for 1 row as for 100, so concurrent
clients share it instead of queueing for the model one by one.

A client that leaves takes its work with it: each request's jobs are registered with its `Cancel`, the
server cancels that when the client disconnects, and the worker skips a cancelled job instead of
computing an answer no one will read (100 abandoned 20k-token requests would otherwise hold up every
request queued behind them)."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field

import numpy as np

from nnlm.lm import LanguageModel

MAX_BATCH_ROWS = 1 << 14
DISTRIBUTION_ROW_COST = 64  # a distribution row is |V| floats: a batch holds MAX_BATCH_ROWS / 64 of them


class Cancel:
    """The model work of one request, dropped together when its client leaves (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: list[Future] = []
        self.cancelled = False

    def watch(self, future: Future) -> None:
        """Register `future`; cancel it at once (and raise CancelledError) if the request was already dropped."""
        with self._lock:
            if not self.cancelled:
                self._futures.append(future)
                return
        future.cancel()
        raise CancelledError

    def check(self) -> None:
        """Raise CancelledError if the request was dropped (for work done outside the batcher)."""
        if self.cancelled:
            raise CancelledError

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            futures, self._futures = self._futures, []
        for future in futures:
            future.cancel()  # a job the worker already started finishes; a waiting one is skipped


@dataclass
class Job:
    contexts: np.ndarray              # [rows, order-1]
    targets: np.ndarray | None        # [rows] for log_prob; None for distribution
    result: Future = field(default_factory=Future)

    @property
    def cost(self) -> int:
        return len(self.contexts) * (1 if self.targets is not None else DISTRIBUTION_ROW_COST)


class Batcher:
    """Runs a model's `log_prob` / `distribution` jobs in merged batches on one worker thread."""

    def __init__(self, model: LanguageModel, max_rows: int = MAX_BATCH_ROWS) -> None:
        self.model = model
        self.max_rows = max_rows
        self.batches = 0                         # model calls made: fewer than jobs when clients overlap
        self.dropped = 0                         # jobs skipped because their client had left
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.worker = threading.Thread(target=self._run, name=f"batcher-{model.kind_name()}", daemon=True)
        self.worker.start()

    def submit(self, contexts: np.ndarray, targets: np.ndarray | None, cancel: Cancel | None = None) -> Future:
        """Queue a job (targets None: distributions); its Future has the answer (an event loop awaits it
        with asyncio.wrap_future, a thread with `wait`)."""
        job = Job(contexts, targets)
        if cancel is not None:
            cancel.watch(job.result)
        self.jobs.put(job)
        return job.result

    @staticmethod
    def wait(future: Future, timeout: float) -> np.ndarray:
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            future.cancel()  # the caller gave up: the worker need not compute it
            raise

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray, timeout: float,
                 cancel: Cancel | None = None) -> np.ndarray:
        return self.wait(self.submit(contexts, targets, cancel), timeout)

    def distribution(self, contexts: np.ndarray, timeout: float, cancel: Cancel | None = None) -> np.ndarray:
        return self.wait(self.submit(contexts, None, cancel), timeout)

    def close(self) -> None:
        self.jobs.put(None)

    def _take(self, job: Job) -> bool:
        """Claim a job for this batch; False (and counted) if its client has left."""
        if job.result.set_running_or_notify_cancel():
            return True
        self.dropped += 1
        return False

    def _run(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            if not self._take(first):
                continue
            pending, rows = [first], first.cost
            while rows < self.max_rows:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self.jobs.put(None)
                    break
                if self._take(job):
                    pending.append(job)
                    rows += job.cost
            for wants_targets in (True, False):
                group = [j for j in pending if (j.targets is not None) == wants_targets]
                if group:
                    self._serve(group)

    def _serve(self, group: list[Job]) -> None:
        try:
            ctx = np.concatenate([j.contexts for j in group])
            if group[0].targets is not None:
                out = self.model.log_prob(ctx, np.concatenate([j.targets for j in group]))
            else:
                out = self.model.distribution(ctx)
            self.batches += 1
        except Exception as exc:  # every waiting client hears of it
            for job in group:
                job.result.set_exception(exc)
            return
        at = 0
        for job in group:
            job.result.set_result(out[at:at + len(job.contexts)])
            at += len(job.contexts)
