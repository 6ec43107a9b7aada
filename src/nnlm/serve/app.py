"""The ASGI app of `nnlm serve` (starlette routing behind the guard): the JSON API under /api/ and the
explorer page at /.

A batched endpoint (score, next) with a small body runs on the event loop itself: it is parsed, tokenized
and answered there, and only its model rows leave it, for the model's batcher thread, awaited without
blocking. One thread hop per model call instead of a worker thread per request: with a thread per
request, the threads took the interpreter lock from the event loop at every socket call, and each request
cost twice the CPU. A large body (over INLINE_BODY: some thousands of tokens to tokenize) and the direct
endpoints (generate, neighbors, map) run on a few worker threads, so they do not stall the loop.

While an answer is computed, the loop watches the connection: if the client leaves (`http.disconnect`),
the request's `Cancel` drops its queued model work."""
from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nnlm.errors import NnlmError
from nnlm.serve.api import BATCHED, DIRECT, ENDPOINTS, Batched, Served, run_batched
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
INLINE_BODY = 16 * 1024   # bytes: a batched request up to this size is answered on the event loop
WORKER_THREADS = 8        # for large and direct requests; a request waiting for the model holds one
WATCH_AFTER = 0.01        # seconds after which a request still being answered has its connection watched


class BadJson(Exception):
    pass


def parse(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body or b"{}")
    except RecursionError:
        raise BadJson("the request is not valid JSON: it is nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BadJson(f"the request is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadJson("the request must be a JSON object")
    return request


async def run_on_loop(answer: Batched, cancel: Cancel) -> dict[str, Any]:
    """Drive a batched endpoint: each model call is queued with the batcher and awaited."""
    try:
        call = next(answer)
        while True:
            # a timeout or a cancellation of this task cancels the batcher's job too
            call = answer.send(await call.served.batcher.answer(call.contexts, call.targets, cancel,
                                                                call.served.timeout))
    except StopIteration as done:
        return done.value


def answer_on_thread(path: str, models: dict[str, Served], body: bytes, cancel: Cancel) -> bytes:
    cancel.check()  # a request whose client left while it waited for a thread costs nothing more
    request = parse(body)
    answer = run_batched(BATCHED[path](models, request), cancel) if path in BATCHED else \
        DIRECT[path](models, request, cancel)
    cancel.check()  # nor is it encoded (20k tokens: tens of ms)
    return json.dumps(answer).encode()


def build_app(models: dict[str, Served], limits: Limits, hosts: HostRules, executor: ThreadPoolExecutor) -> Guard:
    static = {path: (resources.files("nnlm.serve").joinpath("static", name).read_bytes(), kind)
              for path, (name, kind) in STATIC.items()}
    described = json.dumps({"models": [m.describe() for m in models.values()]}).encode()

    async def list_models(request: Request) -> Response:
        return Response(described, media_type="application/json", headers={"cache-control": "no-store"})

    async def page(request: Request) -> Response:
        payload, kind = static[request.url.path]
        return Response(payload, media_type=kind, headers=PAGE_HEADERS)

    async def respond(path: str, body: bytes, cancel: Cancel) -> tuple[int, bytes]:
        try:
            if path in BATCHED and len(body) <= INLINE_BODY:
                result = await run_on_loop(BATCHED[path](models, parse(body)), cancel)
                return 200, json.dumps(result).encode()
            return 200, await asyncio.get_running_loop().run_in_executor(executor, answer_on_thread, path, models,
                                                                         body, cancel)
        except (BadJson, NnlmError) as exc:
            return 400, error_body(400, str(exc))
        except TimeoutError:
            return 503, error_body(503, "the model did not answer in time (the server is busy); try again")
        except Exception as exc:  # a bug or a model failure, not the client's fault: one line on stderr
            log.error("internal error on %s: %s: %s", path, type(exc).__name__, exc)
            return 500, error_body(500, f"internal error: {type(exc).__name__}: {exc}")

    def post(path: str) -> Any:
        async def handle(request: Request) -> Response:
            body = await request.body()
            on_loop = path in BATCHED and len(body) <= INLINE_BODY
            if not on_loop:  # a large body: first let the loop read what followed it (a client that sent
                await asyncio.sleep(0)  # it and left has its end of input waiting), and do nothing for it
                if await request.is_disconnected():
                    return Response(status_code=499)  # never sent: the connection is gone
            cancel, task, left = Cancel(), asyncio.current_task(), asyncio.Event()
            watcher: list[asyncio.Task] = []

            async def watch() -> None:  # the client leaves: its model work is dropped, this request ends
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                left.set()
                cancel.cancel()
                task.cancel()

            # small batched answers mostly come sooner: their watcher (a task) starts only if they do not
            start_watching = asyncio.get_running_loop().call_later(
                WATCH_AFTER if on_loop else 0, lambda: watcher.append(asyncio.ensure_future(watch())))
            try:
                status, payload = await respond(path, body, cancel)
            except asyncio.CancelledError:
                if not left.is_set():
                    raise  # the server is stopping
                task.uncancel()
                return Response(status_code=499)  # never sent: the connection is gone
            finally:
                start_watching.cancel()
                for waiting in watcher:
                    waiting.cancel()
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
              *(Route(path, post(path), methods=["POST"]) for path in ENDPOINTS),
              *(Route(path, page, methods=["GET"]) for path in STATIC)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: internal_error})
    return Guard(app, limits, hosts)
