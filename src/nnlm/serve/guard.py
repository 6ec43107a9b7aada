"""The ASGI middleware in front of the app: every rule a request must pass before any endpoint sees it,
each refusal one JSON error (nnlm.serve.responses) after which the connection is closed, since the rest
of the request is not read.

In order: the Host must be one this server answers (421), an `Origin` must be its own (403), a request
may not frame its body twice (Transfer-Encoding with Content-Length: 400), a POST must be
`application/json` (415, which also keeps HTML forms from posting: a browser sends JSON cross-origin only
after a CORS preflight, which this server never grants), a declared body over `max_body` is refused
before it is read (413), a chunked one as soon as it grows past it, and the whole body must arrive within
`body_timeout` of the headers (408). The app then gets the body in one message.

Nothing a client does puts a traceback on stderr: an exception that escapes the app (a bug, not the
client's fault) is answered 500 and logged as one line."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nnlm.serve.hosts import HostRules
from nnlm.serve.limits import Limits
from nnlm.serve.responses import send_error

log = logging.getLogger("nnlm.serve")
Message = dict[str, Any]
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client disconnected before its request was complete: there is no one to answer."""


def header_values(scope: dict[str, Any], name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key == name]


def is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


class Guard:
    def __init__(self, app: ASGIApp, limits: Limits, hosts: HostRules) -> None:
        self.app = app
        self.limits = limits
        self.hosts = hosts

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            self.check_headers(scope)
            body = await self.read_body(scope, receive)
            await self.app(scope, replay(body, receive), tracked_send)
        except Refused as refusal:
            if not started:
                await send_error(send, refusal.status, str(refusal), close=True)
        except ClientGone:
            pass
        except Exception as exc:  # a bug: one line on stderr, a JSON 500 to the client
            log.error("internal error on %s %s: %s: %s", scope["method"], scope["path"], type(exc).__name__, exc)
            if not started:
                await send_error(send, 500, f"internal error: {type(exc).__name__}: {exc}", close=True)

    def check_headers(self, scope: dict[str, Any]) -> None:
        hosts = header_values(scope, b"host")
        if len(hosts) > 1 or (not hosts and scope.get("http_version") == "1.1"):  # RFC 9112 3.2: 400
            raise Refused(400, f"an HTTP/1.1 request must have one Host header, this one has {len(hosts)}")
        if not hosts or not self.hosts.host_allowed(hosts[0]):
            shown = hosts[0] if hosts else "none"
            raise Refused(421, f"this server does not answer for Host {shown!r} (it answers "
                               f"{', '.join(sorted(self.hosts.allowed))}; nnlm serve --allow-host NAME adds one)")
        for origin in header_values(scope, b"origin"):
            if not self.hosts.same_origin(origin, hosts[0]):
                raise Refused(403, f"cross-origin request from {origin!r} refused: the API answers pages it "
                                   "serves itself")
        lengths = header_values(scope, b"content-length")
        if lengths and header_values(scope, b"transfer-encoding"):
            raise Refused(400, "a request may not have both Transfer-Encoding and Content-Length")
        if scope["method"] == "POST":
            kinds = header_values(scope, b"content-type")
            if len(kinds) != 1 or not is_json(kinds[0]):
                shown = kinds[0] if kinds else "none"
                raise Refused(415, f"a POST must be Content-Type: application/json, not {shown!r}")
        if lengths and int(lengths[0]) > self.limits.max_body:  # the parser has checked it is digits, and one value
            raise Refused(413, f"the request body has {int(lengths[0])} bytes, more than the {self.limits.max_body} "
                               "allowed")

    async def read_body(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Message]]) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise ClientGone
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limits.max_body:
                        raise Refused(413, f"the request body is over the {self.limits.max_body} bytes allowed")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise Refused(408, f"the request body did not arrive within {self.limits.body_timeout:g} s") from None


def replay(body: bytes, receive: Callable[[], Awaitable[Message]]) -> Callable[[], Awaitable[Message]]:
    """The whole body as the first message; then the client's own (only `http.disconnect` comes after)."""
    delivered = False

    async def receive_replayed() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_replayed
