"""A bounded load test of `nnlm serve`: the server runs as `nnlm serve MODEL --port 0` in a subprocess on
127.0.0.1, then C client threads (persistent HTTP/1.1 connections) send a fixed number of /api/score
requests (Brown test paragraphs), stopping early at --duration seconds. Prints throughput, latency
percentiles and the error count, and the same requests from one client measured first in the same run
as the reference (throughput ratio). Only 127.0.0.1 is ever contacted.

    NLTK_DATA=../shared/nltk_data PYTHONPATH=src python benchmarks/serve_load.py [--model PATH] \
        [--requests 2000] [--clients 8] [--duration 60] [--threads 1]

Without --model a Kneser-Ney trigram is built on Brown train into a temporary directory.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from rescore_brown import paragraphs

from nnlm.data.corpus import load_corpus


def start_server(model: str, threads: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "nnlm", "serve", model, "--port", "0", "--threads", str(threads)],
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # "nnlm: serving NAME at http://127.0.0.1:PORT/ ..."
    if "http://127.0.0.1:" not in line:
        proc.kill()
        raise SystemExit(f"the server did not start: {line.strip()}")
    return proc, int(line.split("http://127.0.0.1:")[1].split("/")[0])


def run_clients(port: int, texts: list[str], clients: int, duration: float) -> tuple[list[float], int, float]:
    """(latencies in seconds, errors, wall seconds) for the requests `texts`, shared among `clients` threads."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    next_index = [0]
    deadline = time.perf_counter() + duration

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.perf_counter() < deadline:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(texts):
                break
            body = json.dumps({"text": texts[i]})
            started = time.perf_counter()
            try:
                conn.request("POST", "/api/score", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                ok = response.status == 200 and "log10_prob" in json.loads(response.read())
            except (OSError, http.client.HTTPException, ValueError):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                errors[0] += not ok
        conn.close()

    started = time.perf_counter()
    workers = [threading.Thread(target=client) for _ in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return latencies, errors[0], time.perf_counter() - started


def report(label: str, latencies: list[float], errors: int, wall: float) -> float:
    ms = np.percentile(np.array(latencies) * 1000, [50, 90, 99, 100])
    rate = len(latencies) / wall
    print(f"{label:22s} {len(latencies):6d} requests in {wall:6.2f} s  {rate:8.1f} req/s  "
          f"latency ms p50 {ms[0]:6.1f} p90 {ms[1]:6.1f} p99 {ms[2]:6.1f} max {ms[3]:6.1f}  errors {errors}")
    return rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a saved model (default: a KN trigram built on Brown train)")
    ap.add_argument("--requests", type=int, default=2000, help="requests in the concurrent run (default 2000)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--duration", type=float, default=60.0, help="stop each run after this many seconds (default 60)")
    ap.add_argument("--threads", type=int, default=1, help="the server's torch threads (default 1)")
    args = ap.parse_args()
    corpus = load_corpus("brown")
    texts = [" ".join(p) for p in paragraphs(corpus.vocab.decode(corpus.test), args.requests, 1, 60)]
    texts = (texts * (args.requests // max(len(texts), 1) + 1))[:args.requests]
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from nnlm.ngram.build import build_ngram

            model = str(Path(tmp) / "kn3")
            build_ngram("kn", corpus, 3).save(Path(model))
        proc, port = start_server(model, args.threads)
        try:
            print(f"model {model}; load average {os.getloadavg()[0]:.2f} at start")
            run_clients(port, texts[:20], 1, args.duration)  # warm-up
            one = report("1 client (reference)", *run_clients(port, texts[:max(args.requests // 4, 1)], 1,
                                                               args.duration))
            many = report(f"{args.clients} clients", *run_clients(port, texts, args.clients, args.duration))
            print(f"throughput ratio {args.clients} clients / 1 client: {many / one:.2f}x; "
                  f"load average {os.getloadavg()[0]:.2f} at end")
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
