"""The one shape of every error `nnlm serve` answers: a JSON object `{"error": "one line", "status": N}`
with that HTTP status, whichever layer refuses the request (the HTTP parser, the guard, the router, an
endpoint). Never HTML, never a traceback."""
from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from starlette.responses import Response

JSON = b"application/json"


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": message, "status": status}).encode()


def error_response(status: int, message: str, close: bool = False) -> Response:
    """A starlette response; `close`: the connection ends after it (what remains of the request is unread)."""
    headers = {"cache-control": "no-store"} | ({"connection": "close"} if close else {})
    return Response(error_body(status, message), status_code=status, media_type="application/json", headers=headers)


async def send_error(send: Any, status: int, message: str, close: bool = False) -> None:
    """The error as ASGI messages (for the guard, which answers before any app runs)."""
    body = error_body(status, message)
    headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store")]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def raw_error(status: int, message: str) -> bytes:
    """The error as bytes on the wire, for the protocol layer, which answers where no ASGI cycle exists (a
    malformed request, headers that never finished); the connection is closed after it."""
    body = error_body(status, message)
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "cache-control: no-store\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body
