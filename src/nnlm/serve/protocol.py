"""uvicorn's httptools protocol with the bounds it lacks. httptools wraps llhttp, Node's HTTP/1.1 parser, in
C: it is strict (one Content-Length, digits only; Transfer-Encoding with Content-Length refused; chunk
sizes, header names and values, CRLFs checked; a body is never taken for a request) and several times
cheaper per request than a parser in Python (docs/serving.md). uvicorn's protocol around it has no
deadline for a request's headers and no bound on their size, answers a malformed request in plain text,
and waits forever on a client that stops reading. This subclass adds:

- a header deadline: the request line and headers must be complete within `header_timeout` of the
  connection opening or of the previous answer, however the bytes trickle in (408 JSON, then closed).
  It counts the client's time, not the server's: when it comes due while the client's bytes wait unread in
  the socket (the loop was held, e.g. beside a CPU-bound job, and libuv runs due timers before it polls
  again), the connection gets a short grace to have them read, at most one more `header_timeout` in all;
- a header size bound: request line and headers over MAX_HEADER_BYTES are refused (431);
- a JSON 400 for a request llhttp refuses, with its reason, and nothing logged: a client's malformed
  request is not the server's error; an Upgrade (websocket, h2c) or CONNECT request is refused the same way;
- a write deadline: a client that stops reading its answer is dropped after `body_timeout`;
- a connection cap: beyond `max_connections` open connections a new one gets 503 JSON and is closed;
- a lingering close: a connection closed while the client may still be sending (a refused body) is
  half-closed and its input drained for up to LINGER seconds, so the client reads the error instead of a
  reset (closing a socket with unread input sends RST, and the client's kernel drops the answer with it).

The body's own deadline and size limit are the guard's (`nnlm.serve.guard`), at the ASGI level."""
from __future__ import annotations

import asyncio
import struct
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from nnlm.serve.limits import MAX_HEADER_BYTES, Limits
from nnlm.serve.responses import raw_error

LINGER = 2.0  # seconds a closed connection's input is still drained (bounded by the header deadline too)
GRACE_STEP = 0.05  # seconds a due header deadline waits for input the loop has not read yet, each time


def unread_input(transport: asyncio.BaseTransport) -> int:
    """Bytes the client has sent that wait in the connection's socket, not read yet (FIONREAD); 0 where
    it cannot be asked (no socket, not Unix)."""
    sock = transport.get_extra_info("socket")
    try:
        import fcntl
        import termios

        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    except (ImportError, AttributeError, OSError, ValueError):
        return 0


class LingeringTransport:
    """The connection's transport, whose `close()` half-closes (the answer is flushed, then FIN) and reads
    on until the client closes or LINGER seconds pass; all else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, linger: float, loop: asyncio.AbstractEventLoop) -> None:
        self.raw = transport
        self._linger = linger
        self._loop = loop
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def is_closing(self) -> bool:
        return self.lingering or self.raw.is_closing()

    def close(self) -> None:
        if self.lingering or self.raw.is_closing():
            return
        self.lingering = True
        try:
            self.raw.write_eof()
            self.raw.resume_reading()
        except (OSError, RuntimeError, NotImplementedError):
            self.raw.close()
            return
        self._loop.call_later(self._linger, self.raw.close)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0        # bytes read since the last request ended, while its successor's head is due
        self._in_head = True        # the next bytes are a request's line and headers (not a body)
        self._grace = 0.0           # seconds the current header deadline was extended for unread input

    # -- the connection cap and the header deadline
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        lingering = LingeringTransport(transport, min(LINGER, self.limits.header_timeout), self.loop)
        super().connection_made(lingering)  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, f"the server has {self.limits.max_connections} connections open; try again shortly")
            return
        self._arm_header_deadline()

    def _arm_header_deadline(self) -> None:
        self._cancel(self._header_timer)
        self._grace = 0.0
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._grace < self.limits.header_timeout and unread_input(self.transport.raw):
            self._grace += GRACE_STEP  # the server is late, not the client: read what it sent, then judge
            self._header_timer = self.loop.call_later(GRACE_STEP, self._headers_late)
            return
        if self._in_head and self._head_bytes:  # a request was under way
            self._refuse(408, f"the request's headers did not arrive within {self.limits.header_timeout:g} s")
        else:  # an idle connection: closing it is all there is to do
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():  # lingering: what the client still sends is read and dropped (its
            return                       # end of input closes the connection: asyncio does on eof_received)
        self._unset_keepalive_if_required()
        if self._in_head:  # llhttp holds no bound of its own: a header value may grow without end
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse_request(400, "the request is not served here: this server does not switch protocols "
                                      "(Upgrade) or open tunnels (CONNECT)")
            return
        except httptools.HttpParserError as exc:
            self._refuse_request(400, f"the request is not valid HTTP/1.1: {exc}")
            return
        if self._in_head and self._head_bytes > MAX_HEADER_BYTES:
            self._refuse_request(431, f"the request line and headers are over {MAX_HEADER_BYTES} bytes")

    # -- the parser's callbacks: the head's deadline and size apply until its headers are complete
    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes = True, 0  # what comes next on this connection is a new request's head

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes = False, 0
        self._cancel(self._header_timer)
        self._header_timer = None
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self._arm_header_deadline()  # the next request's headers are due from now (a pipelined one cancels it)
        super().on_response_complete()

    # -- protocol errors: JSON, no log line
    def send_400_response(self, msg: str) -> None:
        self._refuse_request(400, msg)

    def _refuse_request(self, status: int, message: str) -> None:
        """Answer a request the parser refused, unless an answer to an earlier one is half written (then all
        that is left is to close); the app's answer to this connection, if it is still working, goes nowhere."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        self._refuse(status, message)

    def _refuse(self, status: int, message: str) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(raw_error(status, message))
        self.transport.close()

    # -- a client that does not read its answer
    def pause_writing(self) -> None:
        super().pause_writing()
        self._cancel(self._write_timer)
        self._write_timer = self.loop.call_later(self.limits.body_timeout, self.transport.raw.abort)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel(self._write_timer)
        self._write_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel(self._header_timer)
        self._cancel(self._write_timer)
        self._header_timer = self._write_timer = None
        super().connection_lost(exc)

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()
