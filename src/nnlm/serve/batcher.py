"""Requests from many clients merged into one model call: a worker thread per model takes every job
waiting (up to a row budget), stacks their context rows, calls `log_prob` or `distribution` once, and
hands each client its slice. A network call costs nearly the same for 1 row as for 100, so concurrent
clients share it instead of queueing for the model one by one.

A client that leaves takes its work with it: each request's jobs are registered with its `Cancel`, the
server cancels that when the client disconnects, and the worker skips a cancelled job instead of
computing an answer no one will read (100 abandoned 20k-token requests would otherwise hold up every
request queued behind them).

A fast model (an n-gram model answers a sentence in microseconds) is served by an InlineBatcher instead:
the jobs of one turn of the server's event loop are merged and computed on the loop itself. Handing a job
to a thread and its answer back (a queue, a condition, a wake-up of the loop, the GIL passed twice) costs
such a model more CPU than its answer (docs/serving.md)."""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field

import numpy as np

from nnlm.lm import LanguageModel

MAX_BATCH_ROWS = 1 << 14
DISTRIBUTION_ROW_COST = 64  # a distribution row is |V| floats: a batch holds MAX_BATCH_ROWS / 64 of them
FAST_CALL = 1e-3  # seconds: a model scoring PROBE_ROWS rows within this is served on the event loop
PROBE_ROWS = 64


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


class BlockingCalls:
    """The blocking face of a batcher, for callers on a thread (the server's large requests): the
    subclass's `submit` queues a job; these wait for its answer."""

    def submit(self, contexts: np.ndarray, targets: np.ndarray | None, cancel: Cancel | None = None) -> Future:
        raise NotImplementedError

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


class Batcher(BlockingCalls):
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

    async def answer(self, contexts: np.ndarray, targets: np.ndarray | None, cancel: Cancel | None,
                     timeout: float) -> np.ndarray:
        """The job's answer, awaited on an event loop (a timeout or a cancellation of the awaiting task
        cancels the job too)."""
        return await asyncio.wait_for(asyncio.wrap_future(self.submit(contexts, targets, cancel)), timeout)

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


class InlineBatcher(BlockingCalls):
    """A fast model's jobs, merged per turn of the event loop and computed on it (the interface of
    Batcher). Jobs from other threads (the server's large requests) are passed to the loop, so the
    model is still called from one thread at a time; without a running server they are computed at once."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.batches = 0
        self.dropped = 0
        self._pending: list[tuple[Job, asyncio.Future]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    async def answer(self, contexts: np.ndarray, targets: np.ndarray | None, cancel: Cancel | None,
                     timeout: float | None = None) -> np.ndarray:
        loop = self._loop = asyncio.get_running_loop()
        job = Job(contexts, targets)
        if cancel is not None:
            cancel.watch(job.result)
        waiter = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)  # after the requests this turn of the loop has read
        self._pending.append((job, waiter))
        return await waiter  # a cancelled request cancels `waiter`: the flush skips it

    def submit(self, contexts: np.ndarray, targets: np.ndarray | None, cancel: Cancel | None = None) -> Future:
        loop = self._loop
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(self.answer(contexts, targets, cancel), loop)
        done: Future = Future()
        if cancel is not None:
            cancel.watch(done)
        with self._lock:
            done.set_result(self._compute(contexts, targets))
        return done

    def close(self) -> None:
        pass

    def _compute(self, contexts: np.ndarray, targets: np.ndarray | None) -> np.ndarray:
        self.batches += 1
        return self.model.log_prob(contexts, targets) if targets is not None else self.model.distribution(contexts)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        live = [(job, waiter) for job, waiter in pending
                if not waiter.done() and job.result.set_running_or_notify_cancel()]
        self.dropped += len(pending) - len(live)
        for wants_targets in (True, False):
            group = [(job, waiter) for job, waiter in live if (job.targets is not None) == wants_targets]
            if not group:
                continue
            try:
                ctx = np.concatenate([job.contexts for job, _ in group])
                out = self._compute(ctx, np.concatenate([job.targets for job, _ in group]) if wants_targets else None)
            except Exception as exc:  # every waiting client hears of it
                for job, waiter in group:
                    job.result.set_exception(exc)
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            at = 0
            for job, waiter in group:
                part = out[at:at + len(job.contexts)]
                at += len(job.contexts)
                job.result.set_result(part)
                if not waiter.done():
                    waiter.set_result(part)


def batcher_for(model: LanguageModel) -> Batcher | InlineBatcher:
    """An InlineBatcher for a model that scores PROBE_ROWS rows within FAST_CALL (the best of three calls
    after a first, which also compiles what the model compiles on first use), else a Batcher's thread."""
    contexts = np.zeros((PROBE_ROWS, model.context_size), dtype=np.int64)
    targets = np.arange(PROBE_ROWS, dtype=np.int64) % len(model.vocab)
    model.log_prob(contexts, targets)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        model.log_prob(contexts, targets)
        best = min(best, time.perf_counter() - started)
    return InlineBatcher(model) if best <= FAST_CALL else Batcher(model)
