"""uvicorn's h11 protocol with the bounds it lacks. h11 parses HTTP/1.1 strictly (one Content-Length,
digits only; chunked framing checked; a body is never taken for a request), but uvicorn's protocol around
it has no deadline for a request's headers (its keep-alive timer stops at the first byte, and every byte
would restart it), answers a malformed request in plain text, and waits forever on a client that stops
reading. This subclass adds:

- a header deadline: the request line and headers must be complete within `header_timeout` of the
  connection opening or of the previous answer, however the bytes trickle in (408 JSON, then closed);
- a JSON 400 (or h11's own status, such as 431 for headers over 16 KB) for a request h11 refuses, with
  h11's reason, and nothing logged: a client's malformed request is not the server's error;
- a write deadline: a client that stops reading its answer is dropped after `body_timeout`;
- a connection cap: beyond `max_connections` open connections a new one gets 503 JSON and is closed;
- a lingering close: a connection closed while the client may still be sending (a refused body) is
  half-closed and its input drained for up to LINGER seconds, so the client reads the error instead of a
  reset (closing a socket with unread input sends RST, and the client's kernel drops the answer with it).

The body's own deadline and size limit are the guard's (`nnlm.serve.guard`), at the ASGI level."""
from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nnlm.serve.limits import MAX_HEADER_BYTES, Limits
from nnlm.serve.responses import raw_error

LINGER = 2.0  # seconds a closed connection's input is still drained (bounded by the header deadline too)


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


class _RecordingConnection(h11.Connection):
    """h11's connection, remembering why it refused the last request (uvicorn's handler drops the reason)."""

    refusal: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refusal = exc
            raise


class GuardedH11Protocol(H11Protocol):
    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.conn = _RecordingConnection(h11.SERVER, MAX_HEADER_BYTES)
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

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
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:  # a request was under way
            self._refuse(408, f"the request's headers did not arrive within {self.limits.header_timeout:g} s")
        else:  # an idle connection: closing it is all there is to do
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():  # lingering: what the client still sends is read and dropped (its
            return                       # end of input closes the connection: asyncio does on eof_received)
        super().data_received(data)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a new request's headers were parsed
            self._cancel(self._header_timer)
            self._header_timer = None

    def on_response_complete(self) -> None:
        self._arm_header_deadline()  # the next request's headers are due from now (a pipelined one cancels it)
        super().on_response_complete()

    # -- protocol errors: JSON, no log line
    def send_400_response(self, msg: str) -> None:
        refusal = self.conn.refusal
        status = refusal.error_status_hint if refusal is not None else 400
        reason = str(refusal) if refusal is not None else msg
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's answer, if it is still working, goes nowhere
            cycle.message_event.set()
            if cycle.response_started:  # an answer is half written: all that is left is to close
                self.transport.close()
                return
        self._refuse(status, f"the request is not valid HTTP/1.1: {reason}")

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
