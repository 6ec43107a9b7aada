"""`nnlm serve --workers N`: N server processes answering on one listening socket.

One process answers with one Python thread at a time (the GIL): past one core's worth of requests, more
processes are the way to more throughput. The parent binds the socket and loads the models once (so a bad
model path or a taken port is one error line, and the children share the models' pages copy-on-write),
then forks the workers; each makes its own batchers, thread pool and event loop (threads do not survive a
fork, so none may exist before it) and accepts on the shared socket, the kernel handing each connection
to one of them. Torch runs single-threaded in the parent until the fork: a child of a process whose
OpenMP pool had started hangs in its first parallel operation (libgomp is not fork-safe).

The parent waits. SIGINT or SIGTERM to it is passed on as SIGTERM, and each worker stops as a single
server does (requests under way finish). A worker that dies stops the others: the command exits non-zero
with one line, rather than serving on with fewer workers than asked."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def fork_workers(count: int, work: Callable[[int], int]) -> int:
    """Run `work(i)` in `count` forked children (its return value is the child's exit status) and wait
    for all of them; the exit status: 0 if every worker ended cleanly, else the first failure's."""
    children: list[int] = []
    for index in range(count):
        pid = os.fork()
        if pid == 0:  # the worker: it never returns into the parent's code
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)  # until its server installs its own
            code = 1
            try:
                code = work(index)
            except KeyboardInterrupt:
                code = 0
            except BaseException as exc:  # noqa: BLE001 -- a worker's last words are one line, not a traceback
                print(f"nnlm: worker {index} stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
                if os.environ.get("NNLM_DEBUG") == "1":
                    traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    return _supervise(children)


def _supervise(children: list[int]) -> int:
    stopping = False

    def stop_all(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    running = set(children)
    previous = {sig: signal.signal(sig, stop_all) for sig in STOP_SIGNALS}
    status = 0
    try:
        while running:
            pid, raw = os.wait()
            running.discard(pid)
            code = os.waitstatus_to_exitcode(raw)
            if code != 0 and not stopping:
                worker = children.index(pid)
                print(f"nnlm: serve: worker {worker} ended with status {code}; stopping the others",
                      file=sys.stderr)
                status = status or (code if code > 0 else 1)
                stop_all()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status
