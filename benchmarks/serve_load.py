"""A bounded load test of `nnlm serve`, and of the server it replaced, in the same run. Each server runs as
`nnlm serve MODEL --port 0 --threads 1` in a subprocess on 127.0.0.1 (the reference: the same command from
the sources given by --baseline-src, e.g. the commit before the uvicorn server); the clients are asyncio
connections in this process, sending /api/score requests (Brown test paragraphs, as the page would) over
persistent HTTP/1.1 connections. Phases, each stopped at --duration seconds:

- C clients (1, 8, 64) alone: requests/s, latency p50 / p99, failed requests;
- a burst: 200 connections opened at once, one request each: how many failed;
- the same C clients beside 300 slow clients (half trickle their headers, half their body, one byte every
  0.5 s, reconnecting when cut off);
- 100 clients each send a 20k-token request and leave at once; then one small request: its latency;
- the server's stderr: how many lines it printed during all this.

Only 127.0.0.1 is ever contacted; every phase is bounded in time and connections.

    git -C /work/main archive 8c96660 src | tar -x -C /tmp/nnlm-8c96660
    git -C /work/main archive 120efe7 src | tar -x -C /tmp/nnlm-120efe7     # uvicorn with h11
    NLTK_DATA=../shared/nltk_data PYTHONPATH=src python benchmarks/serve_load.py \
        --baseline-src before=/tmp/nnlm-8c96660/src [--baseline-src h11=/tmp/nnlm-120efe7/src] [--model PATH] \
        [--duration 8]

Without --model a Kneser-Ney trigram is built on Brown train into a temporary directory.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from host import cpu_name
from rescore_brown import paragraphs

from nnlm.data.corpus import load_corpus

REQUEST_TIMEOUT = 30.0
LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)
CLOSES = re.compile(rb"connection:\s*close", re.IGNORECASE)


class Server:
    """`nnlm serve` in a subprocess; its stderr is drained and its lines counted."""

    def __init__(self, label: str, model: str, src: str, extra: list[str]) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
        self.label = label
        self.proc = subprocess.Popen([sys.executable, "-m", "nnlm", "serve", model, "--port", "0", "--threads", "1",
                                      *extra], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
        line = self.proc.stderr.readline().decode()  # "nnlm: serving NAME at http://127.0.0.1:PORT/ ..."
        if "http://127.0.0.1:" not in line:
            self.proc.kill()
            raise SystemExit(f"{label}: the server did not start: {line.strip()}")
        self.port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for raw in self.proc.stderr:
            self.stderr_lines.append(raw.decode(errors="replace").rstrip())

    def cpu_seconds(self) -> float:
        """The server's CPU time so far (user + system, all threads of the process and of its live
        children, the --workers), from /proc."""
        ticks = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat.parent.name) == self.proc.pid or int(fields[1]) == self.proc.pid:
                ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def score_request(port: int, text: str) -> bytes:
    body = json.dumps({"text": text}).encode()
    return (f"POST /api/score HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> tuple[bool, bool]:
    """(answered 200 with a score, the server closes the connection after it)."""
    writer.write(payload)
    head = await reader.readuntil(b"\r\n\r\n")
    body = await reader.readexactly(int(LENGTH.search(head).group(1)))
    return head[9:12] == b"200" and b"log10_prob" in body, CLOSES.search(head) is not None


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    failed: int = 0


async def client(port: int, payloads: list[bytes], turn: list[int], deadline: float, tally: Tally) -> None:
    conn = None
    while time.perf_counter() < deadline and turn[0] < len(payloads):
        payload = payloads[turn[0]]
        turn[0] += 1
        started = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), REQUEST_TIMEOUT)
            ok, closes = await asyncio.wait_for(exchange(*conn, payload), REQUEST_TIMEOUT)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, AttributeError):
            ok, closes = False, True
        tally.latencies.append(time.perf_counter() - started)
        tally.failed += not ok
        if closes and conn is not None:
            conn[1].close()
            conn = None
    if conn is not None:
        conn[1].close()


async def clients(port: int, payloads: list[bytes], count: int, duration: float) -> tuple[Tally, float]:
    tally, turn = Tally(), [0]
    started = time.perf_counter()
    await asyncio.gather(*(client(port, payloads, turn, started + duration, tally) for _ in range(count)))
    return tally, time.perf_counter() - started


async def slow_client(port: int, body_phase: bool, stop: asyncio.Event, cut_off: list[int]) -> None:
    """Trickle one byte every 0.5 s: the headers (never finished) or, after whole headers, the body."""
    head = f"POST /api/score HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    first, drip = ((head + "Content-Length: 100000\r\n\r\n").encode(), b" ") if body_phase else \
        (head.encode(), b"X-Slow: 1\r\n")
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(first)
            i = 0
            while not stop.is_set():
                writer.write(drip[i % len(drip):i % len(drip) + 1])
                await writer.drain()
                i += 1
                try:
                    if not await asyncio.wait_for(reader.read(65536), 0.5) and reader.at_eof():
                        break  # the server closed it
                except TimeoutError:
                    pass
            writer.close()
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(0.5)
        cut_off[0] += 1


async def burst(port: int, payload_for: list[bytes], count: int = 200) -> int:
    """`count` connections at once, one request each: how many failed."""
    async def one(payload: bytes) -> bool:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), REQUEST_TIMEOUT)
            ok, _ = await asyncio.wait_for(exchange(reader, writer, payload), REQUEST_TIMEOUT)
            writer.close()
            return ok
        except (OSError, asyncio.IncompleteReadError, TimeoutError, AttributeError):
            return False
    results = await asyncio.gather(*(one(payload_for[i % len(payload_for)]) for i in range(count)))
    return count - sum(results)


async def abandon_then_ask(port: int, big: bytes, small: bytes, count: int = 100) -> tuple[float, bool]:
    """`count` clients send `big` and leave; then one `small` request: (its latency in s, answered)."""
    for _ in range(count):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(big)
            await writer.drain()
            writer.close()
        except OSError:
            pass
    await asyncio.sleep(0.2)  # they are all in and gone
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ok, _ = await asyncio.wait_for(exchange(reader, writer, small), 60)
        writer.close()
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        ok = False
    return time.perf_counter() - started, ok


def row(server: str, phase: str, tally: Tally, wall: float) -> dict:
    ms = np.percentile(np.array(tally.latencies) * 1000, [50, 99]) if tally.latencies else [float("nan")] * 2
    out = {"server": server, "phase": phase, "requests": len(tally.latencies), "rps": len(tally.latencies) / wall,
           "p50": ms[0], "p99": ms[1], "failed": tally.failed}
    print(f"{server:10s} {phase:34s} {out['requests']:6d} req {out['rps']:8.1f} req/s  p50 {ms[0]:7.1f} ms  "
          f"p99 {ms[1]:7.1f} ms  failed {tally.failed}", flush=True)
    return out


async def measure(server: Server, texts: list[str], duration: float, slow: int) -> list[dict]:
    port, label = server.port, server.label
    payloads = [score_request(port, t) for t in texts]
    rows = []
    await clients(port, payloads[:50], 1, duration)  # warm-up
    for count in (1, 8, 64):
        rows.append(row(label, f"{count} clients", *await clients(port, payloads, count, duration)))
    failed = await burst(port, payloads)
    print(f"{label:10s} burst of 200 connections: {failed} failed", flush=True)
    rows.append({"server": label, "phase": "burst 200", "failed": failed})
    stop, cut_off = asyncio.Event(), [0]
    slow_tasks = [asyncio.ensure_future(slow_client(port, i % 2 == 1, stop, cut_off)) for i in range(slow)]
    await asyncio.sleep(2)  # they are connected and trickling
    for count in (1, 8, 64):
        rows.append(row(label, f"{count} clients beside {slow} slow", *await clients(port, payloads, count, duration)))
    stop.set()
    await asyncio.wait(slow_tasks, timeout=5)
    for task in slow_tasks:
        task.cancel()
    print(f"{label:10s} slow clients cut off by the server: {cut_off[0]}", flush=True)
    big = score_request(port, " ".join(["the"] * 19_999))
    took, ok = await abandon_then_ask(port, big, payloads[0])
    print(f"{label:10s} after 100 abandoned 20k-token requests a small one took {took * 1000:.0f} ms "
          f"({'answered' if ok else 'FAILED'})", flush=True)
    rows.append({"server": label, "phase": "after 100 abandoned", "ms": took * 1000, "ok": ok})
    await asyncio.sleep(1)
    print(f"{label:10s} stderr: {len(server.stderr_lines)} lines "
          f"({sum('Traceback' in line for line in server.stderr_lines)} tracebacks)", flush=True)
    return rows


async def interleaved(servers: list[Server], texts: list[str], duration: float, rounds: int) -> dict:
    """Requests/s of every server at 1, 8 and 64 clients, the servers taking turns phase by phase for
    `rounds` rounds (the order reversed every other round), so that a load changing during the run falls on
    all of them alike: {(label, count): [req/s of each round]}."""
    rates: dict[tuple[str, int], list[float]] = {}
    per_cpu: dict[tuple[str, int], list[float]] = {}
    for server in servers:
        await clients(server.port, [score_request(server.port, t) for t in texts[:50]], 1, duration / 2)  # warm-up
    for r in range(rounds):
        for count in (1, 8, 64):
            for server in (servers if r % 2 == 0 else servers[::-1]):
                payloads = [score_request(server.port, t) for t in texts]
                cpu = server.cpu_seconds()
                tally, wall = await clients(server.port, payloads, count, duration)
                cpu = server.cpu_seconds() - cpu
                rates.setdefault((server.label, count), []).append(len(tally.latencies) / wall)
                per_cpu.setdefault((server.label, count), []).append(len(tally.latencies) / max(cpu, 1e-9))
        print(f"round {r + 1} of {rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    for count in (1, 8, 64):
        print(f"{count:2d} clients, median req/s of {rounds} rounds: " + ", ".join(
            f"{s.label} {np.median(rates[s.label, count]):.0f}" for s in servers) +
              "; per second of the server's CPU: " + ", ".join(
            f"{s.label} {np.median(per_cpu[s.label, count]):.0f}" for s in servers), flush=True)
    return {key: float(np.median(values)) for key, values in rates.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a saved model (default: a KN trigram built on Brown train)")
    ap.add_argument("--baseline-src", action="append", default=[], metavar="[LABEL=]SRC",
                    help="a src/ directory of a server to compare with, measured first (repeatable; label: 'before')")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of each phase (default 8)")
    ap.add_argument("--requests", type=int, default=20000, help="requests per phase at most (default 20000)")
    ap.add_argument("--slow", type=int, default=300, help="slow clients (default 300)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="first compare requests/s at 1, 8, 64 clients with the servers taking turns, this many rounds")
    ap.add_argument("--also-workers", type=int, default=0, metavar="N",
                    help="also measure the same server with --workers N (labelled uvicorn-wN)")
    ap.add_argument("--rounds-only", action="store_true", help="stop after the rounds (no other phase)")
    ap.add_argument("--serve-args", default="", help="more options for the measured nnlm serve (e.g. '--workers 2')")
    args = ap.parse_args()
    corpus = load_corpus("brown")
    texts = [" ".join(p) for p in paragraphs(corpus.vocab.decode(corpus.test), 2000, 1, 60)]
    texts = (texts * (args.requests // max(len(texts), 1) + 1))[:args.requests]
    print(f"CPU: {cpu_name()}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start", flush=True)
    here = str(Path(__file__).resolve().parents[1] / "src")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from nnlm.ngram.build import build_ngram

            model = str(Path(tmp) / "kn3")
            build_ngram("kn", corpus, 3).save(Path(model))
        baselines = [b.split("=", 1) if "=" in b else ("before", b) for b in args.baseline_src]
        servers = [(label, src, []) for label, src in baselines] + \
            [("uvicorn", here, args.serve_args.split())]
        if args.also_workers:
            servers.append((f"uvicorn-w{args.also_workers}", here,
                            [*args.serve_args.split(), "--workers", str(args.also_workers)]))
        rows: list[dict] = []
        started = [Server(label, model, src, extra) for label, src, extra in servers]
        try:
            if args.rounds:
                medians = asyncio.run(interleaved(started, texts, args.duration, args.rounds))
                for label, _ in baselines:
                    print(f"median requests/s, uvicorn at 64 clients / {label} at 8 clients: "
                          f"{medians['uvicorn', 64] / medians[label, 8]:.2f}; at 64 / at 64: "
                          f"{medians['uvicorn', 64] / medians[label, 64]:.2f}", flush=True)
            for server in ([] if args.rounds_only else started):
                rows += asyncio.run(measure(server, texts, args.duration, args.slow))
        finally:
            for server in started:
                server.stop()
    rate = {(r["server"], r["phase"]): r["rps"] for r in rows if "rps" in r}
    for label, _ in ([] if args.rounds_only else baselines):
        for phase in ("1 clients", "8 clients", "64 clients"):
            print(f"requests/s ratio uvicorn / {label}, {phase}: {rate['uvicorn', phase] / rate[label, phase]:.2f}")
        print(f"requests/s ratio uvicorn at 64 clients / {label} at 8 clients: "
              f"{rate['uvicorn', '64 clients'] / rate[label, '8 clients']:.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at end", flush=True)
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
