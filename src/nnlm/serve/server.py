"""`nnlm serve`'s HTTP server: the standard library's ThreadingHTTPServer (one thread per connection;
the model calls are merged by the batchers), the JSON API under /api/, the explorer page at /.

Bounded: a request body over `max_body` bytes is refused (413) before it is read, a client that stalls
is dropped after `timeout` seconds, and an answer the model cannot give in that time is a 503."""
from __future__ import annotations

import json
import socket
from concurrent.futures import TimeoutError as FutureTimeout
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from nnlm.errors import NnlmError
from nnlm.serve.api import ENDPOINTS, Served

MAX_BODY = 1 << 20
STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/explore.js": ("explore.js", "text/javascript"),
          "/explore.css": ("explore.css", "text/css")}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class ModelServer(ThreadingHTTPServer):
    """Holds the served models and the limits the request handler applies."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], models: dict[str, Served], max_body: int = MAX_BODY,
                 timeout: float = 30.0) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.models = models
        self.max_body = max_body
        self.request_timeout = timeout

    def server_close(self) -> None:
        super().server_close()
        for served in self.models.values():
            served.batcher.close()


class Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)  # a stalled client does not hold a thread
        # headers and body go out as two writes: without this, Nagle's algorithm holds the body back until
        # the client's delayed ACK, some 40 ms per request on a kept-alive connection
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the standard library's name)
        pass  # quiet: a load test would print a line per request

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/api/models":
            self._json(HTTPStatus.OK, {"models": [m.describe() for m in self.server.models.values()]})
        elif path in STATIC:
            name, kind = STATIC[path]
            self._send(HTTPStatus.OK, resources.files("nnlm.serve").joinpath("static", name).read_bytes(), kind)
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no page {path}"})

    def do_POST(self) -> None:  # noqa: N802
        endpoint = ENDPOINTS.get(self.path)
        if endpoint is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {self.path} (POST to {', '.join(ENDPOINTS)})"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._json(HTTPStatus.LENGTH_REQUIRED, {"error": "a request needs a Content-Length"})
            return
        if not 0 <= length <= self.server.max_body:
            self.close_connection = True  # the unread body must not be taken for the next request
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                       {"error": f"the request body has {length} bytes, more than the {self.server.max_body} allowed"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(request, dict):
                raise NnlmError("the request must be a JSON object")
            self._json(HTTPStatus.OK, endpoint(self.server.models, request))
        except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"the request is not valid JSON: {exc}"})
        except NnlmError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except FutureTimeout:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "the model did not answer in time; try again"})
        except TimeoutError:
            self.close_connection = True
        except Exception as exc:  # never a traceback to the client, nor a dead connection without an answer
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    def _json(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: HTTPStatus, payload: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(payload)
