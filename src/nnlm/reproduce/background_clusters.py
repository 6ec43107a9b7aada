"""The class rows' clusterings in a second process, while the first builds the n-gram rows and trains the nets.

Why: the exchange clustering is one compiled thread (nnlm.wordclasses.exchange_kernels); the class counts built
after the nets (Table 1: c = 150, 200, 1000, 2000) took a minute or two of the main job one after the
other, at its end, while the other core sat idle. Started at the beginning of the call, a forked child
clusters them in the table's order and saves each as `ngram_rows.word_classes` would (OUT/clusters/c{c}.npz,
complete, with its seconds), so the class rows later only read their classes and build. The nets'
trainer sees the busy core (nnlm.threads) and trains with one thread meanwhile.

The clusterings do not depend on the order or the process (exchange_clusters is deterministic), so the
rows are those a sequential call builds. A row that comes before its clustering is done waits for it
until its own deadline; then the child is stopped and the row clusters in-process, as before (a budget
too short for the child to finish still gets what the planner grants).
"""
from __future__ import annotations

import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

START_METHOD = "fork" if sys.platform == "linux" else "spawn"  # fork: no re-import of the CLI and torch
POLL_SECONDS = 0.2


def _cluster_all(train: np.ndarray, vocab_size: int, counts: list[int], folder: str, done) -> None:
    """The child: cluster into each of `counts` classes in turn, save it, and report it done."""
    from nnlm.wordclasses.exchange import exchange_clusters, save_word_classes

    for c in counts:
        t0 = time.perf_counter()
        found = exchange_clusters(train, vocab_size, c, progress=False)
        save_word_classes(Path(folder) / f"c{c}.npz", found, time.perf_counter() - t0)
        done.put(c)


class BackgroundClusters:
    """A child process clustering train into each of `counts` classes, saved in `folder`."""

    def __init__(self, train: np.ndarray, vocab_size: int, counts: list[int], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        ctx = multiprocessing.get_context(START_METHOD)
        self.counts, self.finished = list(counts), set()
        self._done = ctx.SimpleQueue()
        self._process = ctx.Process(target=_cluster_all, args=(train, vocab_size, self.counts, str(folder),
                                                               self._done), daemon=True)
        self._process.start()

    def _collect(self) -> None:
        while not self._done.empty():
            self.finished.add(self._done.get())

    def wait(self, c: int, deadline: float | None) -> bool:
        """Wait until the child has saved c's classes (True), it died, or `deadline` (time.monotonic())
        passed; in the last two cases the child is stopped and False returned (the caller clusters)."""
        if c not in self.counts:
            return False
        while True:
            self._collect()
            if c in self.finished:
                return True
            if not self._process.is_alive():
                self._collect()
                return c in self.finished
            if deadline is not None and time.monotonic() >= deadline:
                self.stop()
                return False
            time.sleep(POLL_SECONDS)

    def stop(self) -> None:
        """Stop the child if it is still running (what it saved stays; a clustering it was in is lost)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self.counts = sorted(self.finished)
