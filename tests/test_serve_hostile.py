"""`nnlm serve` against a hostile client, over raw sockets: the server is `nnlm serve` in a subprocess on
127.0.0.1 with 1-second deadlines (started and stopped by the module's fixture), and every test ends by
checking that nothing but the start-up line reached its stderr. Request smuggling is refused or framed as
h11 frames it (one request in, at most one answer out), the Host / Origin / Content-Type rules hold, slow
clients are cut off at their deadline however the bytes trickle, a burst of 200 connections is answered in
full, abandoned requests are neither logged nor computed, and every refusal is one JSON object with its
status. Counts and deadlines are bounded: the module takes some 15 s."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import held_model

DEADLINE = 1.0          # --header-timeout and --body-timeout of the server under test
TIMER_SLACK = 0.01      # uvloop (libuv) keeps time in whole milliseconds: a timer may fire that much early
MAX_BODY = 200_000


@pytest.fixture(scope="module")
def kn3(tmp_path_factory) -> Path:
    from conftest import random_corpus_texts, write_text_corpus

    from nnlm.data import load_corpus
    from nnlm.ngram.build import build_ngram

    root = tmp_path_factory.mktemp("hostile")
    corpus = load_corpus(str(write_text_corpus(root / "rand", *random_corpus_texts())), use_cache=False)
    build_ngram("kn", corpus, 3).save(root / "kn3")
    return root / "kn3"


def start(args: list[str], stderr_path: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).parents[1] / "src"),
                                                                   os.environ.get("PYTHONPATH")) if p))
    with open(stderr_path, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "nnlm", "serve", *args], stdout=subprocess.DEVNULL,
                                stderr=err, env=env)


class Server:
    def __init__(self, proc: subprocess.Popen, stderr_path: Path, port: int) -> None:
        self.proc, self.stderr_path, self.port = proc, stderr_path, port
        self.host = f"127.0.0.1:{port}"

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def assert_quiet(self) -> None:
        """Only the start-up line on stderr: no traceback, no line per bad client."""
        lines = self.stderr().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nnlm: serving"), lines[:20]
        assert self.proc.poll() is None


@pytest.fixture(scope="module")
def server(kn3, tmp_path_factory) -> Server:
    stderr_path = tmp_path_factory.mktemp("hostile-log") / "stderr.txt"
    proc = start([str(kn3), "--port", "0", "--threads", "1", "--header-timeout", str(DEADLINE),
                  "--body-timeout", str(DEADLINE), "--max-body", str(MAX_BODY)], stderr_path)
    deadline = time.monotonic() + 60
    while "http://127.0.0.1:" not in stderr_path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"nnlm serve did not start: {stderr_path.read_text()}")
        time.sleep(0.05)
    port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", stderr_path.read_text()).group(1))
    yield Server(proc, stderr_path, port)
    proc.terminate()
    proc.wait(15)


# -- raw HTTP -------------------------------------------------------------------------------------------

def connect(server: Server, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_all(sock: socket.socket, quiet_for: float = 1.0, limit: float = 10.0) -> tuple[bytes, bool]:
    """(bytes received, whether the server closed) reading until it closes, `quiet_for` s pass without a
    byte after the first, or `limit` s in all. The first byte is waited for up to `limit`: on a loaded machine
    the server may take more than `quiet_for` to answer at all (seen at load 5-8: no answer within 1 s)."""
    data, closed, end = b"", False, time.monotonic() + limit
    while time.monotonic() < end:
        sock.settimeout(quiet_for if data else max(end - time.monotonic(), 0.001))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    return data, closed


def parse(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The responses in `raw`: (status, headers in lower case, body), framed by Content-Length."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"an incomplete response: {raw[:200]!r}"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers["content-length"])
        out.append((status, headers, rest[:length]))
        raw = rest[length:]
    return out


def exchange(server: Server, data: bytes, quiet_for: float = 1.0) -> tuple[list[tuple[int, dict, bytes]], bool]:
    with connect(server) as sock:
        sock.sendall(data)
        raw, closed = read_all(sock, quiet_for)
    return parse(raw), closed


def post(server: Server, path: str, body: bytes, headers: str = "", content_type: str = "application/json",
         host: str | None = None) -> bytes:
    kind = f"Content-Type: {content_type}\r\n" if content_type else ""
    return (f"POST {path} HTTP/1.1\r\nHost: {host or server.host}\r\n{kind}Content-Length: {len(body)}\r\n"
            f"{headers}\r\n").encode() + body


def assert_json_error(response: tuple[int, dict, bytes], status: int, fragment: str = "") -> dict:
    got, headers, body = response
    assert got == status, body
    assert headers["content-type"].startswith("application/json")
    answer = json.loads(body)
    assert answer["status"] == status and fragment in answer["error"], answer
    return answer


def call(server: Server, path: str, request: dict) -> tuple[int, dict]:
    responses, _ = exchange(server, post(server, path, json.dumps(request).encode(), "Connection: close\r\n"),
                            quiet_for=15)  # the server closes once it has answered
    assert len(responses) == 1
    return responses[0][0], json.loads(responses[0][2])


# -- request smuggling ----------------------------------------------------------------------------------

HIDDEN = b"GET /api/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def test_both_framings_refused_and_nothing_after_them_is_answered(server):
    hidden = HIDDEN.replace(b"127.0.0.1", server.host.encode())
    data = (f"POST /api/score HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").encode() + hidden
    responses, closed = exchange(server, data)
    assert len(responses) == 1 and closed
    assert_json_error(responses[0], 400, "Transfer-Encoding")  # the parser's or the guard's words
    server.assert_quiet()


def test_a_request_hidden_in_a_chunked_body_is_body(server):
    hidden = HIDDEN.replace(b"127.0.0.1", server.host.encode())
    body = b'{"text": "w1 w2"}' + hidden
    data = (f"POST /api/score HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n").encode() + body + b"\r\n0\r\n\r\n"
    responses, _ = exchange(server, data)
    assert len(responses) == 1  # the hidden GET was never parsed as a request
    assert_json_error(responses[0], 400, "not valid JSON")
    server.assert_quiet()


def test_a_chunked_json_body_is_read_as_one(server):
    body = json.dumps({"text": "w1 w2 w3"}).encode()
    data = (f"POST /api/score HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    for part in (body[:5], body[5:]):
        data += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    responses, closed = exchange(server, data + b"0\r\n\r\n")
    assert len(responses) == 1 and responses[0][0] == 200 and json.loads(responses[0][2])["tokens"] == 4


def test_nothing_after_connection_close_is_answered(server):
    hidden = HIDDEN.replace(b"127.0.0.1", server.host.encode())
    data = post(server, "/api/score", b'{"text": "w1"}', "Connection: close\r\n") + hidden
    responses, closed = exchange(server, data)
    assert len(responses) == 1 and closed and responses[0][0] == 200
    server.assert_quiet()


@pytest.mark.parametrize(("lengths", "status"), [
    (["2", "4"], 400),            # two Content-Length headers that differ
    (["2_4"], 400),               # int() would read 24
    (["+4"], 400),
    (["-1"], 400),
    (["4 4"], 400),
    (["0x10"], 400),
    (["9" * 30], 400),            # more digits than h11 reads
    ([str(10**12)], 413),         # a number, over --max-body: refused before a byte of it is read
    ([str(MAX_BODY + 1)], 413),
])
def test_content_length_is_digits_one_value_and_bounded(server, lengths, status):
    headers = "".join(f"Content-Length: {n}\r\n" for n in lengths)
    data = (f"POST /api/score HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n{headers}\r\n"
            '{"text": "w1 w2 w3"}').encode() + HIDDEN.replace(b"127.0.0.1", server.host.encode())
    responses, closed = exchange(server, data)
    assert len(responses) == 1 and closed
    assert_json_error(responses[0], status)
    server.assert_quiet()


def test_malformed_http_is_a_json_400(server):
    host = server.host.encode()
    for data in (b"GARBAGE\r\n\r\n",
                 b"POST /api/score HTTP/1.1\r\nHost: " + host + b"\r\nTransfer-Encoding: gzip\r\n\r\n",
                 b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nBad Header: x\r\n\r\n",
                 b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nX: a\r\n folded\r\n\r\n",
                 b"GET / HTTP/1.1\nHost: " + host + b"\n\n",
                 b"POST /api/score HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 2_4\r\n\r\n",
                 b"POST /api/score HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 2\r\nContent-Length: 4\r\n\r\n",
                 b"GET /\x00 HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"):
        responses, closed = exchange(server, data)
        assert len(responses) == 1 and closed
        status = responses[0][0]
        assert status in (400, 501)
        assert_json_error(responses[0], status, "not valid HTTP/1.1")
    for data, fragment in ((b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nHost: b\r\n\r\n", "one Host header"),
                           (b"GET / HTTP/1.1\r\n\r\n", "one Host header"),
                           (b"GET / HTTP/1.1\r\nHost: " + host +
                            b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "does not switch protocols"),
                           (b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n", "")):
        responses, closed = exchange(server, data)
        assert len(responses) == 1 and closed
        assert_json_error(responses[0], 400, fragment)
    server.assert_quiet()


def test_headers_over_16k_are_431(server):
    with connect(server) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {server.host}\r\nX: ".encode() + b"a" * 10000)
        time.sleep(0.1)  # the server bounds the headers it holds incomplete
        with contextlib.suppress(OSError):  # the server may have closed already
            sock.sendall(b"a" * 10000)
        raw, closed = read_all(sock)
    assert closed
    assert_json_error(parse(raw)[0], 431, "headers are over")
    server.assert_quiet()


# -- who may call -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "localhost", "127.0.0.1:1",
                                  "localhost.:{port}", "127.0.0.2:{port}"])
def test_a_host_not_allowed_is_refused(server, host):
    responses, closed = exchange(server, post(server, "/api/score", b'{"text": "w1"}', host=host.format(
        port=server.port)))
    assert len(responses) == 1 and closed
    assert_json_error(responses[0], 421, "does not answer for Host")
    get = f"GET /api/models HTTP/1.1\r\nHost: {host.format(port=server.port)}\r\n\r\n".encode()
    assert_json_error(exchange(server, get)[0][0], 421)
    no_host = b"GET /api/models HTTP/1.0\r\n\r\n"  # HTTP/1.0 may leave it out: still refused
    assert_json_error(exchange(server, no_host)[0][0], 421)


def test_loopback_names_are_answered(server):
    for name in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST"):
        data = f"GET /api/models HTTP/1.1\r\nHost: {name}:{server.port}\r\nConnection: close\r\n\r\n".encode()
        (status, _, body), = exchange(server, data)[0]
        assert status == 200 and json.loads(body)["models"][0]["name"] == "kn3"


def test_cross_origin_requests_are_refused(server):
    for origin in ("http://evil.example", "null", f"http://localhost:{server.port}", f"https://{server.host}"):
        responses, closed = exchange(server, post(server, "/api/score", b'{"text": "w1"}', f"Origin: {origin}\r\n"))
        assert len(responses) == 1 and closed
        assert_json_error(responses[0], 403, "cross-origin")
    data = post(server, "/api/score", b'{"text": "w1"}', f"Origin: http://{server.host}\r\nConnection: close\r\n")
    assert exchange(server, data)[0][0][0] == 200  # the page's own origin
    server.assert_quiet()


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                                  "", "application/jsonx", "text/json"])
def test_a_post_that_is_not_json_is_refused(server, kind):
    responses, closed = exchange(server, post(server, "/api/score", b'{"text": "w1"}', content_type=kind))
    assert len(responses) == 1 and closed
    assert_json_error(responses[0], 415, "application/json")


def test_json_with_a_charset_is_json(server):
    data = post(server, "/api/score", b'{"text": "w1"}', "Connection: close\r\n",
                content_type="Application/JSON; charset=utf-8")
    assert exchange(server, data)[0][0][0] == 200


# -- slow clients ---------------------------------------------------------------------------------------

def trickle(server: Server, head: bytes, drip: bytes, every: float = 0.1, limit: float = 6.0) -> tuple[float, bytes]:
    """Send `head`, then one byte of `drip` every `every` s until the server closes: (seconds it took, what
    it answered). The client never stops sending within the deadline."""
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(head)
        received = b""
        sock.settimeout(every)
        for byte in drip * 1000:
            if time.monotonic() - started > limit:
                break
            try:
                sock.send(bytes([byte]))
            except OSError:  # closed under us
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            received += chunk
        rest, _ = read_all(sock, 0.5, 2)
        return time.monotonic() - started, received + rest


def test_slow_headers_are_cut_at_the_deadline(server):
    took, answer = trickle(server, f"POST /api/score HTTP/1.1\r\nHost: {server.host}\r\n".encode(), b"X-Slow: aaaa\r\n")
    assert DEADLINE - TIMER_SLACK <= took < DEADLINE + 3
    assert_json_error(parse(answer)[0], 408, "headers")
    server.assert_quiet()


def test_slow_body_is_cut_at_the_deadline(server):
    head = post(server, "/api/score", b"")[:-len(b"Content-Length: 0\r\n\r\n")] + b"Content-Length: 5000\r\n\r\n"
    took, answer = trickle(server, head, b'{"text": "w1 w2"}   ')
    assert DEADLINE - TIMER_SLACK <= took < DEADLINE + 3
    assert_json_error(parse(answer)[0], 408, "body")
    server.assert_quiet()


def test_an_idle_connection_is_closed(server):
    with connect(server) as sock:
        started = time.monotonic()
        data, closed = read_all(sock, quiet_for=DEADLINE + 3, limit=DEADLINE + 5)
    assert closed and data == b"" and time.monotonic() - started < DEADLINE + 3


def test_a_burst_of_200_connections_is_answered_in_full(server):
    """Every request the client had written within the header deadline of starting to connect is answered. The
    server's deadline runs from its accept, which comes after the client began to connect, so a connection
    closed unanswered whose request was written sooner is the server's fault; one whose client (this test,
    starved of CPU under load) wrote later may rightly be closed as idle, with no bytes."""
    async def one(i: int) -> tuple[int | str, float]:
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = json.dumps({"text": f"w{i % 50} w{(i + 1) % 50} w3"}).encode()
        writer.write(post(server, "/api/score", body, "Connection: close\r\n"))
        await writer.drain()
        late = time.monotonic() - started
        raw = await reader.read()
        writer.close()
        if not raw:
            return "closed", late
        (status, _, answer), = parse(raw)
        return (status if json.loads(answer)["tokens"] == 4 else -1), late

    async def burst() -> list:
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(200)), return_exceptions=True), 60)

    results = asyncio.run(burst())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:5]
    on_time = [status for status, late in results if late < DEADLINE - TIMER_SLACK]
    assert on_time == [200] * len(on_time), sorted(results, key=lambda r: r[1])[-5:]
    assert all(status in (200, "closed") for status, _ in results), results
    assert on_time, f"the client wrote no request within {DEADLINE} s: {min(late for _, late in results):.2f} s"
    server.assert_quiet()


def test_requests_that_arrived_in_time_are_answered_after_the_loop_was_held(kn3):
    """The header deadline counts the client's time, not the server's: requests whose bytes wait in the
    server's socket buffers before their deadline are answered even when its event loop was held past it
    in a callback (as a CPU-bound neighbour holds it through a burst: libuv then runs the due timers before
    it reads the input). Before: closed with no answer (the 200-connection burst at load 3.5)."""
    from nnlm.serve.api import served_models
    from nnlm.serve.limits import Limits
    from nnlm.serve.server import ModelServer

    limits = Limits(header_timeout=DEADLINE, body_timeout=DEADLINE)
    srv = ModelServer(served_models([str(kn3)], timeout=20), limits=limits).start()
    try:
        loop = srv.server.servers[0].get_loop()
        socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(20)]
        time.sleep(0.3)  # accepted: their header deadlines run from here
        class Holder(asyncio.Protocol):  # a reader on the server's loop whose input takes a while to handle
            def data_received(self, data: bytes) -> None:
                time.sleep(DEADLINE + 0.5)

        held, holder = socket.socketpair()
        asyncio.run_coroutine_threadsafe(loop.create_connection(Holder, sock=held), loop).result(10)
        holder.send(b"x")  # the loop is now held inside an input callback past the deadlines
        time.sleep(0.2)
        for i, sock in enumerate(socks):
            sock.sendall(f"GET /api/models?i={i} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
                         "Connection: close\r\n\r\n".encode())
        statuses = []
        for sock in socks:
            with sock:
                raw, _ = read_all(sock, quiet_for=5)
                statuses.append(parse(raw)[0][0] if raw else None)
        holder.close()
    finally:
        srv.stop()
    assert statuses == [200] * 20


# -- clients that leave ---------------------------------------------------------------------------------

def test_clients_leaving_mid_request_leave_no_trace(server):
    body = json.dumps({"text": " ".join(f"w{i % 50}" for i in range(15000)), "top": 0}).encode()
    whole = post(server, "/api/score", body)
    cuts = [10, whole.index(b"\r\n\r\n"), len(whole) - len(body) // 2, len(whole)]
    for _ in range(10):
        for cut in cuts:
            with connect(server) as sock:
                sock.sendall(whole[:cut])
                if cut == len(whole):
                    time.sleep(0.01)  # the request is complete: it is being answered when the client leaves
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    status, answer = call(server, "/api/score", {"text": "w1 w2"})
    assert status == 200 and answer["tokens"] == 3
    time.sleep(0.3)  # anything the server would log about them is written by now
    server.assert_quiet()


# -- bad JSON, wrong fields, sizes ----------------------------------------------------------------------

@pytest.mark.parametrize(("path", "body", "status", "fragment"), [
    ("/api/score", b"{not json", 400, "not valid JSON"),
    ("/api/score", b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    ("/api/score", b'{"text": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400, "nested too deeply"),
    ("/api/score", b"\xff\xfe{}", 400, "not valid JSON"),
    ("/api/score", b'{"text": "w1", "k": 1' + b"0" * 5000 + b"}", 400, "not valid JSON"),
    ("/api/score", b'"text"', 400, "JSON object"),
    ("/api/score", b'{"model": ["net"], "text": "w1"}', 400, "'model' must be a str"),
    ("/api/score", b'{"model": {"a": 1}, "text": "w1"}', 400, "'model' must be a str"),
    ("/api/score", b'{"text": 5}', 400, "'text' must be a str"),
    ("/api/score", b'{"text": "w1", "top": "3"}', 400, "'top' must be a int"),
    ("/api/score", b'{"text": "w1", "top": true}', 400, "'top' must be a int"),
    ("/api/score", b'{"text": "w1", "top": NaN}', 400, "'top' must be a int"),
    ("/api/next", b'{"history": ["w1"]}', 400, "'history' must be a str"),
    ("/api/next", b'{"k": 1.5}', 400, "'k' must be a int"),
    ("/api/generate", b'{"temperature": "hot"}', 400, "'temperature' must be a float"),
    ("/api/generate", b'{"temperature": NaN}', 400, "'temperature' must be between"),
    ("/api/generate", b'{"seed": -1}', 400, "'seed' must be between"),
    ("/api/generate", b'{"top_k": []}', 400, "'top_k' must be a int"),
    ("/api/neighbors", b'{"word": "w1"}', 400, "only neural models"),
    ("/api/map", b'{"top": null}', 400, "only neural models"),
])
def test_bad_json_and_wrong_types_are_400(server, path, body, status, fragment):
    responses, _ = exchange(server, post(server, path, body, "Connection: close\r\n"))
    assert_json_error(responses[0], status, fragment)
    server.assert_quiet()


def test_every_text_field_has_the_same_token_limit(server):
    from nnlm.serve.api import MAX_TOKENS

    over = " ".join(["w1"] * (MAX_TOKENS + 1))
    for path, field in (("/api/score", "text"), ("/api/next", "history"), ("/api/generate", "prompt")):
        status, answer = call(server, path, {field: over})
        assert status == 400 and f"more than the {MAX_TOKENS}" in answer["error"], answer
    status, answer = call(server, "/api/next", {"history": " ".join(["w1"] * (MAX_TOKENS - 1)), "k": 2})
    assert status == 200 and len(answer["next"]) == 2


def test_a_chunked_body_over_the_limit_is_413(server):
    data = (f"POST /api/score HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"a" * 65536
    data += (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * (MAX_BODY // len(chunk) + 2)
    with connect(server) as sock:
        with contextlib.suppress(OSError):  # the server may close before it has taken everything
            sock.sendall(data)
        raw, closed = read_all(sock)
    assert closed
    assert_json_error(parse(raw)[0], 413, "over the")
    server.assert_quiet()


# -- binding --------------------------------------------------------------------------------------------

def test_a_taken_port_or_a_foreign_address_is_one_line_exit_2(kn3, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, fragment in ((["--port", str(port)], "Address already in use"),
                               (["--host", "203.0.113.9", "--port", "0"], "no such address")):
            err = tmp_path / "err.txt"
            proc = start([str(kn3), *args], err)
            assert proc.wait(60) == 2
            lines = err.read_text().splitlines()
            assert len(lines) == 1 and fragment in lines[0], lines


def test_host_rules():
    from nnlm.errors import NnlmError
    from nnlm.serve.hosts import HostRules

    rules = HostRules("127.0.0.1", 8000, ["MyBox.lan", "fe80::1", "proxy.example:443", "10.0.0.7"])
    assert rules.allowed == {"localhost:8000", "127.0.0.1:8000", "[::1]:8000", "mybox.lan:8000", "[fe80::1]:8000",
                             "proxy.example:443", "10.0.0.7:8000"}
    assert HostRules("0.0.0.0", 80).allowed == {"localhost", "localhost:80", "127.0.0.1", "127.0.0.1:80", "[::1]",
                                                "[::1]:80"}
    assert "192.168.1.5:8000" in HostRules("192.168.1.5", 8000).allowed  # the address given to --host
    assert rules.host_allowed("MYBOX.LAN:8000") and not rules.host_allowed("mybox.lan") and not rules.host_allowed(None)
    assert rules.same_origin(None, "localhost:8000") and rules.same_origin("http://localhost:8000", "localhost:8000")
    assert not rules.same_origin("http://127.0.0.1:8000", "localhost:8000")
    for bad in ("a b", "", "http://x", "x/y", "*"):
        with pytest.raises(NnlmError, match="is not a host name"):
            HostRules("127.0.0.1", 8000, [bad])


# -- abandoned work (in process: the batcher's counts are read directly) ------------------------------

def test_abandoned_requests_are_not_computed(kn3):
    """While the model is held busy, 12 clients send a 20k-token request each and leave; once it is free,
    none of their rows reach the model, and a later small request is answered by the next call."""
    from nnlm.loading import load
    from nnlm.serve.api import Served
    from nnlm.serve.batcher import Batcher
    from nnlm.serve.limits import Limits
    from nnlm.serve.server import ModelServer

    model = load(kn3)
    release, rows = threading.Event(), []

    held = held_model(model, release, rows, hold=20)
    batcher = Batcher(held)
    srv = ModelServer({"kn3": Served("kn3", held, batcher, 20.0)}, limits=Limits(header_timeout=5, body_timeout=5))
    srv.start()
    server = Server(None, None, srv.port)
    try:
        first = threading.Thread(target=call, args=(server, "/api/score", {"text": "w1 w2"}))
        first.start()
        while not rows:
            time.sleep(0.01)
        big = post(server, "/api/score", json.dumps({"text": " ".join(["w1"] * 19_999)}).encode())
        for _ in range(12):
            with connect(server) as sock:
                queued = batcher.jobs.qsize()  # read before sending: a quick server may queue the job at once
                sock.sendall(big)
                wait_until = time.monotonic() + 10
                while batcher.jobs.qsize() == queued and time.monotonic() < wait_until:
                    time.sleep(0.005)  # the request's job is queued: now its client leaves
        wait_until = time.monotonic() + 10
        while batcher.dropped + batcher.jobs.qsize() and not all(
                job.result.cancelled() for job in list(batcher.jobs.queue) if job is not None):
            assert time.monotonic() < wait_until, "the abandoned jobs were not cancelled"
            time.sleep(0.01)
        release.set()
        first.join(20)
        status, answer = call(server, "/api/score", {"text": "w3 w4"})
        assert status == 200 and np.isfinite(answer["log10_prob"])
        assert rows == [3, 3] and batcher.dropped == 12  # the first request and the last: nothing in between
    finally:
        release.set()
        srv.stop()
