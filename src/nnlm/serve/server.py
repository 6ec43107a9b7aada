"""`nnlm serve`'s HTTP server: uvicorn (its httptools protocol, bounded by `nnlm.serve.protocol`) running the
app of `nnlm.serve.app` on a socket this module binds itself, so that a taken port or an address that
cannot be bound is one clear NnlmError before anything starts, and the listen queue is ours (2048).

Logging is one line per event and never a traceback: uvicorn's and asyncio's loggers print only errors,
as `nnlm serve: ...`; what a client does wrong is answered, not logged."""
from __future__ import annotations

import logging
import resource
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from nnlm.errors import NnlmError
from nnlm.serve.api import Served
from nnlm.serve.app import WORKER_THREADS, build_app
from nnlm.serve.hosts import HostRules
from nnlm.serve.limits import Limits
from nnlm.serve.protocol import GuardedHttpToolsProtocol

GRACEFUL_STOP = 5  # seconds requests under way get to finish when the server stops
EVENT_LOOP = "auto"  # uvloop (the event loop in C) where installed (the serve extra, not on Windows), else asyncio


class OneLine(logging.Formatter):
    """`nnlm serve: message (ExceptionType: why)`: an exception's traceback is never printed."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message = f"{message.rstrip()} ({type(exc).__name__}: {exc})"
        return "nnlm serve: " + " ".join(message.split())


def quiet_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "asyncio", "nnlm.serve"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(logging.ERROR)


def bind(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on host:port, or one NnlmError saying why not."""
    where = f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise NnlmError(f"cannot listen on {where}: {getattr(exc, 'strerror', None) or exc} "
                        "(--host takes an address or name of this machine)") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not over a live server: only TIME_WAIT
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        hint = {98: "another program listens there: stop it or choose another --port",
                99: "this machine has no such address: choose another --host",
                13: "ports below 1024 need privileges: choose --port 1024 or above"}.get(exc.errno or 0, "")
        raise NnlmError(f"cannot listen on {where}: {exc.strerror or exc}" + (f" ({hint})" if hint else "")) from None
    return sock


def raise_open_files_limit(wanted: int) -> None:
    """Connections are file descriptors: make room for the connection cap if the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class ModelServer:
    """The models behind HTTP on host:port (0: any free port; `.port` says which), or on `sock`, bound
    and listening already."""

    def __init__(self, models: dict[str, Served], host: str = "127.0.0.1", port: int = 0,
                 limits: Limits | None = None, allow_hosts: list[str] | tuple[str, ...] = (),
                 sock: socket.socket | None = None) -> None:
        import uvicorn

        self.models = models
        self.limits = limits or Limits()
        self.host = host
        self.sock = sock if sock is not None else bind(host, port, self.limits.backlog)
        self.port = self.sock.getsockname()[1]
        self.hosts = HostRules(host, self.port, list(allow_hosts))
        raise_open_files_limit(self.limits.max_connections + 256)
        quiet_logging()
        self.executor = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="nnlm-serve")
        config = uvicorn.Config(build_app(models, self.limits, self.hosts, self.executor),
                                http=partial(GuardedHttpToolsProtocol, limits=self.limits), loop=EVENT_LOOP,
                                ws="none", lifespan="off",
                                interface="asgi3", log_config=None, access_log=False, proxy_headers=False,
                                server_header=False, backlog=self.limits.backlog,
                                timeout_keep_alive=self.limits.keep_alive, timeout_graceful_shutdown=GRACEFUL_STOP)
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.url_of(self.host, self.port)

    @staticmethod
    def url_of(host: str, port: int) -> str:
        shown = "127.0.0.1" if host in ("", "0.0.0.0") else f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def serve_forever(self) -> None:
        """Answer until SIGINT / SIGTERM (uvicorn stops gracefully on either); then release everything."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.close()

    def start(self) -> ModelServer:
        """Serve on a background thread (tests, benchmarks); `stop()` ends it."""
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                        name="nnlm-serve")
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(GRACEFUL_STOP + 5)
        self.close()

    def close(self) -> None:
        self.sock.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        for served in self.models.values():
            served.batcher.close()
