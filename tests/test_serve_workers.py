"""`nnlm serve --workers N`: the models are loaded once, N forked workers answer on one port, a stop
signal to the parent stops them all cleanly, a worker that dies stops the rest with one line and a
non-zero exit, and a bad model is one error line before anything forks. Every server here listens on
127.0.0.1 and is stopped by the test."""
from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from test_serve_hostile import kn3, start  # noqa: F401 -- the module's KN trigram fixture and launcher


def children_of(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet waited for, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def started(model: Path, tmp_path: Path, workers: int = 2):
    log = tmp_path / "stderr.txt"
    proc = start([str(model), "--port", "0", "--threads", "1", "--workers", str(workers)], log)
    deadline = time.monotonic() + 60
    while "http://127.0.0.1:" not in log.read_text() or len(children_of(proc.pid)) < workers:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"nnlm serve --workers did not start: {log.read_text()}")
        time.sleep(0.05)
    port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text()).group(1))
    return proc, log, port


def score(port: int, text: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/score", json.dumps({"text": text}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as answer:
        return json.loads(answer.read())


def test_workers_answer_alike_and_stop_on_sigterm(kn3, tmp_path):  # noqa: F811
    proc, log, port = started(kn3, tmp_path)
    try:
        workers = children_of(proc.pid)
        assert len(workers) == 2
        answers = {score(port, "w1 w2 w3")["log10_prob"] for _ in range(12)}  # a connection each
        assert len(answers) == 1  # every worker gives the same number
        assert "by 2 workers" in log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert not any(alive(pid) for pid in workers)  # the parent waited for each
        lines = log.read_text().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nnlm: serving"), lines
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_worker_that_dies_stops_the_others(kn3, tmp_path):  # noqa: F811
    proc, log, port = started(kn3, tmp_path)
    try:
        first, second = children_of(proc.pid)
        os.kill(first, signal.SIGKILL)
        assert proc.wait(20) != 0
        assert not alive(second)
        said = log.read_text().splitlines()[1:]
        assert len(said) == 1 and "ended with status -9; stopping the others" in said[0], said
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_bad_model_is_one_line_before_any_fork(tmp_path):
    log = tmp_path / "stderr.txt"
    proc = start([str(tmp_path / "missing"), "--port", "0", "--workers", "3"], log)
    assert proc.wait(60) == 2
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnlm: error:"), lines
