"""The ASGI app of `nnlm serve` (starlette routing behind the guard): the JSON API under /api/ and the
explorer page at /.

An endpoint runs on a worker thread (the API is plain synchronous code: `nnlm.serve.api`), where the
request is parsed, answered and serialized, so the event loop only moves bytes and a 20k-token answer does
not stall the other clients. While it runs, the loop watches the connection: if the client leaves
(`http.disconnect`), the request's `Cancel` drops its queued model work."""
from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import CancelledError, ThreadPoolExecutor
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nnlm.errors import NnlmError
from nnlm.serve.api import ENDPOINTS, Endpoint, Served
from nnlm.serve.batcher import Cancel
from nnlm.serve.guard import Guard
from nnlm.serve.hosts import HostRules
from nnlm.serve.limits import Limits
from nnlm.serve.responses import error_body, error_response

log = logging.getLogger("nnlm.serve")
STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/explore.js": ("explore.js", "text/javascript"),
          "/explore.css": ("explore.css", "text/css")}
PAGE_HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff", "x-frame-options": "DENY",
                "referrer-policy": "no-referrer",
                # the page loads only its own files; the legend's swatches use inline style attributes
                "content-security-policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                           "frame-ancestors 'none'"}
WORKER_THREADS = 64   # requests answered at once (the rest wait for a thread; model calls are merged anyway)


def answer(endpoint: Endpoint, models: dict[str, Served], body: bytes, cancel: Cancel) -> tuple[int, bytes]:
    """(status, JSON bytes) for one request body; runs on a worker thread."""
    try:
        request = json.loads(body or b"{}")
    except RecursionError:
        return 400, error_body(400, "the request is not valid JSON: it is nested too deeply")
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return 400, error_body(400, f"the request is not valid JSON: {exc}")
    if not isinstance(request, dict):
        return 400, error_body(400, "the request must be a JSON object")
    try:
        return 200, json.dumps(endpoint(models, request, cancel)).encode()
    except NnlmError as exc:
        return 400, error_body(400, str(exc))
    except TimeoutError:
        return 503, error_body(503, "the model did not answer in time (the server is busy); try again")
    except CancelledError:
        raise  # the client left: nothing is answered
    except Exception as exc:  # a bug or a model failure, not the client's fault: one line on stderr
        log.error("internal error in %s: %s: %s", getattr(endpoint, "__name__", endpoint), type(exc).__name__, exc)
        return 500, error_body(500, f"internal error: {type(exc).__name__}: {exc}")


async def until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def build_app(models: dict[str, Served], limits: Limits, hosts: HostRules, executor: ThreadPoolExecutor) -> Guard:
    static = {path: (resources.files("nnlm.serve").joinpath("static", name).read_bytes(), kind)
              for path, (name, kind) in STATIC.items()}
    described = json.dumps({"models": [m.describe() for m in models.values()]}).encode()

    async def list_models(request: Request) -> Response:
        return Response(described, media_type="application/json", headers={"cache-control": "no-store"})

    async def page(request: Request) -> Response:
        payload, kind = static[request.url.path]
        return Response(payload, media_type=kind, headers=PAGE_HEADERS)

    def post(endpoint: Endpoint) -> Any:
        async def handle(request: Request) -> Response:
            body = await request.body()
            cancel = Cancel()
            work = asyncio.get_running_loop().run_in_executor(executor, answer, endpoint, models, body, cancel)
            gone = asyncio.ensure_future(until_disconnected(request))
            try:
                await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
                if not work.done():  # the client left (or the server is stopping): drop its work
                    cancel.cancel()
                    work.add_done_callback(lambda done: done.cancelled() or done.exception())
            if not work.done():
                return Response(status_code=499)  # never sent: the connection is gone
            status, payload = work.result()
            return Response(payload, status_code=status, media_type="application/json",
                            headers={"cache-control": "no-store"})
        return handle

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        path, method = request.url.path, request.method
        if exc.status_code == 404:
            message = (f"no endpoint {path} (POST to {', '.join(ENDPOINTS)}; GET /api/models)"
                       if path.startswith("/api/") else f"no page {path}")
        elif exc.status_code == 405:
            message = f"{method} is not allowed on {path} (use {(exc.headers or {}).get('Allow', 'another method')})"
        else:
            message = str(exc.detail)
        response = error_response(exc.status_code, message)
        response.headers.update(exc.headers or {})
        return response

    async def internal_error(request: Request, exc: Exception) -> Response:
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", close=True)

    routes = [Route("/api/models", list_models, methods=["GET"]),
              *(Route(path, post(endpoint), methods=["POST"]) for path, endpoint in ENDPOINTS.items()),
              *(Route(path, page, methods=["GET"]) for path in STATIC)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: internal_error})
    return Guard(app, limits, hosts)
