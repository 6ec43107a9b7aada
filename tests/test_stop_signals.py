"""SIGINT/SIGTERM to `nnlm train`: a checkpoint at the stop, one line, exit 128 + signal, and a
resume that ends with the same weights as a run never stopped."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nnlm.neural.run import train as tr
from nnlm.neural.run.stop_signals import StoppedBySignal, StopRequest

REPO = Path(__file__).resolve().parents[1]
TINY = ["--preset", "mlp7", "--hidden", "8", "--features", "4", "--batch-size", "16", "--threads", "1",
        "--recipe", "modern", "--no-progress"]


def weights(run: Path) -> dict[str, torch.Tensor]:
    state = json.loads((run / "state.json").read_text())
    return load_file(str(run / state["tensors"]))


def start_and_signal(cmd: list[str], out: Path, signum: int) -> subprocess.CompletedProcess:
    """Start training, wait until it is inside an epoch (a checkpoint with step > 0 exists), send
    the signal, and wait for the process to end by itself."""
    env = os.environ | {"PYTHONPATH": str(REPO / "src")}

    def as_from_a_terminal() -> None:  # a test run in the background of a script inherits SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        state_file = out / "state.json"
        if state_file.exists() and json.loads(state_file.read_text())["step"] > 0:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "training ended before it could be signalled: " + proc.stderr.read()[-2000:]
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_a_checkpoint_and_resume_ends_where_an_unstopped_run_ends(random_corpus, tmp_path, signum):
    corpus, epochs = tmp_path / "rand", 3
    whole = tmp_path / "whole"
    tr.train(whole, {"corpus": str(corpus), "preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16,
                     "threads": 1, "recipe": "modern", "epochs": epochs}, progress=False, log=lambda s: None)

    stopped = tmp_path / "stopped"
    cmd = [sys.executable, "-m", "nnlm", "train", "--corpus", str(corpus), "--out", str(stopped),
           "--epochs", str(epochs), "--checkpoint-minutes", "0.0005", *TINY]
    proc = start_and_signal(cmd, stopped, signum)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nnlm:")]
    assert len(errors) == 1 and f"stopped by {name}" in errors[0] and "--resume" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"stopped by {name}" in proc.stdout  # the run's log says it too
    state = json.loads((stopped / "state.json").read_text())
    assert not state["finished"] and state["step"] > 0

    tr.train(stopped, {"threads": 1, "epochs": epochs}, resume=True, progress=False, log=lambda s: None)
    a, b = weights(whole), weights(stopped)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_hogwild_stops_its_workers_and_saves_on_sigterm(random_corpus, tmp_path):
    corpus, out = tmp_path / "rand", tmp_path / "hog"
    cmd = [sys.executable, "-m", "nnlm", "train", "--corpus", str(corpus), "--out", str(out), "--epochs", "200",
           "--checkpoint-minutes", "0.0005", "--parallel", "hogwild", "--workers", "2", *TINY]
    proc = start_and_signal(cmd, out, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]
    assert "stopped by SIGTERM" in proc.stderr and "Traceback" not in proc.stderr
    state = json.loads((out / "state.json").read_text())
    assert not state["finished"] and state["epoch"] < 200


def test_a_stop_request_restores_the_handlers_it_replaced():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopRequest() as request:
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not request.requested and time.monotonic() < deadline:
            time.sleep(0.001)
        assert request.requested and request.name == "SIGTERM"
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]  # a second one acts as usual
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_during_validation_stops_it_and_resume_validates_first(random_corpus, tmp_path, monkeypatch):
    options = {"corpus": str(tmp_path / "rand"), "preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16,
               "threads": 1, "recipe": "modern", "epochs": 2}
    whole = tmp_path / "whole"
    tr.train(whole, options, progress=False, log=lambda s: None)

    real_perplexity, calls = tr.scored_validation, []

    def slow_validation(*args):  # the second epoch's validation is signalled, and would take a minute
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)
        return real_perplexity(*args)

    monkeypatch.setattr(tr, "scored_validation", slow_validation)
    stopped, started = tmp_path / "stopped", time.monotonic()
    with pytest.raises(StoppedBySignal, match="stopped by SIGTERM at epoch 2"):
        tr.train(stopped, options, progress=False, log=lambda s: None)
    assert time.monotonic() - started < 30  # not the minute of validation
    state = json.loads((stopped / "state.json").read_text())
    assert state["epoch"] == 1 and state["batch"] > 0 and len(state["history"]) == 1  # epoch 2 done, not validated

    monkeypatch.setattr(tr, "scored_validation", real_perplexity)
    final = tr.train(stopped, {"threads": 1, "epochs": 2}, resume=True, progress=False, log=lambda s: None)
    assert [h["valid_ppl"] for h in final["history"]] == [
        h["valid_ppl"] for h in json.loads((whole / "state.json").read_text())["history"]]
    a, b = weights(whole), weights(stopped)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_sigint_the_shell_ignores_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopRequest():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    finally:
        signal.signal(signal.SIGINT, before)
